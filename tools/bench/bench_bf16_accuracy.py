#!/usr/bin/env python3
"""Does bf16 train as well as fp32? The same model, data and steps in three CPU runs:

  fp32          the config as it is
  fp32 seed+1   the same with the next seed (other initial weights and dropout masks)
  bf16          the config's seed, activations in bfloat16 (train --precision bf16)

and the mean loss of the last W steps of each. bf16 passes when it is no further from fp32 than
fp32 is from itself: |bf16 - fp32| <= max(|fp32 seed+1 - fp32|, 3 sqrt(s32^2 / W + s16^2 / W)),
the first term the run-to-run difference of equally valid fp32 trainings, the second the
two-sample 3-sigma band of the losses' own step-to-step noise (s: their standard deviations over
the window). Prints a table; exit 1 when a model fails, 2 for usage errors.
Usage: tools/bench/bench_bf16_accuracy.py [--bin build/tools] [--configs small_cnn,small_dag,gpt2_tiny]
       [--steps 200] [--window 20] [--json FILE]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile


def run(bin_dir, config, steps, extra, tmp):
    metrics = os.path.join(tmp, "metrics.jsonl")
    if os.path.exists(metrics):
        os.unlink(metrics)
    cmd = [os.path.join(bin_dir, "train"), "--config", config, "--steps", str(steps),
           "--metrics", metrics, "--log-every", str(steps)] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(" ".join(cmd) + ": " + (r.stderr.strip().splitlines() or ["failed"])[-1])
    with open(metrics) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default=os.path.join(root, "build", "tools"))
    p.add_argument("--configs", default="small_cnn,small_dag,gpt2_tiny")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--json")
    a = p.parse_args()
    if a.window < 2 or a.steps < a.window:
        p.error("--window must be at least 2 and at most --steps")
    import yaml
    rows, failed = [], False
    print(f"{'model':<12} {'fp32':>9} {'fp32 seed+1':>12} {'bf16':>9} {'|bf16-fp32|':>12} "
          f"{'tolerance':>10}  result")
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.configs.split(","):
            config = name if name.endswith(".yaml") else os.path.join(root, "configs", name + ".yaml")
            with open(config) as f:
                seed = int(yaml.safe_load(f).get("seed", 0))
            losses = {
                "fp32": run(a.bin, config, a.steps, ["--precision", "fp32"], tmp),
                "seed": run(a.bin, config, a.steps, ["--precision", "fp32", "--seed", str(seed + 1)], tmp),
                "bf16": run(a.bin, config, a.steps, ["--precision", "bf16"], tmp),
            }
            tail = {k: v[-a.window:] for k, v in losses.items()}
            mean = {k: statistics.mean(v) for k, v in tail.items()}
            sd = {k: statistics.stdev(v) for k, v in tail.items()}
            diff = abs(mean["bf16"] - mean["fp32"])
            noise = 3 * math.sqrt(sd["fp32"] ** 2 / a.window + sd["bf16"] ** 2 / a.window)
            tol = max(abs(mean["seed"] - mean["fp32"]), noise)
            ok = diff <= tol
            failed |= not ok
            print(f"{os.path.basename(config)[:-5]:<12} {mean['fp32']:9.4f} {mean['seed']:12.4f} "
                  f"{mean['bf16']:9.4f} {diff:12.4f} {tol:10.4f}  {'ok' if ok else 'FAILED'}")
            rows.append({"config": config, "steps": a.steps, "window": a.window,
                         "mean_loss": mean, "sd_loss": sd, "first_loss": losses["fp32"][0],
                         "difference": diff, "tolerance": tol, "ok": ok})
            sys.stdout.flush()
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump({"rows": rows}, f, indent=2)
        os.replace(a.json + ".tmp", a.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
