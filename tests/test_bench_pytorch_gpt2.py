#!/usr/bin/env python3
"""tools/bench/bench_pytorch.py on the CPU with configs/gpt2_tiny.yaml: remat's GPT-2 against the
PyTorch GPT-2 bench_pytorch_gpt2.py builds, in fp32 and bf16, at batch 2 (no max-batch search).
Checks that every keep-everything row is measured, that each measured row's tokens/s is its
samples/s x the sequence (64), that PyTorch's model has the parameter count remat's `train`
reports (120,576: tied embeddings), the FLOP count, that PyTorch's settings are recorded, and
that --input with a token model is a usage error (exit 2), and that configs/gpt2_fused.yaml gives
PyTorch the same model as configs/gpt2.yaml.
Usage: test_bench_pytorch_gpt2.py TOOLS_DIR"""
import json
import os
import subprocess
import sys
import tempfile

from checks import Checks

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(HERE), "tools", "bench", "bench_pytorch.py")
CONFIG = os.path.join(os.path.dirname(HERE), "configs", "gpt2_tiny.yaml")
T = 64  # gpt2_tiny's sequence


def run(bin_dir, *extra):
    return subprocess.run([sys.executable, BENCH, "--device", "cpu", "--config", CONFIG,
                           "--bin", bin_dir, "--batch", "2", "--steps", "2", "--warmup", "1",
                           "--no-maxbatch", "--time-limit", "10", *extra],
                          capture_output=True, text=True)


def main():
    bin_dir = sys.argv[1]
    check = Checks()

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        r = run(bin_dir, "--json", out)
        check(r.returncode == 0, f"bench exit {r.returncode}: {r.stderr[-2000:]}")
        check("gpt2_tiny" in r.stdout and "tok/s" in r.stdout, "no tok/s table: " + r.stdout)
        if os.path.exists(out):
            results = json.load(open(out))["results"]
            check([x.get("precision") for x in results] == ["tf32", "bf16"],
                  f"one table per precision: {[x.get('precision') for x in results]}")
            for res in results:
                prec = res.get("precision")
                check(res.get("sequence") == T, f"{prec}: sequence {res.get('sequence')}")
                check(res.get("remat_parameters") == res.get("pytorch_parameters") == 120576,
                      f"{prec}: parameters remat {res.get('remat_parameters')} "
                      f"pytorch {res.get('pytorch_parameters')}, want 120576")
                # per sequence: 2 layers x (2 T (4 C^2 + 2 C hidden) + 4 T^2 C) + 2 T C vocab
                fwd = 2 * (2 * T * (4 * 64 * 64 + 2 * 64 * 256) + 4 * T * T * 64) + 2 * T * 64 * 256
                check(res.get("flops_per_step") == 3 * 2 * fwd,
                      f"{prec}: flops_per_step {res.get('flops_per_step')}, want {3 * 2 * fwd}")
                pt = res.get("pytorch", {})
                check("attention" in pt and pt.get("channels_last") is False,
                      f"{prec}: PyTorch settings {pt}")
                rows = {(x["memory"].split(" ")[0], x["system"].split("(")[0]): x
                        for x in res["rows"]}
                for key in (("keep", "remat"), ("keep", "pytorch eager")):
                    check(rows.get(key, {}).get("samples_per_second", 0) > 0,
                          f"{prec}: {key} not measured: {rows.get(key)}")
                for key, x in rows.items():
                    if "samples_per_second" in x:
                        want = x["samples_per_second"] * T
                        check(abs(x.get("tokens_per_second", 0) - want) <= 1e-9 * want,
                              f"{prec}: {key} tokens/s {x.get('tokens_per_second')}, want {want}")
        else:
            check(False, "no JSON written")
        bad = run(bin_dir, "--input", "3x16x16")
        check(bad.returncode == 2, f"--input with GPT-2: exit {bad.returncode}, want 2")
    # The fused attention config is the same GPT-2 to PyTorch: its attention op's dropout is the
    # attention dropout.
    import yaml
    sys.path.insert(0, os.path.dirname(BENCH))
    from bench_pytorch_gpt2 import gpt2_hparams
    configs = os.path.join(os.path.dirname(HERE), "configs")
    hp = {}
    for name in ("gpt2", "gpt2_fused"):
        path = os.path.join(configs, name + ".yaml")
        hp[name] = gpt2_hparams(yaml.safe_load(open(path)), path)
    check(hp["gpt2_fused"] == hp["gpt2"], f"gpt2_fused {hp['gpt2_fused']} != gpt2 {hp['gpt2']}")
    check(hp["gpt2"]["attn_drop"] == 0.1, f"gpt2 attention dropout {hp['gpt2']['attn_drop']}")
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
