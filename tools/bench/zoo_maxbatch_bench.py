#!/usr/bin/env python3
"""How close checkmate's largest batch is to the truth on the zoo: `maxbatch --strategies
checkmate` per network (FLOPs cost model, 16 GB), its answer, its proven upper bound and the
proof behind that bound (`bound_source`: the probe whose relaxation or MILP proved a batch
infeasible, or the working set of the largest node). Prints a table and appends one CSV row per
network to --csv (tools/bench/results/zoo/maxbatch_brackets.csv):
  config, batch (checkmate's answer), upper_bound, working_set_bound, bound_source, status,
  limit_s, threads, seconds (the whole run), and the provenance columns revision, date,
  machine, load.
Usage: zoo_maxbatch_bench.py --bin build/tools [--configs densenet121,inception_v3]
       [--budget 16GB] [--time-limit 60] [--threads 1] [--csv FILE] [--machine TEXT]
       [--load TEXT]"""
import argparse
import csv
import json
import os
import subprocess
import time

from result_rows import ROOT, append_row, provenance

FIELDS = ["config", "batch", "upper_bound", "working_set_bound", "bound_source", "status",
          "limit_s", "threads", "seconds", "revision", "date", "machine", "load"]


def zoo_configs():
    """The networks of the zoo's Figure 5 (tools/bench/results/zoo/runs.csv), in its order."""
    with open(os.path.join(ROOT, "tools/bench/results/zoo/runs.csv"), newline="") as f:
        return [r["config"] for r in csv.DictReader(f)]


def run_one(a, config):
    cmd = [os.path.join(a.bin, "maxbatch"), "--config", os.path.join(ROOT, "configs", config + ".yaml"),
           "--budget", a.budget, "--strategies", "checkmate", "--time-limit", str(a.time_limit),
           "--threads", str(a.threads), "--json", "--log-level", "0"]
    row = {k: "" for k in FIELDS}
    row.update(config=config, limit_s=f"{a.time_limit:g}", threads=str(a.threads))
    start = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    row["seconds"] = f"{time.time() - start:.0f}"
    if out.returncode != 0:
        row["status"] = "error: " + (out.stderr.strip().splitlines() or ["failed"])[-1][:300]
        return row
    j = json.loads(out.stdout.splitlines()[-1])
    row.update(batch=str(j.get("batch", "")), upper_bound=str(j.get("upper_bound", "")),
               working_set_bound=str(j.get("working_set_bound", "")),
               bound_source=j.get("bound_source", ""), status=j.get("status", ""))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--configs", default="")
    ap.add_argument("--budget", default="16GB")
    ap.add_argument("--time-limit", type=float, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--csv", default="")
    ap.add_argument("--machine", default="not recorded")
    ap.add_argument("--load", default="not recorded")
    a = ap.parse_args()
    configs = a.configs.split(",") if a.configs else zoo_configs()
    print(f"{'config':18} {'batch':>6} {'bound':>6} {'bracket':>7}  proof of the bound")
    for config in configs:
        row = run_one(a, config)
        row.update(provenance(a.machine, a.load, a.bin))
        bracket = (f"{int(row['upper_bound']) / int(row['batch']):.3f}"
                   if row["batch"] not in ("", "0") and row["upper_bound"] else "")
        print(f"{config:18} {row['batch']:>6} {row['upper_bound']:>6} {bracket:>7}  "
              f"{row['bound_source'] or row['status']}  ({row['seconds']} s)", flush=True)
        if a.csv:
            append_row(a.csv, FIELDS, row)


if __name__ == "__main__":
    main()
