#!/usr/bin/env python3
"""tools/bench/bench_pytorch.py on the CPU: the small CNN at 16x16, remat against PyTorch, in fp32
and in bf16 (PyTorch's CPU autocast).
Checks the JSON it writes (every row measured, remat's budgeted run inside its budget, the
max-batch row present), that a budget below the minimum is reported as 'does not fit' and not
as a failure, and that bad flags are usage errors (exit 2).
Usage: test_bench_pytorch.py TOOLS_DIR"""
import json
import os
import subprocess
import sys
import tempfile

from checks import Checks

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(HERE), "tools", "bench", "bench_pytorch.py")
CONFIG = os.path.join(os.path.dirname(HERE), "configs", "small_cnn.yaml")


def run(bin_dir, *extra):
    return subprocess.run([sys.executable, BENCH, "--device", "cpu", "--config", CONFIG,
                           "--bin", bin_dir, "--batch", "8", "--input", "3x16x16", "--steps", "2",
                           "--warmup", "1", *extra], capture_output=True, text=True)


def main():
    bin_dir = sys.argv[1]
    check = Checks()

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        r = run(bin_dir, "--fractions", "0.3,0.95", "--cap", "8MB", "--repeat", "3", "--json", out)
        check(r.returncode == 0, f"bench exit {r.returncode}: {r.stderr[-2000:]}")
        check("small_cnn" in r.stdout and "pytorch eager" in r.stdout, "no table: " + r.stdout)
        if os.path.exists(out):
            results = json.load(open(out))["results"]
            check([r.get("precision") for r in results] == ["tf32", "bf16"],
                  f"one table per precision: {[r.get('precision') for r in results]}")
            res = results[0]
            rows = {(row["memory"].split(" ")[0], row["system"].split("(")[0]): row for row in res["rows"]}
            keep = rows.get(("keep", "remat"), {})
            check(keep.get("samples_per_second", 0) > 0, f"remat keep row: {keep}")
            # --repeat 3: each keep row is the median of its side's three runs.
            for side in ("remat", "pytorch eager"):
                runs = rows.get(("keep", side), {}).get("samples_per_second_runs", [])
                check(len(runs) == 3 and sorted(runs)[1] == rows[("keep", side)]["samples_per_second"],
                      f"keep {side}: the median of 3 runs: {runs}")
            check("median of 3" in r.stdout, "the table names the median: " + r.stdout)
            check(rows.get(("keep", "pytorch eager"), {}).get("samples_per_second", 0) > 0,
                  "pytorch keep row missing")
            tight = rows.get(("30%", "remat checkmate"), {})
            check("below the minimum" in tight.get("error", ""), f"30% should not fit: {tight}")
            loose = rows.get(("95%", "remat checkmate"), {})
            check(0 < loose.get("measured_peak_bytes", 0) <= loose.get("budget_bytes", -1),
                  f"95% row over its budget: {loose}")
            check(loose.get("measured_peak_bytes") == loose.get("predicted_peak_bytes"),
                  f"95% row: measured peak differs from the plan: {loose}")
            mb = res.get("max_batch", {})
            check(isinstance(mb.get("remat checkmate"), int) and mb["remat checkmate"] >=
                  mb.get("remat all-keep", 0) > 0, f"max batch row: {mb}")
            # bf16 (autocast on PyTorch's side): every row measured, remat's activations in
            # bf16 hold less than fp32's at the same batch, and a larger batch fits the cap.
            if len(results) > 1:
                b16 = {(row["memory"].split(" ")[0], row["system"].split("(")[0]): row
                       for row in results[1]["rows"]}
                kb = b16.get(("keep", "remat"), {})
                check(kb.get("precision") == "bf16", f"bf16 keep row: {kb}")
                check(0 < kb.get("measured_peak_bytes", 0) < keep.get("measured_peak_bytes", 0),
                      f"bf16 keep peak {kb.get('measured_peak_bytes')} vs fp32 "
                      f"{keep.get('measured_peak_bytes')}")
                check(b16.get(("keep", "pytorch eager"), {}).get("samples_per_second", 0) > 0,
                      "pytorch autocast keep row missing")
                l16 = b16.get(("95%", "remat checkmate"), {})
                check(l16.get("measured_peak_bytes") == l16.get("predicted_peak_bytes"),
                      f"bf16 95% row: {l16}")
                mb16 = results[1].get("max_batch", {})
                check(mb16.get("remat all-keep", 0) > mb.get("remat all-keep", 0),
                      f"bf16 max batch {mb16} vs fp32 {mb}")
        else:
            check(False, "no JSON written")
        bad = run(bin_dir, "--fractions", "1.5")
        check(bad.returncode == 2, f"--fractions 1.5 exit {bad.returncode}, want 2")
        bad = run(bin_dir, "--repeat", "0")
        check(bad.returncode == 2, f"--repeat 0 exit {bad.returncode}, want 2")
        bad = run(bin_dir, "--remat-override", "layout")
        check(bad.returncode == 2, f"--remat-override layout exit {bad.returncode}, want 2")
        # A channels-last remat (Note [channels-last layout]) against the same PyTorch model:
        # the override reaches remat's runs and is recorded.
        out_cl = os.path.join(tmp, "bench_cl.json")
        r = run(bin_dir, "--remat-override", "layout=channels_last", "--precision", "tf32",
                "--fractions", "0.95", "--no-maxbatch", "--json", out_cl)
        check(r.returncode == 0, f"channels-last bench exit {r.returncode}: {r.stderr[-2000:]}")
        check("remat overrides layout=channels_last" in r.stdout, "override not shown: " + r.stdout)
        if os.path.exists(out_cl):
            res = json.load(open(out_cl))["results"][0]
            check(res.get("remat_overrides") == ["layout=channels_last"], f"JSON: {res}")
            rows = {(row["memory"].split(" ")[0], row["system"].split("(")[0]): row
                    for row in res["rows"]}
            loose = rows.get(("95%", "remat checkmate"), {})
            check(0 < loose.get("measured_peak_bytes", 0) == loose.get("predicted_peak_bytes"),
                  f"channels-last 95% row: {loose}")
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
