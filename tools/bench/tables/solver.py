"""The solver's results: the zoo's fractions, scaling, and max batch."""
from .common import CPU_COLUMNS, group, need, provenance, read_csv, table

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
