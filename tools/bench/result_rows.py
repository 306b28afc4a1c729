"""Rows of the result files under tools/bench/results/ (docs/benchmarks.md#results-as-data):
the provenance every row ends with, and appending a row to a CSV file with its header."""
import csv
import datetime
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def provenance(machine, load):
    """The revision, date, machine and load columns of a row measured now."""
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=ROOT).stdout.strip() or "not recorded"
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
