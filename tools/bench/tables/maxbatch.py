"""Max batch and input size in 16 GB: per precision, sharded, the input-size result, and
checkmate-offload against checkmate."""
from .common import (CPU_COLUMNS, STRATEGIES, batch_cell, gb, group, need, newest, provenance,
                     read_csv, table)
from .cpu import simple
from .zoo import bracket_verdict

def gen_maxbatch_precision(root, doc):
    rel = "tools/bench/results/maxbatch/precision_16gb.csv"
    data = need(read_csv(root, rel), rel, ["config", "model", "precision", "strategy", "batch",
                                           "upper_bound", "time_limited", "budget", "limit_s",
                                           *CPU_COLUMNS])
    fp32 = {}
    for r in data:
        if r["precision"] == "fp32":
            fp32.setdefault((r["config"], r["strategy"]), r["batch"])
    header = ["model", "precision", *STRATEGIES[:-1], "checkmate (upper bound)", "limit (s)",
              *CPU_COLUMNS]
    rows = []
    for key, grp in group(data, lambda r: (r["model"], r["precision"], r["limit_s"],
                                           provenance(r))).items():
        by = {r["strategy"]: r for r in grp}
        cells = []
        for s in STRATEGIES:
            if s not in by:
                cells.append("")
                continue
            r = by[s]
            ratio = ""
            base = fp32.get((r["config"], s))
            if r["precision"] != "fp32" and base:
                ratio = f" ({int(r['batch']) / int(base):.2f}x)"
            cells.append(batch_cell(r["batch"], r["time_limited"], r["upper_bound"], ratio))
        rows.append([key[0], key[1], *cells, key[2], *key[3]])
    return table(header, rows)


def gen_maxbatch_sharded(root, doc):
    rel = "tools/bench/results/maxbatch/sharded_vgg19.csv"
    data = need(read_csv(root, rel), rel, ["ranks", "optimizer_state", "constant_at_b64",
                                           "strategy", "batch", "upper_bound", "proven_optimal",
                                           "limit_s", *CPU_COLUMNS])
    strategies = ["all-keep", "chen-sqrtn", "chen-greedy", "checkmate"]
    header = ["ranks", "optimizer state", "constant (batch 64)", *strategies[:-1],
              "checkmate (upper bound)", "limit (s)", *CPU_COLUMNS]
    rows = []
    for key, grp in group(data, lambda r: (r["ranks"], r["optimizer_state"], r["constant_at_b64"],
                                           r["limit_s"], provenance(r))).items():
        by = {r["strategy"]: r for r in grp}
        cells = []
        for s in strategies:
            r = by.get(s)
            if not r:
                cells.append("")
            elif r["upper_bound"]:
                opt = ", optimal" if r["proven_optimal"] == "yes" else ""
                cells.append(f"{r['batch']} ({r['upper_bound']}{opt})")
            else:
                cells.append(r["batch"])
        rows.append([key[0], key[1], key[2], *cells, key[3], *key[4]])
    return table(header, rows)



MAXINPUT = "tools/bench/results/maxinput/16gb.csv"
MAXINPUT_OTHERS = ["all-keep", "chen-sqrtn", "chen-sqrtn-linear", "chen-greedy",
                   "chen-greedy-linear", "griewank", "lp"]


def maxinput_row(r):
    best = r["checkmate"]
    if best and r["checkmate_bound"] and r["checkmate_bound"] != best:
        best += f" (<= {r['checkmate_bound']})"
    others = [int(r[s]) for s in MAXINPUT_OTHERS if r[s]]
    beats = "" if not r["checkmate"] or not others else (
        "yes" if int(r["checkmate"]) >= max(others) else "no")
    note = r["note"]
    if note.startswith("varying "):  # the search's own line: keep what it says of the sizes
        note = note[note.find("(") + 1:note.find(")")] if "(" in note else ""
    return [r["model"], r["precision"], r["batch"], "H = W" if r["dimension"] == "input" else "T",
            *[r[s] or "n/a" for s in MAXINPUT_OTHERS], best, r["ratio"] and r["ratio"] + "x", beats,
            r["seconds"] + " s", note]


