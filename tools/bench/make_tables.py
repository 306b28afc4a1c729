#!/usr/bin/env python3
"""The result tables of README.md and docs/, generated from the result files under
tools/bench/results/, and the index of the code's Notes in docs/design.md.

A generated block sits between two marker comments in a Markdown file:

  <!-- tables:NAME begin -->
  ...
  <!-- tables:NAME end -->

and NAME is one of TABLES below. Every row of a results table carries the revision, date,
machine and load of the run it comes from ("not recorded" where the run did not record it).

Usage: tools/bench/make_tables.py [--check] [--self-test] [--root DIR]
  (no flag)    rewrites every generated block of README.md and docs/**/*.md in place
  --check      writes nothing; exits 1 when a block differs from what would be generated, a
               marker is unknown or unpaired, or a relative link of README.md or docs/ names a
               file or heading that does not exist
  --self-test  checks that --check catches an edited number, a broken link and a lost marker
  --root DIR   the repository root (default: two folders above this script)
Exit codes: 0 success, 1 a difference, a broken link or unreadable result data, 2 usage.
Python 3 standard library only.
"""
import argparse
import csv
import difflib
import html
import os
import re
import sys
from collections import OrderedDict

CPU_COLUMNS = ("revision", "date", "machine", "load")


class DataError(Exception):
    pass


# ---- reading the result files --------------------------------------------------------------

def read_csv(root, rel):
    path = os.path.join(root, rel)
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise DataError(f"{rel}: cannot read ({e.strerror})")
    for i, r in enumerate(rows, 2):
        if None in r or any(v is None for v in r.values()):
            raise DataError(f"{rel}:{i}: the row has another number of columns than the header")
    return rows


def need(rows, rel, columns):
    if rows:
        missing = [c for c in columns if c not in rows[0]]
        if missing:
            raise DataError(f"{rel}: missing column(s) {', '.join(missing)}")
    return rows


def provenance(r):
    return tuple(r[c] for c in CPU_COLUMNS)


def group(rows, key):
    """Rows grouped by key(row), groups in the order they first appear."""
    out = OrderedDict()
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


# ---- formatting -----------------------------------------------------------------------------

def table(header, rows):
    def cell(x):
        return str(x).replace("|", "\\|")
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def gb(nbytes):
    """Decimal units, as the tools print them: 751 MB, 2.24 GB."""
    n = float(nbytes)
    return f"{n / 1e6:.0f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def thousands(text):
    """1234.5 -> 1,234.5; text that is not a number is returned as it is."""
    try:
        x = float(text)
    except ValueError:
        return text
    decimals = len(text.split(".")[1]) if "." in text else 0
    return f"{x:,.{decimals}f}"


def rel_link(doc, target, root):
    return os.path.relpath(os.path.join(root, target), os.path.dirname(os.path.join(root, doc)))


STRATEGIES = ["all-keep", "chen-sqrtn", "chen-sqrtn-linear", "chen-greedy", "chen-greedy-linear",
              "lp", "checkmate"]


def batch_cell(batch, time_limited, upper_bound, extra=""):
    if batch == "":
        return ""
    s = batch + ("*" if time_limited == "yes" else "")
    if upper_bound and upper_bound != batch:
        s += f" ({upper_bound})"
    return s + extra


# ---- the zoo: the paper's Figures 4 and 5 -----------------------------------------------------

ZOO = "tools/bench/results/zoo"


def zoo_runs(root):
    rel = f"{ZOO}/runs.csv"
    return need(read_csv(root, rel), rel, ["config", "network", "batch", "nodes", "sweep_limit_s",
                                           "maxbatch_limit_s", "maxbatch_time_limited",
                                           *CPU_COLUMNS])


def sweep_budgets(root, config):
    """The budgets (bytes, ascending) of a sweep CSV and its rows by (strategy, budget)."""
    rel = f"{ZOO}/{config}_sweep.csv"
    rows = need(read_csv(root, rel), rel, ["strategy", "budget_bytes", "feasible", "overhead"])
    budgets = sorted({int(r["budget_bytes"]) for r in rows})
    return budgets, {(r["strategy"], int(r["budget_bytes"])): r for r in rows}


