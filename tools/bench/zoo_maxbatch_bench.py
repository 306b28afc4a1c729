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
RERUN_FIELDS = ["config", "strategy", "batch", "upper_bound", "time_limited", "limit_s",
                "revision", "date", "machine", "load"]


def zoo_configs():
    """The networks of the zoo's Figure 5 (tools/bench/results/zoo/runs.csv), in its order."""
    with open(os.path.join(ROOT, "tools/bench/results/zoo/runs.csv"), newline="") as f:
        return [r["config"] for r in csv.DictReader(f)]


def text(v):
    return "" if v is None else str(v)


def run_one(a, config):
    """The bracket row of checkmate and the JSON line of every strategy that ran."""
    cmd = [os.path.join(a.bin, "maxbatch"), "--config", os.path.join(ROOT, "configs", config + ".yaml"),
           "--budget", a.budget, "--strategies", a.strategies, "--time-limit", str(a.time_limit),
           "--threads", str(a.threads), "--json", "--log-level", "0"]
    row = {k: "" for k in FIELDS}
    row.update(config=config, limit_s=f"{a.time_limit:g}", threads=str(a.threads))
    start = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    row["seconds"] = f"{time.time() - start:.0f}"
    if out.returncode != 0:
        row["status"] = "error: " + (out.stderr.strip().splitlines() or ["failed"])[-1][:300]
        return row, []
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    j = next((x for x in lines if x.get("strategy") == "checkmate"), {})
    row.update(batch=text(j.get("batch")), upper_bound=text(j.get("upper_bound")),
               working_set_bound=text(j.get("working_set_bound")),
               bound_source=j.get("bound_source", ""), status=j.get("status", ""))
    return row, lines


def rerun_rows(a, config, lines, prov):
    """One maxbatch_reruns.csv row per strategy that applies to the graph."""
    rows = []
    for j in lines:
        if j.get("batch") is None and j.get("status", "").startswith("not applicable"):
            continue
        r = {"config": config, "strategy": j["strategy"], "batch": text(j.get("batch")),
             "upper_bound": text(j.get("upper_bound")),
             "time_limited": "yes" if j.get("status") == "time-limit" else "no",
             "limit_s": f"{a.time_limit:g}"}
        r.update(prov)
        rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--configs", default="")
    ap.add_argument("--budget", default="16GB")
    ap.add_argument("--time-limit", type=float, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--strategies", default="checkmate")
    ap.add_argument("--csv", default="")
    ap.add_argument("--reruns-csv", default="")
    ap.add_argument("--machine", default="not recorded")
    ap.add_argument("--load", default="not recorded")
    a = ap.parse_args()
    configs = a.configs.split(",") if a.configs else zoo_configs()
    print(f"{'config':18} {'batch':>6} {'bound':>6} {'bracket':>7}  proof of the bound")
    for config in configs:
        row, lines = run_one(a, config)
        prov = provenance(a.machine, a.load, a.bin)
        row.update(prov)
        bracket = (f"{int(row['upper_bound']) / int(row['batch']):.3f}"
                   if row["batch"] not in ("", "0") and row["upper_bound"] else "")
        print(f"{config:18} {row['batch']:>6} {row['upper_bound']:>6} {bracket:>7}  "
              f"{row['bound_source'] or row['status']}  ({row['seconds']} s)", flush=True)
        if a.csv:
            append_row(a.csv, FIELDS, row)
        if a.reruns_csv:
            for r in rerun_rows(a, config, lines, prov):
                append_row(a.reruns_csv, RERUN_FIELDS, r)


if __name__ == "__main__":
    main()