def maxinput_newest(root):
    """The newest row of each (model, precision, batch): the file keeps every run."""
    columns = ["model", "precision", "batch", "dimension", *MAXINPUT_OTHERS, "checkmate",
               "checkmate_bound", "checkmate_bound_source", "ratio", "seconds", "note"]
    data = need(read_csv(root, MAXINPUT), MAXINPUT, columns + list(CPU_COLUMNS))
    return [newest(grp) for grp in group(
        data, lambda r: (r["model"], r["precision"], r["batch"], r["dimension"])).values()]


def gen_maxinput(root, doc):
    header = ["model", "precision", "batch", "size", *MAXINPUT_OTHERS,
              "checkmate (<= proven bound)", "checkmate / all-keep", "checkmate >= every other",
              "the bound, or why it stays open", "run", "sizes searched", *CPU_COLUMNS]
    rows = []
    for r in maxinput_newest(root):
        cells = maxinput_row(r)
        verdict = (bracket_verdict(r["checkmate"], r["checkmate_bound"],
                                   r["checkmate_bound_source"], "size")
                   if r["checkmate"] not in ("", "0") else "")
        rows.append(cells[:-2] + [verdict] + cells[-2:] + list(provenance(r)))
    return table(header, rows)



OFFLOAD_MAXBATCH = "tools/bench/results/offload/maxbatch_16gb.csv"
OFFLOAD_SWEEP = "tools/bench/results/offload/sweep.csv"


def times(x, digits=3):
    return f"{float(x):.{digits}f}x" if x else "-"


def rate(x):
    """A device rate as written once: 100, 10."""
    return f"{float(x):g}"


def offload_maxbatch_row(r):
    cm = r["checkmate"]
    if cm and r["checkmate_bound"] and r["checkmate_bound"] != cm:
        cm += f" (<= {r['checkmate_bound']})"
    return [r["model"], r["precision"], r["budget"], r["link_gbps"], rate(r["device_tflops"]),
            r["copy_overlap"], r["chen_sqrtn"], r["chen_sqrtn_offload"] or "-",
            r["greedy_offload"] or "-", cm,
            times(r["checkmate_overhead"]), r["working_set_bound"], r["checkmate_offload"] or "-",
            times(r["offload_overhead"]), r["ratio"] and r["ratio"] + "x", r["seconds"] + " s"]


gen_offload_maxbatch = simple(
    OFFLOAD_MAXBATCH,
    ["model", "precision", "budget", "link_gbps", "device_tflops", "copy_overlap", "chen_sqrtn",
     "chen_sqrtn_offload", "greedy_offload", "checkmate", "checkmate_bound", "working_set_bound",
     "checkmate_overhead", "checkmate_offload", "offload_overhead", "ratio", "seconds"],
    ["model", "precision", "budget", "link (GB/s)", "device (TFLOP/s)", "copies", "chen-sqrtn",
     "chen-sqrtn-offload", "greedy-offload", "checkmate (<= proven bound)", "its overhead",
     "any schedule <=", "checkmate-offload", "its overhead", "checkmate-offload / checkmate",
     "run"],
    offload_maxbatch_row)


def offload_sweep_row(r):
    c, o = r["checkmate_overhead"], r["offload_overhead"]
    below = "" if not c or not o else (
        "lower" if float(o) < float(c) * (1 - 1e-4) else
        "equal" if float(o) <= float(c) * (1 + 1e-4) else "HIGHER")
    return [r["model"], r["batch"], r["link_gbps"], rate(r["device_tflops"]), r["copy_overlap"],
            gb(r["budget_bytes"]), times(c, 4), times(o, 4), below]


gen_offload_sweep = simple(
    OFFLOAD_SWEEP,
    ["model", "batch", "link_gbps", "device_tflops", "copy_overlap", "budget_bytes",
     "checkmate_overhead", "offload_overhead"],
    ["model", "batch", "link (GB/s)", "device (TFLOP/s)", "copies", "budget", "checkmate",
     "checkmate-offload", "offload against checkmate"],
    offload_sweep_row)