def overhead(r):
    return float(r["overhead"]) if r and r["feasible"] == "1" else None


def fmt_overhead(x):
    return "-" if x is None else f"{x:.3f}"


def gen_zoo_fig4(root, doc):
    reruns = read_csv(root, f"{ZOO}/sweep_reruns.csv")
    need(reruns, f"{ZOO}/sweep_reruns.csv", ["config", "strategy", "budget_index", "overhead",
                                              "limit_s", *CPU_COLUMNS])
    header = ["network (batch, nodes)", "strategies"] + [f"budget {k}" for k in range(1, 7)] + \
             ["limit (s)", *CPU_COLUMNS]
    rows = []
    for run in zoo_runs(root):
        cfg = run["config"]
        budgets, cells = sweep_budgets(root, cfg)
        name = f"{run['network']} (b{run['batch']}, {run['nodes']})"
        line = []
        for b in budgets:
            base = [overhead(cells.get((s, b))) for s in STRATEGIES[:5]]
            base = [x for x in base if x is not None]
            best = min(base) if base else None
            lp, cm = overhead(cells.get(("lp", b))), overhead(cells.get(("checkmate", b)))
            line.append(f"{gb(b)}: {fmt_overhead(best)} / {fmt_overhead(lp)} / {fmt_overhead(cm)}")
        rows.append([name, "best baseline / lp / checkmate", *line, run["sweep_limit_s"],
                     *provenance(run)])
        mine = [r for r in reruns if r["config"] == cfg]
        for key, grp in group(mine, lambda r: (r["limit_s"], provenance(r))).items():
            strategies = [s for s in ("lp", "checkmate") if any(r["strategy"] == s for r in grp)]
            line = []
            for k, b in enumerate(budgets, 1):
                vals = {r["strategy"]: r["overhead"] for r in grp if int(r["budget_index"]) == k}
                line.append(f"{gb(b)}: " + " / ".join(vals.get(s, "") for s in strategies)
                            if vals else "")
            rows.append([name, " / ".join(strategies), *line, key[0], *key[1]])
    return table(header, rows)


def svg_maxbatch(root, config):
    """Figure 5's bars as the SVG labels them: {strategy: (batch, upper bound)}."""
    rel = f"{ZOO}/{config}_maxbatch.svg"
    try:
        with open(os.path.join(root, rel)) as f:
            texts = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", f.read())]
    except OSError as e:
        raise DataError(f"{rel}: cannot read ({e.strerror})")
    out = {}
    for i in range(1, len(texts)):
        if texts[i] in STRATEGIES + ["griewank"]:
            m = re.match(r"(n/a|\d+)(?: \(<= (\d+)\))?$", texts[i - 1])
            if not m:
                raise DataError(f"{rel}: the bar of {texts[i]} reads '{texts[i - 1]}'")
            out[texts[i]] = (m.group(1), m.group(2) or "")
    missing = [s for s in STRATEGIES if s not in out]
    if missing:
        raise DataError(f"{rel}: no bar for {', '.join(missing)}")
    return out


def gen_zoo_fig5(root, doc):
    rel = f"{ZOO}/maxbatch_reruns.csv"
    reruns = need(read_csv(root, rel), rel, ["config", "strategy", "batch", "upper_bound",
                                             "time_limited", "limit_s", *CPU_COLUMNS])
    header = ["network (nodes)", *STRATEGIES[:-1], "checkmate (upper bound)", "limit (s)",
              *CPU_COLUMNS]
    rows = []
    for run in zoo_runs(root):
        cfg = run["config"]
        bars = svg_maxbatch(root, cfg)
        limited = run["maxbatch_time_limited"].split()
        name = f"{run['network']} ({run['nodes']})"
        rows.append([name] + [batch_cell(bars[s][0], "yes" if s in limited else "no", bars[s][1])
                              for s in STRATEGIES] + [run["maxbatch_limit_s"], *provenance(run)])
        mine = [r for r in reruns if r["config"] == cfg]
        for key, grp in group(mine, lambda r: (r["limit_s"], provenance(r))).items():
            by = {r["strategy"]: r for r in grp}
            rows.append([name] + [batch_cell(by[s]["batch"], by[s]["time_limited"],
                                             by[s]["upper_bound"]) if s in by else ""
                                  for s in STRATEGIES] + [key[0], *key[1]])
    return table(header, rows)


