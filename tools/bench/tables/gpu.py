"""The GPU's results: the benchmark against PyTorch and the training runs."""
from .common import group, need, read_csv, table, thousands

GPU_BENCH = "tools/bench/results/gpu/bench_pytorch.csv"
GPU_COLUMNS = ("device", "revision", "date", "load")


def gpu_bench(root):
    return need(read_csv(root, GPU_BENCH), GPU_BENCH,
                ["config", "precision", "batch", "setting", "system", "rate", "unit", "peak_gb",
                 "recomputes", "note", "environment", *GPU_COLUMNS])


def rate_text(r):
    if not r["rate"]:
        return r["note"] or "-"
    x = float(r["rate"])
    if r["unit"] == "tok/s" and x >= 10000:
        return f"{x / 1000:.1f}k tok/s"
    return f"{thousands(r['rate'])} {r['unit']}"


def gpu_comparisons(root):
    """One row per (run, setting): remat's row and PyTorch's row side by side."""
    out = []
    for key, grp in group(gpu_bench(root), lambda r: (
            r["config"], r["precision"], r["batch"], r["setting"], r["environment"],
            tuple(r[c] for c in GPU_COLUMNS))).items():
        remat = [r for r in grp if r["system"].startswith("remat")]
        torch = [r for r in grp if r["system"].startswith("pytorch")]
        for i in range(max(len(remat), len(torch))):
            out.append((key, remat[i] if i < len(remat) else None,
                        torch[i] if i < len(torch) else None))
    return out


def ratio(remat, torch):
    if remat and torch and remat["rate"] and torch["rate"]:
        return float(remat["rate"]) / float(torch["rate"])
    return None


def gen_gpu_bench(root, doc):
    rows = []
    for key, remat, torch in gpu_comparisons(root):
        config, precision, batch, setting, env, prov = key
        r = ratio(remat, torch)
        rows.append([
            config, precision, batch, setting,
            f"{rate_text(remat)}" + (f", {remat['recomputes']} recomputes"
                                     if remat and remat["recomputes"] else "") if remat else "",
            f"{rate_text(torch)} ({torch['system'][len('pytorch '):]})" if torch else "",
            f"{r:.2f}x" if r else "",
            f"{remat['peak_gb']} GB" if remat and remat["peak_gb"] else "",
            f"{torch['peak_gb']} GB" if torch and torch["peak_gb"] else "",
            env, *prov])
    return table(["config", "precision", "batch", "memory", "remat", "PyTorch", "remat / PyTorch",
                  "remat peak", "PyTorch peak", "environment", *GPU_COLUMNS], rows)


GPU_TRAIN = "tools/bench/results/gpu/train_runs.csv"


def gen_gpu_train(root, doc):
    data = need(read_csv(root, GPU_TRAIN), GPU_TRAIN,
                ["config", "precision", "batch", "budget", "environment", "steps",
                 "samples_per_s", "predicted_peak", "measured_peak", "recomputes",
                 "predicted_ms_per_step", "measured_ms_per_step", *GPU_COLUMNS])
    return table(["config", "precision", "batch", "budget", "environment", "steps", "samples/s",
                  "predicted peak", "measured peak", "recomputes", "predicted ms a step",
                  "measured ms a step", *GPU_COLUMNS],
                 [[r["config"], r["precision"], r["batch"], r["budget"] or "keep everything",
                   r["environment"], r["steps"], thousands(r["samples_per_s"]),
                   r["predicted_peak"], r["measured_peak"], r["recomputes"],
                   r["predicted_ms_per_step"], r["measured_ms_per_step"],
                   *(r[c] for c in GPU_COLUMNS)] for r in data])
