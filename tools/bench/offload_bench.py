#!/usr/bin/env python3
"""Offload against recomputation alone (FLOPs cost model): the largest batch under a budget for
chen-sqrtn, chen-sqrtn-offload, greedy-offload, checkmate and checkmate-offload at several link
bandwidths
(`maxbatch --json`, all in one run so checkmate-offload starts from checkmate's answer), and the
overhead over budgets at the config's batch (`sweep`, the paper's Figure 4) with and without
copies.
Appends to --maxbatch-csv one row per (model, link):
  model, precision, budget, link_gbps, device_tflops, copy_overlap, chen_sqrtn, chen_sqrtn_offload,
  greedy_offload, checkmate,
  checkmate_bound,
  working_set_bound (no schedule, with copies or without, fits above it), checkmate_overhead, checkmate_offload, offload_overhead, ratio (checkmate-offload / checkmate),
  seconds, note, and the provenance columns revision, date, machine, load;
and to --sweep-csv one row per (model, link, budget):
  model, batch, link_gbps, device_tflops, copy_overlap, budget_bytes, checkmate_overhead, offload_overhead
  (empty: no schedule found), offload_copied_note, and the provenance columns.
Usage: offload_bench.py --bin build/tools [--models vgg19,resnet50,unet,gpt2] [--links 12.5,25,50]
       [--budget 16GB] [--time-limit 60] [--copy-overlap stage|stream] [--sweep-links 25]
       [--sweep-points 6]
       [--sweep-time-limit 20] [--maxbatch-csv FILE] [--sweep-csv FILE] [--machine TEXT]
       [--load TEXT]"""
import argparse
import csv
import json
import os
import re
import subprocess
import tempfile
import time

from result_rows import ROOT, append_row, provenance

PROV = ["revision", "date", "machine", "load"]
MAXBATCH_FIELDS = (["model", "precision", "budget", "link_gbps", "device_tflops", "copy_overlap",
                    "chen_sqrtn",
                    "chen_sqrtn_offload", "greedy_offload", "checkmate",
                    "checkmate_bound", "working_set_bound", "checkmate_overhead", "checkmate_offload",
                    "offload_overhead", "ratio", "seconds", "note"] + PROV)
SWEEP_FIELDS = (["model", "batch", "link_gbps", "device_tflops", "copy_overlap", "budget_bytes",
                 "checkmate_overhead", "offload_overhead"] + PROV)
MODELS = ["vgg19", "resnet50", "unet", "gpt2"]


def config(model):
    return os.path.join(ROOT, "configs", model + ".yaml")


def config_batch(model):
    with open(config(model)) as f:
        m = re.search(r"^batch:\s*(\d+)", f.read(), re.M)
    return m.group(1) if m else ""


def run_maxbatch(a, model, link):
    """One maxbatch run of the four strategies at `link` GB/s: a CSV row."""
    cmd = [os.path.join(a.bin, "maxbatch"), "--config", config(model), "--budget", a.budget,
           "--strategies",
           "chen-sqrtn,chen-sqrtn-offload,greedy-offload,checkmate,checkmate-offload",
           "--link-bandwidth", str(link),
           "--device-tflops", f"{a.device_tflops:g}", "--copy-overlap", a.copy_overlap,
           "--time-limit", str(a.time_limit), "--json", "--log-level", "0"]
    row = {k: "" for k in MAXBATCH_FIELDS}
    row.update(model=model, precision="fp32", budget=a.budget, link_gbps=str(link),
               device_tflops=f"{a.device_tflops:g}", copy_overlap=a.copy_overlap)
    start = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    row["seconds"] = f"{time.time() - start:.0f}"
    if out.returncode != 0:
        row["note"] = (out.stderr.strip().splitlines() or ["failed"])[-1][:300]
        return row
    for line in out.stdout.splitlines():
        j = json.loads(line)
        key = j["strategy"].replace("-", "_")
        if key.startswith("chen") or key == "greedy_offload":
            row[key] = str(j.get("batch", ""))
            continue
        over = "checkmate_overhead" if key == "checkmate" else "offload_overhead"
        row[key] = str(j.get("batch", ""))
        row[over] = f"{j['overhead']:.4f}" if "overhead" in j else ""
        if key == "checkmate":
            row["checkmate_bound"] = str(j.get("upper_bound", ""))
            row["working_set_bound"] = str(j.get("working_set_bound", ""))
        else:
            row["note"] = j.get("status", "")
    if row["checkmate"] and row["checkmate_offload"] and int(row["checkmate"]) > 0:
        row["ratio"] = f"{int(row['checkmate_offload']) / int(row['checkmate']):.3f}"
    return row