def bracket_closed(answer, bound):
    """A search's bracket is closed when its proven bound is within 1.05 of its answer."""
    return int(bound) <= 1.05 * int(answer)


def bracket_verdict(answer, bound, proof, noun):
    """Whether the bracket [answer, bound] is closed, else what proves the bound (`noun`: what
    was searched, "batch" or "size")."""
    if not bound or bound == answer:
        return "closed: proven optimal"
    if bracket_closed(answer, bound):
        return "closed: within 1.05" + (f" (the bound: {proof})" if proof else "")
    if not proof:
        return "open (its proof not recorded)"
    return f"open: no {noun} above {answer} proven not to fit in the limit; the bound is {proof}"


def brackets_newest(root):
    """Per network, the newest row of the brackets file (which keeps every run) and the answers
    of the runs before it, oldest first."""
    rel = f"{ZOO}/maxbatch_brackets.csv"
    data = need(read_csv(root, rel), rel, ["config", "batch", "upper_bound", "bound_source",
                                           "status", "limit_s", "threads", *CPU_COLUMNS])
    out = []
    for grp in group(data, lambda r: r["config"]).values():
        last = newest(grp)
        out.append((last, [r for r in grp if r is not last]))
    return out


def gen_zoo_fig5_brackets(root, doc):
    rerun_rel = f"{ZOO}/maxbatch_reruns.csv"
    reruns = need(read_csv(root, rerun_rel), rerun_rel, ["config", "strategy", "batch"])
    networks = {run["config"]: run["network"] for run in zoo_runs(root)}
    header = ["network", "checkmate", "proven bound", "bound / answer", "best other (strategy)",
              "checkmate >= it", "the bound, or why it stays open", "limit (s)",
              "checkmate in earlier runs (revision)", *CPU_COLUMNS]
    rows = []
    for r, earlier in brackets_newest(root):
        cfg = r["config"]
        others = [(int(b), s) for s, (b, _) in svg_maxbatch(root, cfg).items()
                  if s != "checkmate" and b.isdigit()]
        others += [(int(x["batch"]), x["strategy"]) for x in reruns
                   if x["config"] == cfg and x["strategy"] != "checkmate" and x["batch"]]
        best = max(others) if others else None
        ratio = (f"{int(r['upper_bound']) / int(r['batch']):.3f}"
                 if r["batch"] not in ("", "0") and r["upper_bound"] else "")
        beats = "" if not best or not r["batch"] else ("yes" if int(r["batch"]) >= best[0] else "no")
        rows.append([networks.get(cfg, cfg), r["batch"], r["upper_bound"], ratio,
                     f"{best[0]} ({best[1]})" if best else "", beats,
                     bracket_verdict(r["batch"], r["upper_bound"], r["bound_source"], "batch")
                     if r["batch"] and r["upper_bound"] else r["status"],
                     f"{r['limit_s']} ({r['threads']} thread{'s' if r['threads'] != '1' else ''})",
                     ", ".join(f"{e['batch']} ({e['revision']})" for e in earlier if e["batch"]),
                     *provenance(r)])
    return table(header, rows)


def gen_zoo_files(root, doc):
    rows = []
    for run in zoo_runs(root):
        cfg = run["config"]
        links = []
        for label, name in (("Figure 4", f"{cfg}_sweep.svg"), ("its data", f"{cfg}_sweep.csv"),
                            ("Figure 5", f"{cfg}_maxbatch.svg")):
            target = f"{ZOO}/{name}"
            if not os.path.isfile(os.path.join(root, target)):
                raise DataError(f"{target}: missing")
            links.append(f"[{label}]({rel_link(doc, target, root)})")
        rows.append([f"{run['network']} (`configs/{cfg}.yaml`)", *links])
    return table(["network", "compute overhead against budget", "CSV", "max batch"], rows)


# ---- max batch tables ------------------------------------------------------------------------

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


# ---- CPU measurements ------------------------------------------------------------------------

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


# ---- the input-size result (maxbatch --vary input / seq) -------------------------------------

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


