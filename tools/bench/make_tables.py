#!/usr/bin/env python3
"""The result tables of README.md and docs/, generated from the result files under
tools/bench/results/, and the index of the code's Notes in docs/design.md.

A generated block sits between two marker comments in a Markdown file:

  <!-- tables:NAME begin -->
  ...
  <!-- tables:NAME end -->

and NAME is one of TABLES in tables/registry.py (each generator lives in the module of its
results: tables/zoo.py, tables/maxbatch.py, ...). Every row of a results table carries the
revision, date, machine and load of the run it comes from ("not recorded" where the run did not
record it).

Usage: tools/bench/make_tables.py [--check] [--self-test] [--root DIR]
  (no flag)    rewrites every generated block of README.md and docs/**/*.md in place
  --check      writes nothing; exits 1 when a block differs from what would be generated, a
               marker is unknown or unpaired, or a relative link of README.md or docs/ names a
               file or heading that does not exist
  --self-test  checks that --check catches an edited number, a broken link and a lost marker
  --root DIR   the repository root (default: two folders above this script)
Exit codes: 0 success, 1 a difference, a broken link or unreadable result data, 2 usage.
Python 3 standard library only.
"""
import argparse
import os
import re
import sys

from tables.common import DataError
from tables.markdown import broken_links, check, read_all, regenerate


def self_test(root):
    texts = read_all(root)
    failures = []
    if check(root, texts):
        failures.append("the files as they are do not pass --check")
    blocks = [(doc, m) for doc, t in texts.items()
              for m in re.finditer(r"<!-- tables:[a-z0-9-]+ begin -->\n(.*?)\n<!--", t, re.S)]
    if not blocks:
        failures.append("no generated block to edit")
    else:
        doc, m = blocks[0]
        body = m.group(1)
        digit = re.search(r"\d", body)
        edited = body[:digit.start()] + str((int(digit.group()) + 1) % 10) + body[digit.end():]
        t = texts[doc]
        if not check(root, {**texts, doc: t[:m.start(1)] + edited + t[m.end(1):]}):
            failures.append(f"an edited number in {doc} passes --check")
        if not check(root, {**texts, doc: t + "\n[x](no-such-file.md)\n"}):
            failures.append("a link to a missing file passes --check")
        if not check(root, {**texts, doc: t + "\n[x](#no-such-heading)\n"}):
            failures.append("a link to a missing heading passes --check")
        end = t.index("end -->", m.end(1))
        if not check(root, {**texts, doc: t[:end] + "end ->" + t[end + len("end -->"):]}):
            failures.append("a lost end marker passes --check")
    for f in failures:
        print(f"make_tables: self-test: {f}", file=sys.stderr)
    return 1 if failures else 0


def main(argv):
    p = argparse.ArgumentParser(prog="make_tables.py", description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true")
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.realpath(__file__)))))
    args = p.parse_args(argv)
    root = os.path.abspath(args.root)
    if args.self_test:
        return self_test(root)
    texts = read_all(root)
    if args.check:
        problems = check(root, texts)
        for pr in problems:
            print(f"make_tables: {pr}", file=sys.stderr)
        if not problems:
            print(f"make_tables: {len(texts)} Markdown files match the result files")
        return 1 if problems else 0
    changed = 0
    for doc, text in texts.items():
        try:
            want = regenerate(root, doc, text)
        except DataError as e:
            print(f"make_tables: {e}", file=sys.stderr)
            return 1
        if want != text:
            path = os.path.join(root, doc)
            with open(path + ".tmp", "w", encoding="utf-8") as f:  # a whole file or none
                f.write(want)
            os.replace(path + ".tmp", path)
            changed += 1
            print(f"make_tables: wrote {doc}")
    for pr in (b for doc, t in read_all(root).items() for b in broken_links(
            root, doc, t, lambda full: open(full, encoding="utf-8").read())):
        print(f"make_tables: {pr}", file=sys.stderr)
    if not changed:
        print("make_tables: every generated table is up to date")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DataError as e:
        print(f"make_tables: {e}", file=sys.stderr)
        sys.exit(1)
