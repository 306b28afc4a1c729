#!/usr/bin/env python3
"""remat against PyTorch on the same machine, model, batch and precision, back to back.

For each model (default VGG19 and ResNet-50 at their configs' batch) and precision (default
tf32, then bf16) it prints one table:
  - img/s and peak memory keeping every activation (remat `train` without a budget; PyTorch eager);
  - img/s and peak at 50 % and 70 % of remat's keep-everything peak: remat's plan under that
    budget against torch.utils.checkpoint.checkpoint_sequential with the fastest segment count
    whose peak fits;
  - the largest batch that trains under a cap (default 15 GB): remat's strategies (`maxbatch`,
    verified by training) against PyTorch keep-everything and checkpoint_sequential (sqrt(n)
    segments), found by doubling and bisection with PyTorch's allocator capped;
  - the achieved FLOP/s (3 x the forward convolution and dense FLOPs per step) and its fraction
    of the device's peak for the precision.
GPT-2 configs (a `vocab` / `sequence`, e.g. configs/gpt2.yaml) run the same table in tokens/s
(samples/s x sequence; a sample is one sequence, the max batch counts sequences) against a
nanoGPT-style PyTorch GPT-2 built from the YAML (bench_pytorch_gpt2.py: fused
scaled_dot_product_attention on PyTorch 2, AdamW with the YAML's decay rule and clip_norm,
random token ids and targets); checkpoint_sequential cuts between its blocks, the embeddings
running outside. Its FLOPs: 3 x the forward matmuls, attention's T x T products and the lm head.
bf16: remat `train --precision bf16` (activations in bfloat16, Note [bf16 autocast]) against
PyTorch's torch.autocast(dtype=torch.bfloat16) around the forward pass and the loss, with the
model and batch in channels_last on the GPU (cuDNN's fastest layout for bf16 convolutions; not
for GPT-2). Each table's header and the JSON record PyTorch's settings (version, cudnn.benchmark,
TF32 flags, channels_last, the SDPA backends enabled, the attention used).
Peaks: remat's measured peak (the exact bytes its plan holds: weights, gradients, optimizer
state, batch, activations, workspace); PyTorch's torch.cuda.max_memory_allocated (the same
things through its caching allocator). On the CPU PyTorch has no peak counter or cap, so those
cells are '-' (the CPU run is for testing the script: use a small --input).
Usage: tools/bench/bench_pytorch.py [--device cuda] [--config configs/vgg19.yaml ...] [--json FILE]
       [--remat-override layout=channels_last ...]
       tools/bench/bench_pytorch.py --config configs/gpt2.yaml --precision bf16 [--json FILE]
Exit 0 when every measurement ran, 1 when one failed (its cell says so), 2 for usage errors.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Dense peak FLOP/s by device-name fragment: (fp32 CUDA cores, tf32 and bf16 tensor cores), SXM
# parts.
PEAK_FLOPS = [("H200", 67e12, 494.7e12, 989.4e12), ("H100", 67e12, 494.7e12, 989.4e12),
              ("A100", 19.5e12, 156e12, 312e12)]
PRECISIONS = ("fp32", "tf32", "tf32-all", "bf16")

UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(text):
    t = text.strip().upper()
    for unit in sorted(UNITS, key=len, reverse=True):
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * UNITS[unit])
    return int(t)


def fmt_bytes(b):
    if b is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b} B"


def median_run(runs):
    """The run with the median samples/s (the lower median for an even count), with every run's
    rate as `samples_per_second_runs`; a failed run if any failed."""
    bad = [r for r in runs if r is None or "error" in r]
    if bad:
        return bad[0]
    ordered = sorted(runs, key=lambda r: r["samples_per_second"])
    mid = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        mid["samples_per_second_runs"] = [r["samples_per_second"] for r in runs]
    return mid


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


class Bench:
    def __init__(self, args):
        self.a = args
        self.failures = []
        self.tmp = tempfile.mkdtemp(prefix="remat-bench-")
        self.gpt2 = False  # the model at hand is a GPT-2 (tokens/s, bench_pytorch_gpt2.py)

    # ---- remat -------------------------------------------------------------------------------
    def tool(self, name):
        return os.path.join(self.a.bin, name)

    def remat_train(self, config, batch, budget=None, strategy=None, steps=None):
        """remat's summary of `steps` timed steps (its first, untimed step comes on top)."""
        steps = self.a.steps if steps is None else steps
        summary = os.path.join(self.tmp, "summary.json")
        cmd = [self.tool("train"), "--config", config, "--device", self.a.device,
               "--batch", str(batch), "--steps", str(steps + 1),
               "--log-every", str(steps + 1), "--summary", summary]
        if self.a.input and not self.gpt2:
            cmd += ["--input", self.a.input]
        if self.a.device == "cuda" or self.prec == "bf16":
            cmd += ["--precision", self.prec]
        if budget is not None:
            cmd += ["--budget", str(int(budget)), "--strategy", strategy,
                    "--time-limit", str(self.a.time_limit)]
        cmd += self.a.remat_override
        if os.path.exists(summary):
            os.unlink(summary)
        r = subprocess.run(cmd, capture_output=True, text=True)
        self.log(cmd, r)
        if r.returncode != 0:
            last = (r.stderr.strip() or r.stdout.strip()).splitlines()
            return {"error": last[-1] if last else f"exit {r.returncode}"}
        with open(summary) as f:
            out = json.load(f)
        # "model gpt2: 5 layers, 29 parameter tensors (124439808 weights), ..."
        m = re.search(r"parameter tensors \((\d+) weights\)", r.stdout)
        if m:
            out["parameters"] = int(m.group(1))
        return out

    def remat_maxbatch(self, config):
        cmd = [self.tool("maxbatch"), "--config", config, "--budget", str(self.a.cap),
               "--strategies", self.a.strategies, "--json", "--time-limit", str(self.a.time_limit)]
        if self.a.input and not self.gpt2:
            cmd += ["--input", self.a.input]
        if self.prec == "bf16":
            cmd += ["--precision", "bf16"]
        cmd += self.a.remat_override
        r = subprocess.run(cmd, capture_output=True, text=True)
        self.log(cmd, r)
        if r.returncode != 0:
            return {"error": (r.stderr.strip() or "maxbatch failed").splitlines()[-1]}
        rows = {}
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                j = json.loads(line)
                rows[j["strategy"]] = j["batch"]
        return rows

    def log(self, cmd, r):
        if self.a.verbose:
            print("$ " + " ".join(cmd), file=sys.stderr)
            print(r.stdout + r.stderr, file=sys.stderr)

    # ---- PyTorch -----------------------------------------------------------------------------
    def torch_setup(self):
        import torch
        self.torch = torch
        if self.a.device == "cuda":
            if not torch.cuda.is_available():
                raise SystemExit("bench_pytorch: --device cuda but PyTorch sees no CUDA device")
            torch.backends.cudnn.benchmark = True
        else:
            torch.set_num_threads(os.cpu_count() or 1)

    def set_precision(self, prec):
        """The precision the next measurements run in (remat's flag, PyTorch's math flags)."""
        self.prec = prec
        if self.a.device == "cuda":  # bf16 keeps PyTorch's defaults for anything left in FP32
            self.torch.backends.cudnn.allow_tf32 = prec != "fp32"
            self.torch.backends.cuda.matmul.allow_tf32 = prec == "tf32-all"

    def torch_settings(self):
        """PyTorch's configuration for the current precision (the JSON's `pytorch`, the header)."""
        torch = self.torch
        cuda = self.a.device == "cuda"
        out = {"version": torch.__version__,
               "cudnn_benchmark": bool(torch.backends.cudnn.benchmark) if cuda else None,
               "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32) if cuda else None,
               "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32) if cuda else None,
               "autocast": "bfloat16" if self.prec == "bf16" else None,
               "channels_last": bool(cuda and self.prec == "bf16" and not self.gpt2)}
        if self.gpt2:
            from bench_pytorch_gpt2 import HAS_SDPA
            b = torch.backends.cuda
            out["attention"] = ("scaled_dot_product_attention(is_causal=True)" if HAS_SDPA
                                else "explicit masked softmax (no scaled_dot_product_attention)")
            for name in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled"):
                out[name] = bool(getattr(b, name)()) if HAS_SDPA and hasattr(b, name) else None
        return out

    def autocast(self):
        """PyTorch's mixed precision for bf16 (a no-op context otherwise)."""
        import contextlib
        if self.prec != "bf16":
            return contextlib.nullcontext()
        return self.torch.autocast(device_type=self.a.device, dtype=self.torch.bfloat16)

    def torch_model(self, cfg, path):
        torch = self.torch
        torch.manual_seed(int(cfg.get("seed", 0)))
        if self.gpt2:
            from bench_pytorch_gpt2 import build_gpt2
            model = build_gpt2(cfg, path).to(self.a.device)
        else:
            from bench_pytorch_model import build_segments
            model = build_segments(cfg, path).to(self.a.device)
        o = cfg.get("optimizer", {"op": "sgd", "lr": 0.01})
        if o.get("op", "sgd") == "adamw":  # remat's decay rule (ops/adam.cpp)
            from bench_pytorch_gpt2 import optimizer_groups
            wd, all_ = o.get("weight_decay", 0.01), o.get("decay") == "all"
            groups = ([{"params": p, "weight_decay": wd if d else 0.0}
                       for p, d in optimizer_groups(model, o.get("decay", "weights"))]
                      if self.gpt2 else  # conv and dense weights: the parameters of 2+ dims
                      [{"params": [p for p in model.parameters() if p.dim() >= 2 or all_], "weight_decay": wd},
                       {"params": [p for p in model.parameters() if p.dim() < 2 and not all_],
                        "weight_decay": 0.0}])
            opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=o.get("lr", 1e-3),
                                    betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                                    eps=o.get("eps", 1e-8))
        elif o.get("op", "sgd") == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=o.get("lr", 1e-3),
                                   betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                                   eps=o.get("eps", 1e-8), weight_decay=o.get("weight_decay", 0))
        else:
            opt = torch.optim.SGD(model.parameters(), lr=o.get("lr", 0.01),
                                  momentum=o.get("momentum", 0), weight_decay=o.get("weight_decay", 0),
                                  nesterov=bool(o.get("nesterov", False)))
        return model, opt

    def torch_run(self, cfg, path, batch, segments=0, steps=None):
        """img/s and peak bytes of `steps` timed steps (after warm-up); segments > 0 uses
        checkpoint_sequential. Raises torch.cuda.OutOfMemoryError when it does not fit."""
        torch = self.torch
        from torch.utils.checkpoint import checkpoint_sequential
        import inspect
        # PyTorch 2 wants use_reentrant said (False: the recommended mode); 1.x does not know it.
        ckpt_kwargs = ({"use_reentrant": False}
                       if "use_reentrant" in inspect.signature(checkpoint_sequential).parameters else {})
        steps = self.a.steps if steps is None else steps
        dev = self.a.device
        model, opt = self.torch_model(cfg, path)
        clip = cfg.get("optimizer", {}).get("clip_norm")
        if self.gpt2:  # random token ids and next-token targets, [batch, T]
            from bench_pytorch_gpt2 import gpt2_hparams
            hp = gpt2_hparams(cfg, path)
            x = torch.randint(0, hp["vocab"], (batch, hp["T"]), device=dev)
            y = torch.randint(0, hp["vocab"], (batch, hp["T"]), device=dev)
        else:
            shape = [batch] + [int(x) for x in cfg["input"]]
            x = torch.randn(shape, device=dev)
            if self.prec == "bf16" and dev == "cuda" and len(shape) == 4:
                model = model.to(memory_format=torch.channels_last)
                x = x.contiguous(memory_format=torch.channels_last)
            y = torch.randint(0, int(cfg["classes"]), (batch,), device=dev)
            if segments > 0 and not ckpt_kwargs:
                x.requires_grad_(True)  # reentrant checkpointing drops parameter gradients otherwise
        try:
            def forward():
                if not self.gpt2:
                    if segments > 0:
                        return checkpoint_sequential(model, segments, x, **ckpt_kwargs)
                    return model(x)
                # The embeddings run outside the checkpoints (token ids carry no gradient, which
                # reentrant checkpointing needs); the blocks and head are the segments.
                h = model[0](x)
                if segments > 0:
                    return checkpoint_sequential(model[1:], segments, h, **ckpt_kwargs)
                return model[1:](h)

            def step():
                opt.zero_grad(set_to_none=True)
                with self.autocast():
                    out = forward()
                    loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                                             y.reshape(-1))
                loss.backward()
                if clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), float(clip))
                opt.step()
                return loss
            for _ in range(self.a.warmup):
                step()
            if dev == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            for _ in range(steps):
                loss = step()
            float(loss.detach())  # synchronizes
            seconds = time.perf_counter() - t0
            peak = torch.cuda.max_memory_allocated() if dev == "cuda" else None
            return {"samples_per_second": batch * steps / seconds, "measured_peak_bytes": peak}
        finally:
            del model, opt, x, y
            if dev == "cuda":
                torch.cuda.empty_cache()

    def torch_fits(self, cfg, path, batch, segments):
        try:
            self.torch_run(cfg, path, batch, segments, steps=1)
            return True
        except self.torch.cuda.OutOfMemoryError:
            return False

    def torch_max_batch(self, cfg, path, segments):
        torch = self.torch
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, self.a.cap / total))
        try:
            lo, hi = 0, 8
            while self.torch_fits(cfg, path, hi, segments):
                lo, hi = hi, hi * 2
                if hi > 1 << 16:
                    return lo
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if self.torch_fits(cfg, path, mid, segments) else (lo, mid)
            return lo
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)

    # ---- one model ---------------------------------------------------------------------------
    def model(self, config):
        import yaml
        with open(config) as f:
            cfg = yaml.safe_load(f)
        from bench_pytorch_gpt2 import is_gpt2
        self.gpt2 = is_gpt2(cfg)
        batch = self.a.batch or int(cfg["batch"])
        if self.a.input and not self.gpt2:  # the same override remat's tools get
            cfg["input"] = [int(x) for x in self.a.input.split("x")]
        res = {"model": cfg["name"], "config": config, "batch": batch, "precision": self.prec,
               "pytorch": self.torch_settings(), "remat_overrides": self.a.remat_override,
               "rows": []}
        model = self.torch_model(cfg, config)[0]
        # checkpoint_sequential's stages (GPT-2: the blocks and the head; the embeddings run outside)
        nseg = len(model) - (1 if self.gpt2 else 0)
        if self.gpt2:
            from bench_pytorch_gpt2 import gpt2_hparams, parameter_count
            res["sequence"] = gpt2_hparams(cfg, config)["T"]
            res["pytorch_parameters"] = parameter_count(model)
        del model

        # Keeping everything, the two sides alternate --repeat times (a busy host or GPU slows
        # whichever runs beside it); each row is the run with the median rate of its side.
        keeps, torches = [], []
        for _ in range(self.a.repeat):
            keeps.append(self.remat_train(config, batch))
            torches.append(self.torch_run(cfg, config, batch))
        keep, tk = median_run(keeps), median_run(torches)
        res["rows"].append(("keep everything", "remat", keep))
        res["rows"].append(("keep everything", "pytorch eager", tk))
        ref = keep.get("measured_peak_bytes")
        for frac in self.a.fractions:
            if not ref:
                break
            budget = int(frac * ref)
            label = f"{int(round(100 * frac))}% = {fmt_bytes(budget)}"
            r = self.remat_train(config, batch, budget, self.a.strategy)
            res["rows"].append((label, f"remat {self.a.strategy}", r))
            res["rows"].append((label, "pytorch checkpoint_sequential",
                                self.torch_best_checkpoint(cfg, config, batch, budget, nseg)))
        counter = __import__("bench_pytorch_gpt2" if self.gpt2 else "bench_pytorch_model")
        flops = 3 * counter.forward_flops(cfg, config, batch)
        res["flops_per_step"] = flops
        if self.a.cap and self.a.maxbatch:
            mb = self.remat_maxbatch(config)
            if "error" in mb:
                res["max_batch"] = mb
            else:  # each found batch trains under the cap, or the cell says why not
                res["max_batch"] = {}
                for k, v in mb.items():
                    ok = v > 0 and "error" not in self.remat_train(config, v, self.a.cap, k, steps=2)
                    res["max_batch"]["remat " + k] = v if ok or v == 0 else f"{v} (failed to train)"
                    if v > 0 and not ok:
                        self.failures.append(f"{cfg['name']} max batch {v} of {k} does not train")
            if self.a.device == "cuda":
                res["max_batch"]["pytorch eager"] = self.torch_max_batch(cfg, config, 0)
                k = max(1, round(math.sqrt(nseg)))
                res["max_batch"][f"pytorch checkpoint_sequential({k})"] = \
                    self.torch_max_batch(cfg, config, k)
        if self.gpt2:
            for _, _, r in res["rows"]:
                if r and "samples_per_second" in r:
                    r["tokens_per_second"] = r["samples_per_second"] * res["sequence"]
            res["remat_parameters"] = keep.get("parameters")
        return res

    def torch_best_checkpoint(self, cfg, path, batch, budget, nseg):
        if self.a.device != "cuda":  # no peak counter: the sqrt(n) segmentation, unchecked
            k = max(1, round(math.sqrt(nseg)))
            r = self.torch_run(cfg, path, batch, k)
            r["segments"] = k
            return r
        best = None
        for k in sorted({2, 3, 4, 6, 8, 12, 16, round(math.sqrt(nseg)), nseg // 2, nseg}):
            if k < 1 or k > nseg:
                continue
            try:
                r = self.torch_run(cfg, path, batch, k)
            except self.torch.cuda.OutOfMemoryError:
                continue
            r["segments"] = k
            if r["measured_peak_bytes"] <= budget and (
                    best is None or r["samples_per_second"] > best["samples_per_second"]):
                best = r
        return best or {"error": "no segment count fits"}

    # ---- output ------------------------------------------------------------------------------
    def device_name(self):
        if self.a.device == "cuda":
            return self.torch.cuda.get_device_name(0)
        return "cpu (%d threads)" % self.torch.get_num_threads()

    def peak_flops(self):
        name = self.device_name()
        for frag, fp32, tf32, bf16 in PEAK_FLOPS:
            if frag in name:
                no_tf32 = self.prec == "fp32" or (self.prec == "tf32" and self.gpt2)
                return fp32 if no_tf32 else bf16 if self.prec == "bf16" else tf32
        return None

    def print_table(self, res):
        peak = self.peak_flops()
        shown = self.prec if self.a.device == "cuda" or self.prec == "bf16" else "fp32"
        seq = res.get("sequence")
        what = f"batch {res['batch']}" + (f" x {seq} tokens" if seq else "")
        print(f"\n{res['model']}  {what}  on {self.device_name()}  precision {shown}")
        pt = res["pytorch"]
        print("pytorch " + ", ".join(f"{k} {'-' if v is None else v}" for k, v in pt.items()))
        if res["remat_overrides"]:
            print("remat overrides " + " ".join(res["remat_overrides"]))
        unit = "tok/s" if seq else "img/s"
        print(f"{'memory':<18} {'system':<34} {unit:>9} {'peak':>10} {'TFLOP/s':>8} "
              f"{'of peak':>7}  note")
        base = {}
        for label, system, r in res["rows"]:
            if r is None or "error" in r:
                msg = (r or {}).get("error", "failed")
                if "below the minimum" in msg or "no segment count fits" in msg:
                    msg = "does not fit: " + msg.split("error: ")[-1]
                else:
                    self.failures.append(f"{res['model']} {label} {system}: {msg}")
                print(f"{label:<18} {system:<34} {'-':>9} {'-':>10} {'-':>8} {'-':>7}  {msg[:80]}")
                continue
            ips = r["samples_per_second"]
            tf = res["flops_per_step"] * ips / res["batch"] / 1e12
            rate = ips * seq if seq else ips
            note = []
            if "segments" in r:
                system = f"{system}({r['segments']})"
            if "strategy" in r and r.get("budget_bytes"):
                note.append(f"{r['recomputes_per_step']} recomputes, predicted "
                            f"{fmt_bytes(r['predicted_peak_bytes'])}")
            if len(r.get("samples_per_second_runs", [])) > 1:
                note.append(f"median of {len(r['samples_per_second_runs'])} "
                            f"({min(r['samples_per_second_runs']):.1f}-"
                            f"{max(r['samples_per_second_runs']):.1f})")
            graph = r.get("step_graph", "")  # Note [step graphs]: how remat's steps ran
            if system.startswith("remat") and self.a.device == "cuda" and graph:
                note.append("eager: " + graph[5:] if graph.startswith("off: ") else "cuda graph")
            if system.startswith("remat"):
                base.setdefault(label, ips)
            elif label in base and ips > 0:
                note.append(f"remat {base[label] / ips:.2f}x")
            frac = f"{100 * tf * 1e12 / peak:.1f}%" if peak else "-"
            print(f"{label:<18} {system:<34} {rate:9.1f} {fmt_bytes(r.get('measured_peak_bytes')):>10} "
                  f"{tf:8.2f} {frac:>7}  {'; '.join(note)}")
        if "max_batch" in res:
            mb = res["max_batch"]
            if "error" in mb:
                self.failures.append(f"{res['model']} maxbatch: {mb['error']}")
            print(f"largest batch under {fmt_bytes(self.a.cap)}: " +
                  ", ".join(f"{k} {v}" for k, v in mb.items()))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))  # tools/bench/ -> the repository
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", action="append", help="model YAML (repeatable; default VGG19 and ResNet-50)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--batch", type=int, help="override the configs' batch")
    p.add_argument("--input", help="per-sample input override, e.g. 3x32x32")
    p.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    p.add_argument("--warmup", type=int, default=3, help="PyTorch warm-up steps")
    p.add_argument("--repeat", type=int, default=1,
                   help="keep-everything runs of each side, alternated; the median is shown")
    p.add_argument("--precision", default="tf32,bf16",
                   help="comma-separated, each of fp32, tf32, tf32-all, bf16: one table each")
    p.add_argument("--strategy", default="checkmate", help="remat strategy under a budget")
    p.add_argument("--strategies", default="all-keep,chen-sqrtn,chen-greedy,checkmate",
                   help="remat strategies for the max-batch row")
    p.add_argument("--fractions", default="0.5,0.7", help="budgets as fractions of keep-everything")
    p.add_argument("--cap", default="15GB", help="memory cap for the max-batch row")
    p.add_argument("--no-maxbatch", dest="maxbatch", action="store_false")
    p.add_argument("--time-limit", type=float, default=60, help="remat solver limit (s)")
    p.add_argument("--bin", default=os.path.join(root, "build", "tools"), help="remat's tools folder")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--verbose", action="store_true", help="echo every remat command and its output")
    p.add_argument("--remat-override", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for remat's runs only (repeatable), e.g. "
                        "layout=channels_last; PyTorch's model is built from the YAML as written")
    a = p.parse_args()
    try:
        a.fractions = [float(x) for x in a.fractions.split(",")]
        a.cap = parse_bytes(a.cap)
    except ValueError as e:
        p.error(f"bad --fractions or --cap: {e}")
    if any(not 0 < f < 1 for f in a.fractions):
        p.error("--fractions must lie between 0 and 1")
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    for o in a.remat_override:
        if "=" not in o or o.startswith("="):
            p.error(f"--remat-override: expected KEY=VALUE, got '{o}'")
    a.precisions = a.precision.split(",")
    if not a.precisions or any(x not in PRECISIONS for x in a.precisions):
        p.error(f"--precision: each of {', '.join(PRECISIONS)}, comma-separated")
    a.config = a.config or [os.path.join(root, "configs", "vgg19.yaml"),
                            os.path.join(root, "configs", "resnet50.yaml")]
    import yaml
    from bench_pytorch_gpt2 import is_gpt2
    for config in a.config:
        try:
            with open(config) as f:
                gpt2 = is_gpt2(yaml.safe_load(f))
        except (OSError, yaml.YAMLError) as e:
            p.error(f"--config {config}: {e}")
        if gpt2 and a.input:
            p.error(f"--input is for image models; {config} is a token model (its `sequence` sets T)")
    if not os.access(os.path.join(a.bin, "train"), os.X_OK):
        p.error(f"no remat train in {a.bin} (build first, or pass --bin)")
    b = Bench(a)
    b.torch_setup()
    results = []
    for config in a.config:
        for prec in a.precisions:
            b.set_precision(prec)
            res = b.model(config)
            b.print_table(res)
            results.append(res)
            sys.stdout.flush()
    if a.json:
        out = {"device": b.device_name(), "precisions": a.precisions, "cap_bytes": a.cap,
               "results": [dict(r, rows=[{"memory": l, "system": s, **(x or {})} for l, s, x in r["rows"]])
                           for r in results], "failures": b.failures}
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=2)
        os.replace(tmp, a.json)
    for f in b.failures:
        print("failed: " + f, file=sys.stderr)
    return 1 if b.failures else 0


if __name__ == "__main__":
    sys.exit(main())