# ---- offload (checkmate-offload against checkmate) -----------------------------------------

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
     "chen_sqrtn_offload", "greedy_offload", "checkmate", "checkmate_bound", "working_set_bound", "checkmate_overhead", "checkmate_offload", "offload_overhead", "ratio",
     "seconds"],
    ["model", "precision", "budget", "link (GB/s)", "device (TFLOP/s)", "copies", "chen-sqrtn",
     "chen-sqrtn-offload", "greedy-offload", "checkmate (<= proven bound)", "its overhead", "any schedule <=", "checkmate-offload",
     "its overhead",
     "checkmate-offload / checkmate", "run"],
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


# ---- ONNX import -----------------------------------------------------------------------------

ONNX_ZOO = "tools/bench/results/onnx/torchvision.csv"


def onnx_zoo_row(r):
    same = r["remat_params"] == r["params"] if r["remat_params"] else None
    params = thousands(r["params"]) + ("" if same is None else " (equal)" if same else
                                       f" (remat {thousands(r['remat_params'])})")
    return [r["model"], params, r["onnx_nodes"], r["remat_nodes"], r["maxbatch_keep"],
            r["maxbatch_checkmate"], r["step_s"] and r["step_s"] + " s", r["import_s"] and r["import_s"] + " s",
            r["status"]]


gen_onnx_zoo = simple(
    ONNX_ZOO,
    ["model", "params", "onnx_nodes", "status", "remat_nodes", "remat_params", "step_s",
     "maxbatch_keep", "maxbatch_checkmate", "import_s"],
    ["model", "parameters (PyTorch; remat's)", "ONNX nodes", "remat nodes", "max batch 16 GB, keep",
     "max batch 16 GB, checkmate", "train, 1 step", "import + plan", "import"], onnx_zoo_row)


gen_onnx_segmentation = simple(
    "tools/bench/results/onnx/torchvision_segmentation.csv",
    ["model", "params", "onnx_nodes", "status", "remat_nodes", "remat_params", "step_s",
     "maxbatch_keep", "maxbatch_checkmate", "import_s"],
    ["model", "parameters (PyTorch; remat's)", "ONNX nodes", "remat nodes", "max batch 16 GB, keep",
     "max batch 16 GB, checkmate", "train, 1 step at batch 2", "import + plan", "import"], onnx_zoo_row)


gen_onnx_resnet50 = simple(
    "tools/bench/results/onnx/resnet50_16gb.csv",
    ["model", "source", "nodes", "constant", "maxbatch_keep", "maxbatch_checkmate"],
    ["network", "from", "planned nodes", "constant", "max batch 16 GB, keep", "max batch 16 GB, checkmate"],
    lambda r: [r["model"], r["source"], r["nodes"], r["constant"], r["maxbatch_keep"],
               r["maxbatch_checkmate"]])


# ---- the solver ------------------------------------------------------------------------------

def gen_solver_zoo(root, doc):
    rel = "tools/bench/results/solver/zoo_fractions.csv"
    data = need(read_csv(root, rel), rel, ["config", "network", "nodes", "activation_fraction",
                                           "overhead", "gap_pct", "proven_optimal", "limit_s",
                                           *CPU_COLUMNS])
    fractions = []
    for r in data:
        if r["activation_fraction"] not in fractions:
            fractions.append(r["activation_fraction"])
    header = ["network (nodes)"] + [f"{f} %" for f in fractions] + ["limit (s)", *CPU_COLUMNS]
    rows = []
    for key, grp in group(data, lambda r: (r["network"], r["nodes"], r["limit_s"],
                                           provenance(r))).items():
        by = {r["activation_fraction"]: r for r in grp}
        cells = []
        for f in fractions:
            r = by.get(f)
            if not r:
                cells.append("")
            elif r["overhead"] == "infeasible":
                cells.append("-")
            else:
                mark = " ✓" if r["proven_optimal"] == "yes" else ""
                cells.append(f"{r['overhead']}x ({r['gap_pct']} %){mark}")
        rows.append([f"{key[0]} ({int(key[1]):,})", *cells, key[2], *key[3]])
    return table(header, rows)