def run_sweep(a, model, link):
    """One sweep of checkmate and checkmate-offload at `link` GB/s: CSV rows per budget."""
    with tempfile.TemporaryDirectory() as out_dir:
        cmd = [os.path.join(a.bin, "sweep"), "--config", config(model), "--strategies",
               "checkmate,checkmate-offload", "--link-bandwidth", str(link), "--device-tflops",
               f"{a.device_tflops:g}", "--copy-overlap", a.copy_overlap, "--points",
               str(a.sweep_points), "--time-limit",
               str(a.sweep_time_limit), "--log-level", "0", "--output", out_dir]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"sweep {model} failed: {out.stderr.strip()[-300:]}")
            return []
        with open(os.path.join(out_dir, "sweep.csv")) as f:
            cells = list(csv.DictReader(f))
    by_budget = {}
    for c in cells:
        r = by_budget.setdefault(c["budget_bytes"], {k: "" for k in SWEEP_FIELDS})
        r.update(model=model, batch=config_batch(model), link_gbps=str(link),
                 device_tflops=f"{a.device_tflops:g}", copy_overlap=a.copy_overlap,
                 budget_bytes=c["budget_bytes"])
        key = "checkmate_overhead" if c["strategy"] == "checkmate" else "offload_overhead"
        r[key] = c["overhead"] if c["feasible"] == "1" else ""
    return [by_budget[b] for b in sorted(by_budget, key=int)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--links", default="12.5,25,50")
    ap.add_argument("--budget", default="16GB")
    ap.add_argument("--device-tflops", type=float, default=100)
    ap.add_argument("--time-limit", type=float, default=60)
    ap.add_argument("--copy-overlap", default="stage", choices=["stage", "stream"])
    ap.add_argument("--sweep-links", default="25", help="'' for no sweep")
    ap.add_argument("--sweep-points", type=int, default=6)
    ap.add_argument("--sweep-time-limit", type=float, default=20)
    ap.add_argument("--maxbatch-csv", default="")
    ap.add_argument("--sweep-csv", default="")
    ap.add_argument("--machine", default="not recorded")
    ap.add_argument("--load", default="not recorded")
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    print(f"{'model':9} {'GB/s':>5} {'checkmate':>9} {'bound':>6} {'over':>6} {'offload':>8} "
          f"{'over':>6} {'ratio':>6}")
    for model in models:
        for link in [x for x in a.links.split(",") if x]:
            row = run_maxbatch(a, model, link)
            row.update(provenance(a.machine, a.load, a.bin))
            print(f"{model:9} {link:>5} {row['checkmate']:>9} {row['checkmate_bound']:>6} "
                  f"{row['checkmate_overhead']:>6} {row['checkmate_offload']:>8} "
                  f"{row['offload_overhead']:>6} {row['ratio']:>6}  {row['seconds']} s "
                  f"{row['note']}", flush=True)
            if a.maxbatch_csv:
                append_row(a.maxbatch_csv, MAXBATCH_FIELDS, row)
    for model in models:
        for link in [x for x in a.sweep_links.split(",") if x]:
            for row in run_sweep(a, model, link):
                row.update(provenance(a.machine, a.load, a.bin))
                print(f"sweep {model:9} {link:>5} {int(row['budget_bytes']) / 1e9:8.2f} GB "
                      f"checkmate {row['checkmate_overhead'] or '-':>8} "
                      f"offload {row['offload_overhead'] or '-':>8}", flush=True)
                if a.sweep_csv:
                    append_row(a.sweep_csv, SWEEP_FIELDS, row)


if __name__ == "__main__":
    main()
