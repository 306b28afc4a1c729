"""What every table generator shares: reading the result files, grouping and formatting
their rows, and the provenance columns every row carries."""
import csv
import os
from collections import OrderedDict

CPU_COLUMNS = ("revision", "date", "machine", "load")


class DataError(Exception):
    pass



def read_csv(root, rel):
    path = os.path.join(root, rel)
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise DataError(f"{rel}: cannot read ({e.strerror})")
    for i, r in enumerate(rows, 2):
        if None in r or any(v is None for v in r.values()):
            raise DataError(f"{rel}:{i}: the row has another number of columns than the header")
    return rows


def need(rows, rel, columns):
    if rows:
        missing = [c for c in columns if c not in rows[0]]
        if missing:
            raise DataError(f"{rel}: missing column(s) {', '.join(missing)}")
    return rows


def provenance(r):
    return tuple(r[c] for c in CPU_COLUMNS)


def group(rows, key):
    """Rows grouped by key(row), groups in the order they first appear."""
    out = OrderedDict()
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out



def table(header, rows):
    def cell(x):
        return str(x).replace("|", "\\|")
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def gb(nbytes):
    """Decimal units, as the tools print them: 751 MB, 2.24 GB."""
    n = float(nbytes)
    return f"{n / 1e6:.0f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def thousands(text):
    """1234.5 -> 1,234.5; text that is not a number is returned as it is."""
    try:
        x = float(text)
    except ValueError:
        return text
    decimals = len(text.split(".")[1]) if "." in text else 0
    return f"{x:,.{decimals}f}"


def rel_link(doc, target, root):
    return os.path.relpath(os.path.join(root, target), os.path.dirname(os.path.join(root, doc)))


STRATEGIES = ["all-keep", "chen-sqrtn", "chen-sqrtn-linear", "chen-greedy", "chen-greedy-linear",
              "lp", "checkmate"]


def batch_cell(batch, time_limited, upper_bound, extra=""):
    if batch == "":
        return ""
    s = batch + ("*" if time_limited == "yes" else "")
    if upper_bound and upper_bound != batch:
        s += f" ({upper_bound})"
    return s + extra


def newest(rows):
    """The newest of rows: the latest date, and among equal dates the last in the file."""
    dated = [(r["date"], i) for i, r in enumerate(rows) if r["date"][:1].isdigit()]
    if not dated:
        return rows[-1]
    return rows[max(dated)[1]]