def gen_solver_scale(root, doc):
    rel = "tools/bench/results/solver/scale_bench.csv"
    data = need(read_csv(root, rel), rel, ["row", "activation_fraction", "overhead", "gap_pct",
                                           "seconds", "limit_s", "proven_optimal", *CPU_COLUMNS])

    def cells(r):
        frac = r["activation_fraction"]
        return [r["row"], frac + " %" if frac.isdigit() else frac, r["limit_s"],
                r["overhead"] + "x" if r["overhead"] else "",
                r["gap_pct"] + " %" if r["gap_pct"] else "", r["seconds"],
                "yes" if r["proven_optimal"] == "yes" else ""]
    return table(["row", "budget (of the activations)", "limit (s)", "checkmate overhead", "gap",
                  "seconds", "proven optimal", *CPU_COLUMNS],
                 [cells(r) + list(provenance(r)) for r in data])


def gen_solver_maxbatch(root, doc):
    rel = "tools/bench/results/solver/scale_maxbatch.csv"
    data = need(read_csv(root, rel), rel, ["row", "budget", "limit_s", "checkmate", "upper_bound",
                                           "bound_source", "best_baseline", *CPU_COLUMNS])

    def cells(r):
        cm, ub = int(r["checkmate"]), int(r["upper_bound"])
        return [r["row"], r["budget"], r["limit_s"], r["checkmate"], r["upper_bound"],
                f"{100 * (ub - cm) / ub:.0f} %", r["bound_source"], r["best_baseline"]]
    return table(["row", "budget", "limit (s)", "checkmate", "upper bound",
                  "bracket (of the bound)", "bound from", "best baseline", *CPU_COLUMNS],
                 [cells(r) + list(provenance(r)) for r in data])


# ---- the GPU -------------------------------------------------------------------------------

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
                 "samples_per_s", "predicted_peak", "measured_peak", "recomputes", *GPU_COLUMNS])
    return table(["config", "precision", "batch", "budget", "environment", "steps", "samples/s",
                  "predicted peak", "measured peak", "recomputes", *GPU_COLUMNS],
                 [[r["config"], r["precision"], r["batch"], r["budget"] or "keep everything",
                   r["environment"], r["steps"], thousands(r["samples_per_s"]),
                   r["predicted_peak"], r["measured_peak"], r["recomputes"],
                   *(r[c] for c in GPU_COLUMNS)] for r in data])


# ---- the README's headline results ------------------------------------------------------------

def newest(rows):
    """The newest of rows: the latest date, and among equal dates the last in the file."""
    dated = [(r["date"], i) for i, r in enumerate(rows) if r["date"][:1].isdigit()]
    if not dated:
        return rows[-1]
    return rows[max(dated)[1]]


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
        at_ws = [r for r in br if r not in closed and r["bound_source"].startswith("the working set")]
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
    budget = re.sub(r"(\d)([KMGT]i?B)$", r"\1 \2", budgeted["budget"])
    rows.append([
        f"memory on the GPU: GPT-2 124M, bf16, batch {budgeted['batch']}, under {budget}",
        f"predicted peak {budgeted['predicted_peak']}, measured {budgeted['measured_peak']}; "
        f"{budgeted['samples_per_s']} samples/s against {keep['samples_per_s']} keeping "
        f"everything ({keep['predicted_peak']})",
        budgeted["device"], budgeted["revision"], budgeted["date"],
        link("docs/benchmarks.md", "benchmarks") + ", " + link(GPU_TRAIN, "data")])

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


# ---- the index of the code's Notes -------------------------------------------------------

NOTE_DIRS = ["runtime", "ops", "kernels", "solver", "models", "tools", "tests", "cmake"]
NOTE_FILES = ["CMakeLists.txt"]
NOTE_EXT = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh", ".cmake", ".txt")
NOTE_ALONE = re.compile(r"^\s*(?://|#) Note \[([^\]]+)\]\s*$")
NOTE_INLINE = re.compile(r"^\s*(?://|#) Note \[([^\]]+)\]:")
NOTE_ANY = re.compile(r"Note \[([^\]]+)\]")


def source_files(root):
    for name in NOTE_FILES:
        if os.path.isfile(os.path.join(root, name)):
            yield name
    for d in NOTE_DIRS:
        for base, dirs, files in os.walk(os.path.join(root, d)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__" and not x.startswith("."))
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(base, f), root)
                if f.endswith(NOTE_EXT) and rel != "tools/bench/make_tables.py":
                    yield rel


