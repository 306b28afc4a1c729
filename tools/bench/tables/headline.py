"""The README's headline results, one row per result with its machine, revision and date."""
import re

from .common import DataError, newest, read_csv, rel_link, table
from .gpu import GPU_BENCH, GPU_TRAIN, gpu_comparisons, rate_text, ratio
from .maxbatch import MAXINPUT, OFFLOAD_MAXBATCH, maxinput_newest
from .onnx import ONNX_ZOO
from .zoo import ZOO, bracket_closed, brackets_newest

def spaced_bytes(size):
    """'3.5GB' as '3.5 GB'."""
    return re.sub(r"(\d)([KMGT]i?B)$", r"\1 \2", size)


def gen_headline(root, doc):
    def link(target, text):
        return f"[{text}]({rel_link(doc, target, root)})"
    rows = []

    rel = "tools/bench/results/solver/zoo_fractions.csv"
    zoo = read_csv(root, rel)
    solved = [r for r in zoo if r["overhead"] != "infeasible"]
    worst = max(solved, key=lambda r: float(r["gap_pct"]))
    proven = sum(r["proven_optimal"] == "yes" for r in solved)
    nets = len({r["network"] for r in zoo})
    revs = sorted({r["revision"] for r in zoo})
    rows.append([
        "solver: checkmate's schedule against its proven lower bound",
        f"{nets} networks at 40 / 60 / 80 % of their activation memory: every gap at most "
        f"{worst['gap_pct']} % ({worst['network']}), {proven} of {len(solved)} proven optimal",
        worst["machine"], ", ".join(revs), ", ".join(sorted({r["date"] for r in zoo})),
        link("docs/benchmarks.md", "benchmarks") + ", " + link(rel, "data")])

    rel = "tools/bench/results/maxbatch/precision_16gb.csv"
    mb = read_csv(root, rel)
    for config, precision in (("vgg19", "bf16"), ("gpt2_fused", "bf16")):
        sel = [r for r in mb if r["config"] == config and r["precision"] == precision]
        cm = newest([r for r in sel if r["strategy"] == "checkmate"])
        keep = newest([r for r in sel if r["strategy"] == "all-keep"])
        rows.append([
            f"memory: largest batch in 16 GB, {cm['model']}, {precision}",
            f"checkmate {cm['batch']}, keeping everything {keep['batch']} "
            f"({int(cm['batch']) / int(keep['batch']):.2f}x)",
            cm["machine"], cm["revision"], cm["date"],
            link("docs/guide/precision-and-layouts.md", "precision") + ", " + link(rel, "data")])

    rel = f"{ZOO}/maxbatch_brackets.csv"
    br = [r for r, _ in brackets_newest(root) if r["batch"] not in ("", "0") and r["upper_bound"]]
    if br:
        closed = [r for r in br if bracket_closed(r["batch"], r["upper_bound"])]
        proven = [r for r in closed if r["upper_bound"] == r["batch"]]
        at_ws = [r for r in br
                 if r not in closed and r["bound_source"].startswith("the working set")]
        rows.append([
            "memory: largest batch in 16 GB, how close checkmate is to the true maximum",
            f"{len(br)} zoo networks, 60 s each: bracket (proven bound / answer) within 1.05 on "
            f"{len(closed)} ({len(proven)} proven optimal); {len(br) - len(closed)} open, "
            f"{len(at_ws)} of them at the working-set bound; each row says why",
            br[0]["machine"], ", ".join(sorted({r["revision"] for r in br})),
            ", ".join(sorted({r["date"] for r in br})),
            link("docs/zoo.md#the-papers-figures-4-and-5-on-the-zoo", "zoo") + ", " +
            link(rel, "data")])

    rel = MAXINPUT
    mi = [r for r in maxinput_newest(root) if r["ratio"]]
    if mi:
        best = max(mi, key=lambda r: float(r["ratio"]))
        images = [r for r in mi if r["dimension"] == "input"]
        rows.append([
            "memory: largest input in 16 GB (the paper's input-size result)",
            f"checkmate / keeping everything up to {best['ratio']}x ({best['model']}, "
            f"{best['precision']}, batch {best['batch']}: H = W {best['checkmate']} against "
            f"{best['all-keep']}); {len(images)} image rows, {len(mi) - len(images)} GPT-2 rows",
            best["machine"], ", ".join(sorted({r["revision"] for r in mi})),
            ", ".join(sorted({r["date"] for r in mi})),
            link("docs/zoo.md#the-largest-input-under-16-gb-the-papers-input-size-result", "zoo")
            + ", " + link(rel, "data")])

    rel = OFFLOAD_MAXBATCH
    off = [r for r in read_csv(root, rel) if r["ratio"] and r["link_gbps"] == "25"]
    if off:
        parts = []
        for tflops, overlap in sorted({(float(r["device_tflops"]), r["copy_overlap"]) for r in off},
                                      key=lambda k: (-k[0], k[1])):
            sel = [r for r in off
                   if float(r["device_tflops"]) == tflops and r["copy_overlap"] == overlap]
            best = max(sel, key=lambda r: float(r["ratio"]))
            parts.append(f"at {tflops:g} TFLOP/s, {overlap} copies, up to {best['ratio']}x "
                         f"({best['model']}: {best['checkmate_offload']} against "
                         f"{best['checkmate']})")
        rows.append([
            "offload: largest batch in 16 GB, checkmate-offload against checkmate, 25 GB/s link",
            "; ".join(parts), off[0]["machine"], ", ".join(sorted({r["revision"] for r in off})),
            ", ".join(sorted({r["date"] for r in off})),
            link("docs/guide/offload.md#what-it-finds", "offload") + ", " + link(rel, "data")])

    train = read_csv(root, GPU_TRAIN)
    budgeted = newest([r for r in train if r["config"] == "gpt2" and r["precision"] == "bf16"
                       and r["budget"]])
    keep = newest([r for r in train if r["config"] == "gpt2" and r["precision"] == "bf16"
                   and not r["budget"] and r["revision"] == budgeted["revision"]])
    budget = spaced_bytes(budgeted["budget"])
    rows.append([
        f"memory on the GPU: GPT-2 124M, bf16, batch {budgeted['batch']}, under {budget}",
        f"predicted peak {budgeted['predicted_peak']}, measured {budgeted['measured_peak']}; "
        f"{budgeted['samples_per_s']} samples/s against {keep['samples_per_s']} keeping "
        f"everything ({keep['predicted_peak']})",
        budgeted["device"], budgeted["revision"], budgeted["date"],
        link("docs/benchmarks.md", "benchmarks") + ", " + link(GPU_TRAIN, "data")])

    offload = newest([r for r in train if r["environment"].startswith("checkmate-offload")
                      and r["measured_ms_per_step"]])
    rows.append([
        f"offload on the GPU: {offload['config']}, {offload['precision']}, batch "
        f"{offload['batch']}, under {spaced_bytes(offload['budget'])}, checkmate-offload",
        f"predicted peak {offload['predicted_peak']}, measured {offload['measured_peak']}; "
        f"{offload['measured_ms_per_step']} ms a step against {offload['predicted_ms_per_step']} "
        f"predicted (recomputes: {offload['recomputes']}; "
        f"{offload['environment'].split(', ', 1)[-1]})",
        offload["device"], offload["revision"], offload["date"],
        link("docs/guide/offload.md#executing-copies", "offload") + ", " + link(GPU_TRAIN, "data")])

    rel = ONNX_ZOO
    onnx_rows = read_csv(root, rel)
    imported = [r for r in onnx_rows if r["status"] == "imports"]
    equal = sum(r["remat_params"] == r["params"] for r in imported)
    rows.append([
        "ONNX import: torchvision classification models exported from PyTorch",
        f"{len(imported)} of {len(onnx_rows)} import, plan and train a CPU step; parameters "
        f"equal to PyTorch's in {equal} of {len(imported)}",
        "; ".join(sorted({r["machine"] for r in imported})),
        ", ".join(sorted({r["revision"] for r in onnx_rows})),
        ", ".join(sorted({r["date"] for r in onnx_rows})),
        link("docs/guide/onnx.md", "ONNX import") + ", " + link(rel, "data")])

    comparisons = gpu_comparisons(root)
    for config, precision, setting_prefix in (("resnet50", "bf16", "keep"),
                                              ("resnet50", "bf16", "50%"),
                                              ("vgg19", "bf16", "keep"),
                                              ("gpt2", "bf16", "keep")):
        sel = [(k, m, t) for k, m, t in comparisons
               if k[0] == config and k[1] == precision and k[3].startswith(setting_prefix)
               and not k[4] and ratio(m, t)]
        if not sel:
            raise DataError(f"{GPU_BENCH}: no {config} {precision} '{setting_prefix}' comparison")
        dated = [(k[5][2], i) for i, (k, m, t) in enumerate(sel)]
        k, m, t = sel[max(dated)[1]]
        what = "keeping everything" if setting_prefix == "keep" else \
            f"at {k[3]} (checkmate against {t['system'][len('pytorch '):]})"
        rows.append([
            f"GPU speed against PyTorch: {config} b{k[2]}, {precision}, {what}",
            f"{ratio(m, t):.2f}x ({rate_text(m)} against {rate_text(t)})",
            k[5][0], k[5][1], k[5][2],
            link("docs/benchmarks.md", "benchmarks") + ", " + link(GPU_BENCH, "data")])
    return table(["result", "value", "machine", "revision", "date", "from"], rows)
