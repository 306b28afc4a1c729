#!/usr/bin/env python3
"""The paper's input-size result: the largest square input (image models, `maxbatch --vary
input`) or the longest sequence (GPT-2, `--vary seq`) that trains under a budget, per strategy,
at batch 1 and 8, in fp32 and bf16 (FLOPs cost model). Prints a table and appends one CSV row
per (model, precision, batch) to --csv (tools/bench/results/maxinput/16gb.csv):
  model, precision, batch, dimension (input | seq), one column per strategy (its answer; empty
  where it does not apply), checkmate_bound (checkmate's proven upper bound), checkmate_status,
  checkmate_bound_source (what proves the bound), ratio (checkmate / all-keep), seconds (the whole run), note (the search's first line, or the
  error that ended it), and the provenance columns revision, date, machine, load.
Usage: maxinput_bench.py --bin build/tools [--models unet,vgg19] [--batches 1,8]
       [--precisions fp32,bf16] [--budget 16GB] [--time-limit 60] [--csv FILE] [--machine TEXT]
       [--load TEXT]"""
import argparse
import json
import os
import subprocess
import time

from result_rows import ROOT, append_row, provenance

STRATEGIES = ["all-keep", "chen-sqrtn", "chen-sqrtn-linear", "chen-greedy", "chen-greedy-linear",
              "griewank", "lp", "checkmate"]
FIELDS = (["model", "precision", "batch", "dimension"] + STRATEGIES +
          ["checkmate_bound", "checkmate_status", "checkmate_bound_source", "ratio", "seconds",
           "note", "revision", "date", "machine", "load"])
MODELS = ["unet", "fcn8", "segnet", "pspnet", "vgg19", "resnet50", "gpt2"]


def run_one(a, model, precision, batch):
    dimension = "seq" if model.startswith("gpt2") else "input"
    base = [os.path.join(a.bin, "maxbatch"), "--config", os.path.join(ROOT, "configs", model + ".yaml"),
            "--budget", a.budget, "--batch", str(batch), "--vary", dimension, "--precision", precision,
            "--time-limit", str(a.time_limit)]
    row = {k: "" for k in FIELDS}
    row.update(model=model, precision=precision, batch=str(batch), dimension=dimension)
    start = time.time()
    table = subprocess.run(base + ["--strategies", "all-keep"], capture_output=True, text=True)
    for line in table.stdout.splitlines():
        if line.startswith("varying "):
            row["note"] = line
    out = subprocess.run(base + ["--json"], capture_output=True, text=True)
    row["seconds"] = f"{time.time() - start:.0f}"
    if out.returncode != 0:
        row["note"] = (out.stderr.strip().splitlines() or ["failed"])[-1][:300]
        return row
    for line in out.stdout.splitlines():
        j = json.loads(line)
        value = j.get(dimension)
        row[j["strategy"]] = "" if value is None else str(value)
        if j["strategy"] == "checkmate":
            row["checkmate_bound"] = str(j.get("upper_bound", ""))
            row["checkmate_status"] = j.get("status", "")
            row["checkmate_bound_source"] = j.get("bound_source", "")
    keep, best = row["all-keep"], row["checkmate"]
    if keep and best and int(keep) > 0:
        row["ratio"] = f"{int(best) / int(keep):.2f}"
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--budget", default="16GB")
    ap.add_argument("--time-limit", type=float, default=60)
    ap.add_argument("--csv", default="")
    ap.add_argument("--machine", default="not recorded")
    ap.add_argument("--load", default="not recorded")
    a = ap.parse_args()
    print(f"{'model':9} {'prec':4} {'b':>2} {'dim':5} " + " ".join(f"{s[:10]:>10}" for s in STRATEGIES) +
          f" {'bound':>7} {'ratio':>5}")
    for model in a.models.split(","):
        for precision in a.precisions.split(","):
            for batch in a.batches.split(","):
                row = run_one(a, model, precision, int(batch))
                row.update(provenance(a.machine, a.load, a.bin))
                print(f"{model:9} {precision:4} {batch:>2} {row['dimension']:5} " +
                      " ".join(f"{row[s]:>10}" for s in STRATEGIES) +
                      f" {row['checkmate_bound']:>7} {row['ratio']:>5}  {row['seconds']} s", flush=True)
                if a.csv:
                    append_row(a.csv, FIELDS, row)


if __name__ == "__main__":
    main()