def note_index(root):
    alone, inline, cited = {}, {}, {}
    for rel in source_files(root):
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            for pattern, into in ((NOTE_ALONE, alone), (NOTE_INLINE, inline)):
                m = pattern.match(line)
                if m:
                    into.setdefault(m.group(1), []).append(rel)
            for name in NOTE_ANY.findall(line):
                cited.setdefault(name, []).append(rel)
    out = {}
    for name in cited:
        if name in alone:
            out[name] = (sorted(set(alone[name])), True)
        elif name in inline:  # cited as "Note [x]: ..." too: the header outside tests/ first
            out[name] = ([min(inline[name], key=lambda f: (f.startswith("tests/"),
                                                            not f.endswith(".h"), f))], True)
        else:
            out[name] = (sorted(set(cited[name])), False)
    return out


def gen_notes(root, doc):
    rows = []
    for name, (files, defined) in sorted(note_index(root).items(), key=lambda x: x[0].lower()):
        where = ", ".join(f"[{f}]({rel_link(doc, f, root)})" for f in files)
        rows.append([f"Note [{name}]", where if defined else f"cited in {where}; no note text"])
    return table(["note", "defined in"], rows)


TABLES = {
    "headline": gen_headline,
    "zoo-fig4": gen_zoo_fig4,
    "zoo-fig5": gen_zoo_fig5,
    "zoo-fig5-brackets": gen_zoo_fig5_brackets,
    "zoo-files": gen_zoo_files,
    "maxbatch-precision": gen_maxbatch_precision,
    "maxbatch-sharded": gen_maxbatch_sharded,
    "accumulate-cpu": gen_accumulate,
    "loader-cpu": gen_loader,
    "arena": gen_arena,
    "bf16-accuracy": gen_bf16_accuracy,
    "solver-zoo": gen_solver_zoo,
    "solver-scale": gen_solver_scale,
    "solver-maxbatch": gen_solver_maxbatch,
    "gpu-bench": gen_gpu_bench,
    "gpu-train": gen_gpu_train,
    "notes": gen_notes,
    "onnx-torchvision": gen_onnx_zoo,
    "onnx-segmentation": gen_onnx_segmentation,
    "onnx-resnet50": gen_onnx_resnet50,
    "maxinput-16gb": gen_maxinput,
    "offload-maxbatch": gen_offload_maxbatch,
    "offload-sweep": gen_offload_sweep,
    "fuzz": gen_fuzz,
}

# ---- the Markdown files --------------------------------------------------------------------

MARKER = re.compile(r"^<!-- tables:([a-z0-9-]+) (begin|end) -->$")


def markdown_files(root):
    out = ["README.md"] if os.path.isfile(os.path.join(root, "README.md")) else []
    for base, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        out += [os.path.relpath(os.path.join(base, f), root) for f in sorted(files)
                if f.endswith(".md")]
    return out


def regenerate(root, doc, text):
    """`text` with every generated block rewritten; raises DataError for bad markers or data."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        name, kind = m.groups()
        if kind == "end":
            raise DataError(f"{doc}:{i + 1}: 'tables:{name} end' without its begin")
        if name not in TABLES:
            raise DataError(f"{doc}:{i + 1}: unknown table '{name}' (known: "
                            f"{', '.join(sorted(TABLES))})")
        j = i + 1
        while j < len(lines) and not MARKER.match(lines[j]):
            j += 1
        if j == len(lines) or MARKER.match(lines[j]).groups() != (name, "end"):
            raise DataError(f"{doc}:{i + 1}: 'tables:{name} begin' without its end")
        out += [lines[i], TABLES[name](root, doc), lines[j]]
        i = j + 1
    return "\n".join(out)


# ---- relative links ------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text):
    found, seen = set(), {}
    fence = False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        m = re.match(r"^#{1,6} (.*)$", line)
        if m:
            base = slug(re.sub(r"`([^`]*)`", r"\1", m.group(1)))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def prose(text):
    """The text without fenced blocks, indented code blocks and code spans."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    "):
            continue
        out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def broken_links(root, doc, text, read):
    bad = []
    for target in LINK.findall(prose(text)):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(os.path.join(root, doc)), path)) \
            if path else os.path.join(root, doc)
        if not os.path.exists(full):
            bad.append(f"{doc}: link '{target}': no file {os.path.relpath(full, root)}")
            continue
        if anchor and full.endswith(".md") and anchor not in anchors(read(full)):
            bad.append(f"{doc}: link '{target}': no heading '#{anchor}' in "
                       f"{os.path.relpath(full, root)}")
    return bad


