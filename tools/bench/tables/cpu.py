"""The CPU measurements: gradient accumulation, the image loader, the arena, the fuzz
harnesses and bf16's accuracy."""
from .common import CPU_COLUMNS, need, provenance, read_csv, table, thousands

def simple(rel, columns, header, cells):
    def gen(root, doc):
        data = need(read_csv(root, rel), rel, columns + list(CPU_COLUMNS))
        return table(header + list(CPU_COLUMNS), [cells(r) + list(provenance(r)) for r in data])
    return gen


gen_accumulate = simple(
    "tools/bench/results/cpu/accumulate.csv",
    ["config", "budget", "steps_samples", "batch", "accumulate", "strategy_recomputes",
     "predicted_overhead", "samples_per_s"],
    ["config", "budget", "samples per step", "batch x accumulate", "recomputes",
     "predicted overhead", "samples/s"],
    lambda r: [r["config"], r["budget"], r["steps_samples"], f"{r['batch']} x {r['accumulate']}",
               r["strategy_recomputes"], r["predicted_overhead"] + "x", r["samples_per_s"]])

gen_loader = simple(
    "tools/bench/results/cpu/loader.csv",
    ["config", "input", "batch", "images", "threads", "train_crops_img_s", "eval_crops_img_s",
     "wait_per_100ms_step_ms", "wait_per_250ms_step_ms"],
    ["config, input, batch", "images", "threads", "training crops, images/s",
     "evaluation crops, images/s", "wait per 100 ms step", "wait per 250 ms step"],
    lambda r: [f"{r['config']}, {r['input']}, b{r['batch']}", r["images"], r["threads"],
               r["train_crops_img_s"], r["eval_crops_img_s"], r["wait_per_100ms_step_ms"] + " ms",
               r["wait_per_250ms_step_ms"] + " ms"])

gen_arena = simple(
    "tools/bench/results/cpu/arena.csv",
    ["plans", "points", "limit_s", "measure", "value"],
    ["plans", "--points", "--time-limit (s)", "measure", "value"],
    lambda r: [r["plans"], r["points"], r["limit_s"], r["measure"], r["value"]])


gen_fuzz = simple(
    "tools/bench/results/cpu/fuzz.csv",
    ["harness", "seconds", "executions", "executions_per_s", "crashes"],
    ["harness", "seconds", "executions", "executions/s", "crashes"],
    lambda r: [r["harness"], r["seconds"], thousands(r["executions"]),
               thousands(r["executions_per_s"]), r["crashes"]])


def bf16_row(r):
    diff = abs(float(r["bf16"]) - float(r["fp32"]))
    verdict = "pass" if diff <= float(r["tolerance"]) else "fail"
    return [r["config"], r["steps"], r["window"], r["fp32"], r["fp32_seed_plus_1"], r["bf16"],
            f"{diff:.4f}", r["tolerance"], verdict]


gen_bf16_accuracy = simple(
    "tools/bench/results/cpu/bf16_accuracy.csv",
    ["config", "steps", "window", "fp32", "fp32_seed_plus_1", "bf16", "tolerance"],
    ["config", "steps", "window", "fp32", "fp32 seed+1", "bf16", "|bf16 - fp32|", "tolerance",
     "verdict"], bf16_row)
