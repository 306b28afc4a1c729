"""Rows of the result files under tools/bench/results/ (docs/benchmarks.md#results-as-data):
the provenance every row ends with, and appending a row to a CSV file with its header."""
import csv
import datetime
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tools_revision(tools):
    """The revision the tools in folder `tools` were built at (`plan --version`'s "git REV",
    shortened, "-dirty" kept), or None when it does not say."""
    try:
        out = subprocess.run([os.path.join(tools, "plan"), "--version"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\(git ([0-9a-f]{7,})(-dirty)?\)", out)
    return m.group(1)[:7] + (m.group(2) or "") if m else None


def provenance(machine, load, tools=None):
    """The revision, date, machine and load columns of a row measured now: the revision the
    tools in `tools` were built at where they say, else the repository's HEAD (a run that spans
    commits keeps its binaries' revision)."""
    rev = tools and tools_revision(tools)
    rev = rev or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=ROOT).stdout.strip() or "not recorded"
    return {"revision": rev, "date": datetime.date.today().isoformat(), "machine": machine,
            "load": load}


def append_row(path, fields, row):
    """Appends `row` to the CSV file `path`, writing the header first when the file is new."""
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        if new:
            w.writeheader()
        w.writerow(row)