def check(root, texts):
    """Problems of the Markdown files `texts` ({doc: text}): differences and broken links."""
    problems = []

    def read(full):
        rel = os.path.relpath(full, root)
        if rel in texts:
            return texts[rel]
        with open(full, encoding="utf-8") as f:
            return f.read()
    for doc, text in texts.items():
        try:
            want = regenerate(root, doc, text)
        except DataError as e:
            problems.append(str(e))
            continue
        if want != text:
            diff = list(difflib.unified_diff(text.split("\n"), want.split("\n"), doc,
                                             doc + " (generated)", n=0, lineterm=""))
            problems.append(f"{doc}: generated tables differ from tools/bench/results "
                            f"(run tools/bench/make_tables.py):\n" + "\n".join(diff[:12]))
        problems += broken_links(root, doc, text, read)
    return problems


def read_all(root):
    texts = {}
    for doc in markdown_files(root):
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            texts[doc] = f.read()
    return texts


def self_test(root):
    texts = read_all(root)
    failures = []
    if check(root, texts):
        failures.append("the files as they are do not pass --check")
    blocks = [(doc, m) for doc, t in texts.items()
              for m in re.finditer(r"<!-- tables:[a-z0-9-]+ begin -->\n(.*?)\n<!--", t, re.S)]
    if not blocks:
        failures.append("no generated block to edit")
    else:
        doc, m = blocks[0]
        body = m.group(1)
        digit = re.search(r"\d", body)
        edited = body[:digit.start()] + str((int(digit.group()) + 1) % 10) + body[digit.end():]
        t = texts[doc]
        if not check(root, {**texts, doc: t[:m.start(1)] + edited + t[m.end(1):]}):
            failures.append(f"an edited number in {doc} passes --check")
        if not check(root, {**texts, doc: t + "\n[x](no-such-file.md)\n"}):
            failures.append("a link to a missing file passes --check")
        if not check(root, {**texts, doc: t + "\n[x](#no-such-heading)\n"}):
            failures.append("a link to a missing heading passes --check")
        end = t.index("end -->", m.end(1))
        if not check(root, {**texts, doc: t[:end] + "end ->" + t[end + len("end -->"):]}):
            failures.append("a lost end marker passes --check")
    for f in failures:
        print(f"make_tables: self-test: {f}", file=sys.stderr)
    return 1 if failures else 0


def main(argv):
    p = argparse.ArgumentParser(prog="make_tables.py", description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true")
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.realpath(__file__)))))
    args = p.parse_args(argv)
    root = os.path.abspath(args.root)
    if args.self_test:
        return self_test(root)
    texts = read_all(root)
    if args.check:
        problems = check(root, texts)
        for pr in problems:
            print(f"make_tables: {pr}", file=sys.stderr)
        if not problems:
            print(f"make_tables: {len(texts)} Markdown files match the result files")
        return 1 if problems else 0
    changed = 0
    for doc, text in texts.items():
        try:
            want = regenerate(root, doc, text)
        except DataError as e:
            print(f"make_tables: {e}", file=sys.stderr)
            return 1
        if want != text:
            with open(os.path.join(root, doc), "w", encoding="utf-8") as f:
                f.write(want)
            changed += 1
            print(f"make_tables: wrote {doc}")
    for pr in (b for doc, t in read_all(root).items() for b in broken_links(
            root, doc, t, lambda full: open(full, encoding="utf-8").read())):
        print(f"make_tables: {pr}", file=sys.stderr)
    if not changed:
        print("make_tables: every generated table is up to date")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DataError as e:
        print(f"make_tables: {e}", file=sys.stderr)
        sys.exit(1)
