#!/usr/bin/env python3
"""The solver at scale (zoo CNNs, DenseNet, GPT-2, linear chains, max-batch brackets) in one table.

For each row: the model's training graph as a rematerialization problem (FLOPs cost model,
`plan --write-problem`), a budget of constant + f x keep-everything's activation bytes, and
`plan` with every baseline, `lp` and `checkmate` at one wall-clock limit. Printed per row:
nodes, the models checkmate solved (rows x cols), wall time, checkmate's cost (as overhead over
keep-everything), its proven lower bound and where the bound comes from, the gap, and the ratio
of checkmate's cost to the best baseline's (and to lp's).

Rows (default): mobilenet b512, resnet50 b64, unet b32, fcn8 b8, segnet b8 at 50/60/80 %
(60 s); densenet121 b32 at 40/60/80 % (60 s; when configs/densenet121.yaml exists); GPT-2 with
fused attention (configs/gpt2_fused.yaml, T 1024) b8 at 60 % (60 s); a 12-layer GPT-2-shaped graph at 50 % (300 s; generated here unless --gpt2-config
names a config); linear8/16 at 50 %, VGG16 b64 at 70 and 85 % (50 % is below its minimum);
linear16 at 6, 5 and 4 units (one layer's activation) above its constant (60 s); then max batch
at 16 GB for resnet50 and densenet121 (rows "maxbatch NAME"): checkmate's batch, its proven upper
bound and the bracket between them, against the best of chen-sqrtn and chen-greedy (60 s per
strategy). --quick runs one row per model at 60 % with 20 s (and the max-batch rows at 20 s).
Usage: tools/bench/solver_scale_bench.py [--bin build/tools] [--quick] [--rows NAME,...] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

BASELINES = "all-keep,chen-sqrtn,chen-sqrtn-linear,chen-greedy,chen-greedy-linear,griewank"


def keep_everything(problem):
    """(constant bytes, keep-everything peak bytes): every value lives until its last use."""
    nodes, const = problem["nodes"], problem["constant_bytes"]
    last = list(range(len(nodes)))
    for j, nd in enumerate(nodes):
        for d in nd["deps"]:
            last[d] = max(last[d], j)
    frees = {}
    for i, k in enumerate(last):
        frees.setdefault(k, []).append(i)
    live, peak = 0, const
    for k, nd in enumerate(nodes):
        peak = max(peak, const + live + nd["bytes"] + nd.get("workspace_bytes", 0))
        live += nd["bytes"]
        for i in frees.get(k, []):
            live -= nodes[i]["bytes"]
    return const, peak


def gpt2_problem(layers=12, batch=8, seq=1024, width=768, heads=12, vocab=50257):
    """A GPT-2-shaped training graph (FLOPs costs, float32 bytes): per block layernorm, QKV
    projection, head split into q, k, v, the T x T scores and their causal softmax, the
    attention product, head merge, output projection, residual add, layernorm, MLP (4C, gelu),
    projection, residual add; backward nodes consume what autodiff would keep."""
    N, T, C, H, V = batch, seq, width, heads, vocab
    D = C // H
    nodes = []

    def add(name, kind, cost, elems, deps):
        nodes.append({"name": name, "kind": kind, "cost": float(cost), "bytes": 4 * elems,
                      "workspace_bytes": 0, "deps": sorted(set(deps))})
        return len(nodes) - 1

    fwd = []  # (node, inputs, kind, needs) for the backward pass

    def f(name, cost, elems, inputs, op, needs, params=0):
        i = add(name, "forward", cost, elems, inputs)
        fwd.append((i, inputs, op, needs, params))
        return i

    ntc = N * T * C
    params = V * C + T * C
    x = f("embed", ntc, ntc, [], "embed", [], 1)
    for l in range(layers):
        p = f"h{l}."
        ln1 = f(p + "ln1", 8 * ntc, ntc, [x], "ln", [x], 1)
        qkv = f(p + "qkv", 2 * ntc * 3 * C, 3 * ntc, [ln1], "linear", [ln1], 1)
        q = f(p + "q", ntc, ntc, [qkv], "copy", [])
        k = f(p + "k", ntc, ntc, [qkv], "copy", [])
        v = f(p + "v", ntc, ntc, [qkv], "copy", [])
        att = f(p + "att", 2 * N * H * T * T * D, N * H * T * T, [q, k], "matmul", [q, k])
        sm = f(p + "softmax", 5 * N * H * T * T, N * H * T * T, [att], "softmax", ["self"])
        y = f(p + "attv", 2 * N * H * T * T * D, ntc, [sm, v], "matmul", [sm, v])
        ym = f(p + "merge", ntc, ntc, [y], "copy", [])
        pr = f(p + "proj", 2 * ntc * C, ntc, [ym], "linear", [ym], 1)
        x2 = f(p + "res1", ntc, ntc, [x, pr], "add", [])
        ln2 = f(p + "ln2", 8 * ntc, ntc, [x2], "ln", [x2], 1)
        fc = f(p + "fc", 2 * ntc * 4 * C, 4 * ntc, [ln2], "linear", [ln2], 1)
        g = f(p + "gelu", 10 * 4 * ntc, 4 * ntc, [fc], "gelu", [fc])
        pr2 = f(p + "proj2", 2 * ntc * 4 * C, ntc, [g], "linear", [g], 1)
        x = f(p + "res2", ntc, ntc, [x2, pr2], "add", [])
        params += 12 * C * C + 13 * C
    lnf = f("ln_f", 8 * ntc, ntc, [x], "ln", [x], 1)
    logits = f("lm_head", 2 * ntc * V, N * T * V, [lnf], "linear", [lnf], 1)  # tied to embed
    loss = add("loss", "loss", 5 * N * T * V, N * T * V, [logits])
    # Backward: dy of each forward value; a grad_sum where it has several users.
    contrib = {logits: [loss]}
    for i, inputs, op, needs, has_params in reversed(fwd):
        parts = contrib.get(i, [])
        if not parts:
            continue
        dy = parts[0] if len(parts) == 1 else add(nodes[i]["name"] + ".grad_sum", "backward",
                                                   nodes[i]["bytes"] // 4 * len(parts),
                                                   nodes[i]["bytes"] // 4, parts)
        need = [i if n == "self" else n for n in needs]
        cost = nodes[i]["cost"]
        if has_params:  # weight gradient: a sink into persistent memory
            add(nodes[i]["name"] + ".grad_weight", "backward", cost, 0, [dy] + need)
        for j in inputs:
            g = add(nodes[i]["name"] + ".grad_" + nodes[j]["name"], "backward", cost,
                    nodes[j]["bytes"] // 4, [dy] + need)
            contrib.setdefault(j, []).append(g)
    constant = 4 * params * 4 + 4 * N * T * 2  # params, grads, Adam m and v; tokens, targets
    return {"format": "remat-problem/1", "name": f"gpt2-{layers}l-shape", "cost_unit": "flops",
            "batch": N, "constant_bytes": constant, "batch_constant_bytes": 4 * N * T * 2,
            "nodes": nodes}


def run_plan(bin_dir, problem_path, budget, limit, strategies):
    cmd = [os.path.join(bin_dir, "plan"), "--problem", problem_path, "--budget", str(budget),
           "--strategies", strategies, "--time-limit", str(limit), "--json"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    rows = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            rows[j["strategy"]] = j
    if r.returncode != 0 and not rows:
        return None, wall, (r.stderr.strip().splitlines() or ["failed"])[-1]
    return rows, wall, ""


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))  # tools/bench/ -> the repository
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(root, "build", "tools"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", help="only these row names (comma-separated prefixes)")
    ap.add_argument("--gpt2-config",
                    help="a GPT-2 config (zoo name or .yaml path) instead of the generated graph")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="remat-solver-bench-")

    def from_config(name, batch):
        # A zoo name (configs/NAME.yaml) or a path to a config.
        cfg = name if name.endswith(".yaml") else os.path.join(root, "configs", name + ".yaml")
        stem = os.path.splitext(os.path.basename(cfg))[0]
        path = os.path.join(tmp, f"{stem}_b{batch}.json")
        r = subprocess.run([os.path.join(a.bin, "plan"), "--config", cfg, "--batch", str(batch),
                            "--write-problem", path], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{name}: {r.stderr.strip()}")
        return path

    rows = []  # (label, problem path, budget spec, limit)
    zoo = [("mobilenet", 512), ("resnet50", 64), ("unet", 32), ("fcn8", 8), ("segnet", 8)]
    fracs, limit = ([0.6], 20) if a.quick else ([0.5, 0.6, 0.8], 60)
    for name, batch in zoo:
        for f in fracs:
            rows.append((f"{name} b{batch} {int(f * 100)}%", (name, batch), ("frac", f), limit))
    # The dense rows: DenseNet-121 b32 (1,333 nodes) at 40/60/80 % (60 s each).
    if os.path.exists(os.path.join(root, "configs", "densenet121.yaml")):
        for f in ([0.6] if a.quick else [0.4, 0.6, 0.8]):
            rows.append((f"densenet121 b32 {int(f * 100)}%", ("densenet121", 32), ("frac", f), limit))
    if not a.quick:
        # GPT-2 with the fused attention op (T 1024, b8, 688 nodes) at 60 %: the stage
        # relaxation proves nothing beyond every node once there (Note [moment bounds]).
        if os.path.exists(os.path.join(root, "configs", "gpt2_fused.yaml")):
            rows.append(("gpt2_fused b8 60%", ("gpt2_fused", 8), ("frac", 0.6), 60))
        rows.append(("gpt2-shape 12L 50%", "gpt2", ("frac", 0.5), 300))
        for n in (8, 16):
            rows.append((f"linear{n} 50%", ("chain", n), ("frac", 0.5), 60))
        for f in (0.7, 0.85):
            rows.append((f"vgg16 b64 {int(f * 100)}%", ("vgg16", 64), ("frac", f), 60))
        for units in (6, 5, 4):
            rows.append((f"linear16 +{units} units", ("chain", 16), ("units", units), 60))
    if a.rows:
        keep = a.rows.split(",")
        rows = [r for r in rows if any(r[0].startswith(k) for k in keep)]

    problems = {}
    print(f"{'row':<22} {'nodes':>5} {'time':>6} {'cost':>8} {'bound':>8} {'gap':>6} "
          f"{'/base':>6} {'/lp':>6}  bound from; models")
    results = []
    for label, src, (kind, value), lim in rows:
        if src not in problems:
            if src == "gpt2":
                if a.gpt2_config:
                    problems[src] = from_config(a.gpt2_config, 8)
                else:
                    path = os.path.join(tmp, "gpt2_shape.json")
                    with open(path, "w") as fh:
                        json.dump(gpt2_problem(), fh)
                    problems[src] = path
            elif src[0] == "chain":
                path = os.path.join(tmp, f"linear{src[1]}.yaml")
                subprocess.run([os.path.join(a.bin, "make_chain"), "--layers", str(src[1]), "-o",
                                path], check=True, capture_output=True)
                out = os.path.join(tmp, f"linear{src[1]}.json")
                subprocess.run([os.path.join(a.bin, "plan"), "--config", path,
                                "--write-problem", out], check=True, capture_output=True)
                problems[src] = out
            else:
                problems[src] = from_config(*src)
        path = problems[src]
        prob = json.load(open(path))
        const, peak = keep_everything(prob)
        if kind == "frac":
            budget = int(const + value * (peak - const))
        else:  # units of the chain's per-layer activation above the constant
            unit = max(nd["bytes"] for nd in prob["nodes"])
            budget = const + value * unit
        strategies = BASELINES + ",lp,checkmate"
        res, wall, err = run_plan(a.bin, path, budget, lim, strategies)
        if res is None:
            print(f"{label:<22} {len(prob['nodes']):>5} {wall:6.0f}  {err[:100]}")
            results.append({"row": label, "nodes": len(prob["nodes"]), "error": err})
            continue
        cm = res.get("checkmate", {})
        feas = [r for r in res.values() if r.get("feasible")]
        base = [r["cost"] for k, r in res.items() if r.get("feasible") and k not in ("lp", "checkmate")]
        keep_cost = sum(nd["cost"] for nd in prob["nodes"])
        if not cm.get("feasible"):
            print(f"{label:<22} {len(prob['nodes']):>5} {cm.get('solve_seconds', wall):6.0f}  "
                  f"checkmate: no schedule ({cm.get('status', '?')})")
            results.append({"row": label, "nodes": len(prob["nodes"]), "checkmate": cm})
            continue
        cost = cm["cost"]
        bound = cost * (1 - cm["gap"]) if cm.get("gap") is not None else None
        lp = res.get("lp", {})
        print(f"{label:<22} {len(prob['nodes']):>5} {cm['solve_seconds']:6.1f} "
              f"{cost / keep_cost:7.4f}x {bound / keep_cost if bound else 0:7.4f}x "
              f"{100 * cm['gap'] if cm.get('gap') is not None else float('nan'):5.2f}% "
              f"{cost / min(base) if base else float('nan'):6.3f} "
              f"{cost / lp['cost'] if lp.get('feasible') else float('nan'):6.3f}  "
              f"{cm.get('bound_source', '-')}; {cm.get('models', '-')}")
        sys.stdout.flush()
        results.append({"row": label, "nodes": len(prob["nodes"]), "budget": budget,
                        "keep_cost": keep_cost, "strategies": res})
    # The max-batch brackets: checkmate's answer .. proven upper bound at 16 GB, against
    # the best baseline's batch, 60 s per strategy (--quick: 20 s).
    mb_rows = [name for name in ("resnet50", "densenet121")
               if os.path.exists(os.path.join(root, "configs", name + ".yaml"))
               and (not a.rows
                    or any(("maxbatch " + name).startswith(k) for k in a.rows.split(",")))]
    if mb_rows:
        print(f"\n{'max batch at 16 GB':<22} {'time':>6} {'batch':>6} {'bound':>6} {'bracket':>8} "
              f"{'base':>6}  best baseline")
    mb_limit = 20 if a.quick else 60
    for name in mb_rows:
        cmd = [os.path.join(a.bin, "maxbatch"),
               "--config", os.path.join(root, "configs", name + ".yaml"), "--budget", "16GB", "--strategies", "checkmate,chen-sqrtn,chen-greedy",
               "--time-limit", str(mb_limit), "--json", "--log-level", "0"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        got = {}
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                j = json.loads(line)
                got[j["strategy"]] = j
        cm = got.get("checkmate")
        if r.returncode != 0 or not cm:
            why = (r.stderr.strip().splitlines() or ["failed"])[-1][:100]
            print(f"maxbatch {name:<13} error: {why}")
            results.append({"row": "maxbatch " + name, "error": r.stderr.strip()})
            continue
        base = max((v for k, v in got.items() if k != "checkmate"), key=lambda v: v["batch"])
        bracket = (cm["upper_bound"] - cm["batch"]) / cm["upper_bound"] if cm["upper_bound"] else 0
        print(f"{'maxbatch ' + name:<22} {cm['solve_seconds']:6.1f} {cm['batch']:6d} "
              f"{cm['upper_bound']:6d} {100 * bracket:7.2f}% {base['batch']:6d}  "
              f"{base['strategy']}")
        sys.stdout.flush()
        results.append({"row": "maxbatch " + name, "strategies": got})
    if a.json:
        with open(a.json + ".tmp", "w") as fh:
            json.dump(results, fh, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
