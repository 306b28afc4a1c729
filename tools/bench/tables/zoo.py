"""The zoo: the paper's Figure 4 (overhead against budget) and Figure 5 (max batch), their
re-runs, brackets and files."""
import html
import os
import re

from .common import (CPU_COLUMNS, DataError, STRATEGIES, batch_cell, gb, group, need, newest,
                     provenance, read_csv, rel_link, table)

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
        beats = ("" if not best or not r["batch"]
                 else "yes" if int(r["batch"]) >= best[0] else "no")
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
