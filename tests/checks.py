"""What the Python test scripts share: checks that collect failures instead of stopping at the
first, and the report that ends a script (its exit status)."""


class Checks:
    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        """Records `what` as a failure unless `cond` holds; returns `cond`."""
        if not cond:
            self.failures.append(what)
        return cond

    def report(self):
        """Prints every failure and a last line; 1 if any check failed, else 0."""
        for f in self.failures:
            print("FAIL: " + f)
        print("ok" if not self.failures else f"{len(self.failures)} checks failed")
        return 1 if self.failures else 0
