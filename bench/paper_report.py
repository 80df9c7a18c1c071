#!/usr/bin/env python3
"""The report of the paper's experiments from paper_bench's CSV.

    paper_report.py --csv paper.csv --out DIR [--quick] [--sim-check sim_check.csv]

Writes into DIR report.md (findings against the paper, tables, every plan; bench/results holds the
committed one) and *.png (figures in the shape of the paper's). Every time except planning and
synthesis is simulated; the report says so. paper_check.py checks its invariants.
"""

import argparse
import collections
import csv
import datetime
import math
import os
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BASELINES = ["data-parallel", "megatron", "ulysses", "row-sharded"]
# The paper's numbers (docs/workloads.md), quoted beside ours.
PAPER = {
    "128k": "Einsummable 143 ms, PyTorch 506 ms, vLLM 498 ms (measured, DGX A100, 8 GPUs)",
    "1k": "JAX 0.83, Einsummable 1.21, PyTorch 1.72, vLLM 2.19 ms (measured, DGX A100)",
    "chains": "the three systems within about 6% on every chain at 8 GPUs; about 6x from 1 to 8",
    "random": "random plans median 34% worse (geomean), best of 20 within 3%; greedy 7% worse "
    "on chains, 2.3% on the transformer block",
    "v100": "optimized exchange 1.41x and 1.32x faster than naive on chains A and B (V100); "
    "indistinguishable on A100 (geomean 1.006)",
    "pearson": "cost-vs-runtime Pearson 0.47-0.92, eight of ten setups above 0.72",
}


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["plan"] == "time":  # CSVs from before the time programme: the search's row
            row["plan"] = "search"
        row.setdefault("origin", row["plan"])
        row.setdefault("distributed_s", row["predicted_s"])
        row.setdefault("compute_bound_s", "0")  # CSVs from before the bounds
        row.setdefault("delivery_bound_s", "0")
        row["devices"] = int(row["devices"])
        row["seed"] = int(row["seed"])
        for key in ("cost_bytes", "cost_elements", "predicted_s", "exchange_sum_s", "compute_s",
                    "communication_s", "idle_s", "planning_s", "synthesis_s", "distributed_s",
                    "compute_bound_s", "delivery_bound_s"):
            row[key] = float(row[key])
        row["nodes"] = int(row["nodes"])
    return rows


def geomean(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def pearson(xs, ys):
    if len(xs) < 3:
        return float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        return float("nan")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)


def ms(seconds):
    return f"{seconds * 1e3:.4f}"


def short(workload):
    return (workload.replace("llama-block:", "llama ").replace("tokens=", "")
            .replace("seqs=", ""))


class Data:
    def __init__(self, rows):
        self.rows = rows
        self.by_setup = collections.defaultdict(list)  # (w, m, p) -> rows
        for row in rows:
            self.by_setup[(row["workload"], row["machine"], row["devices"])].append(row)
        self.workloads = list(dict.fromkeys(r["workload"] for r in rows))
        self.machines = list(dict.fromkeys(r["machine"] for r in rows))
        self.devices = sorted({r["devices"] for r in rows})
        self.pmax = max(self.devices)

    def plan(self, w, m, p, plan, schedule="optimized", seed=0):
        for row in self.by_setup.get((w, m, p), []):
            if (row["plan"] == plan and row["schedule"] == schedule
                    and (plan != "random" or row["seed"] == seed)):
                return row
        return None

    def randoms(self, w, m, p, schedule="optimized"):
        return [r for r in self.by_setup.get((w, m, p), [])
                if r["plan"] == "random" and r["schedule"] == schedule]


def figure_time_per_workload(data, machine, out):
    p = data.pmax
    systems = ["dp"] + BASELINES + ["time-dp", "search"]
    n = len(data.workloads)
    cols = 5
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for idx, w in enumerate(data.workloads):
        ax = axes[idx // cols][idx % cols]
        values = [data.plan(w, machine, p, s) for s in systems]
        heights = [v["predicted_s"] * 1e3 if v else 0 for v in values]
        ax.bar(range(len(systems)), heights,
               color=["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
                      "#ff7f0e"])
        ax.set_xticks(range(len(systems)))
        ax.set_xticklabels(["DP", "data/seq", "Megatron", "Ulysses", "row", "time DP", "search"],
                           rotation=45, fontsize=7)
        ax.set_title(short(w), fontsize=9)
        ax.set_ylabel("ms (simulated)", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    for idx in range(n, rows * cols):
        axes[idx // cols][idx % cols].axis("off")
    fig.suptitle(f"Time per workload and plan, {p} devices of {machine} "
                 "(optimized exchanges; simulated)", fontsize=11)
    fig.tight_layout()
    path = os.path.join(out, f"time_per_workload_{machine}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.basename(path)


def figure_dp_greedy_random(data, machine, out):
    p = data.pmax
    labels, greedy, median, best = [], [], [], []
    for w in data.workloads:
        dp = data.plan(w, machine, p, "dp")
        g = data.plan(w, machine, p, "greedy")
        rs = data.randoms(w, machine, p)
        if not dp or not g or not rs:
            continue
        labels.append(short(w))
        greedy.append(g["predicted_s"] / dp["predicted_s"])
        times = [r["predicted_s"] / dp["predicted_s"] for r in rs]
        median.append(statistics.median(times))
        best.append(min(times))
    fig, ax = plt.subplots(figsize=(11, 3.8))
    x = range(len(labels))
    width = 0.27
    ax.bar([i - width for i in x], greedy, width, label="greedy", color="#1f77b4")
    ax.bar(list(x), median, width, label="random (median)", color="#ff7f0e")
    ax.bar([i + width for i in x], best, width, label="random (best)", color="#2ca02c")
    ax.axhline(1.0, color="#d62728", linewidth=1, label="DP")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, rotation=30, fontsize=8)
    ax.set_ylabel("simulated time / DP's")
    ax.set_title(f"DP vs greedy vs random, {p} devices of {machine} (optimized exchanges; "
                 "simulated)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, f"dp_greedy_random_{machine}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.basename(path)


def figure_naive_vs_optimized(data, out):
    p = data.pmax
    fig, ax = plt.subplots(figsize=(11, 3.8))
    width = 0.8 / max(1, len(data.machines))
    labels = [short(w) for w in data.workloads]
    for k, machine in enumerate(data.machines):
        speedups = []
        for w in data.workloads:
            naive = data.plan(w, machine, p, "dp", "naive")
            opt = data.plan(w, machine, p, "dp", "optimized")
            speedups.append(naive["predicted_s"] / opt["predicted_s"] if naive and opt else 0)
        ax.bar([i + (k - (len(data.machines) - 1) / 2) * width for i in range(len(labels))],
               speedups, width, label=machine)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, fontsize=8)
    ax.set_ylabel("naive / optimized time")
    ax.set_title(f"Optimized vs naive exchange programs, DP plans, {p} devices (simulated)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "naive_vs_optimized.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.basename(path)


def figure_scaling(data, out):
    if len(data.devices) < 2:
        return None
    fig, axes = plt.subplots(1, len(data.machines), figsize=(5 * len(data.machines), 3.8),
                             squeeze=False)
    for k, machine in enumerate(data.machines):
        ax = axes[0][k]
        for w in data.workloads:
            base = data.plan(w, machine, data.devices[0], "dp")
            if not base:
                continue
            speedups = [base["predicted_s"] / data.plan(w, machine, p, "dp")["predicted_s"]
                        for p in data.devices]
            ax.plot(data.devices, speedups, marker="o", label=short(w))
        ax.plot(data.devices, [p / data.devices[0] for p in data.devices], "k--", linewidth=0.8,
                label="linear")
        ax.set_xlabel("devices")
        ax.set_ylabel("speedup of the DP plan")
        ax.set_title(machine)
        ax.set_xticks(data.devices)
    axes[0][-1].legend(fontsize=6, loc="upper left")
    fig.suptitle("Scaling of the DP's plans (optimized exchanges; simulated)")
    fig.tight_layout()
    path = os.path.join(out, "scaling.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.basename(path)


def findings(data):
    """The issue's checks, computed, each beside the paper's number."""
    p = data.pmax
    lines = []
    long_seq = "llama-block:tokens=131072"
    for machine in data.machines:
        dp = data.plan(long_seq, machine, p, "dp")
        sp = data.plan(long_seq, machine, p, "data-parallel")
        uly = data.plan(long_seq, machine, p, "ulysses")
        if dp and sp and uly:
            lines.append(
                f"- **128K single sequence, {machine}, {p} devices:** the DP's plan is "
                f"*{dp['strategy']}*, {ms(dp['predicted_s'])} ms; the Ulysses baseline "
                f"{ms(uly['predicted_s'])} ms; the sequence-parallel baseline (data-parallel) "
                f"{ms(sp['predicted_s'])} ms, {sp['predicted_s'] / dp['predicted_s']:.2f}x the "
                f"DP's (outputs left distributed: DP {ms(dp['distributed_s'])} ms, "
                f"sequence-parallel {ms(sp['distributed_s'])} ms). Paper: {PAPER['128k']}.")
    for machine in data.machines:
        ratios = []
        for w in data.workloads:
            if not w.startswith("chain:"):
                continue
            dp = data.plan(w, machine, p, "dp")
            row = data.plan(w, machine, p, "row-sharded")
            if dp and row:
                ratios.append((w, dp["predicted_s"] / row["predicted_s"]))
        if ratios:
            text = ", ".join(f"{w[6:]} {r:.3f}" for w, r in ratios)
            lines.append(f"- **Chains, {machine}, {p} devices, DP time / row-sharded time:** "
                         f"{text} (geomean {geomean([r for _, r in ratios]):.3f}). Paper: "
                         f"{PAPER['chains']}.")
    if len(data.devices) > 1:
        for machine in data.machines:
            gathered, spread = [], []
            for w in data.workloads:
                if not w.startswith("chain:"):
                    continue
                one = data.plan(w, machine, data.devices[0], "dp")
                top = data.plan(w, machine, p, "dp")
                if one and top:
                    gathered.append(one["predicted_s"] / top["predicted_s"])
                    spread.append(one["distributed_s"] / top["distributed_s"])
            if gathered:
                lines.append(
                    f"- **Chains' scaling, DP, {machine}, {data.devices[0]} to {p} devices "
                    f"(geomean):** {geomean(gathered):.2f}x with the output offloaded to the host, "
                    f"{geomean(spread):.2f}x with it left distributed. Paper: about 6x.")
    for machine in data.machines:
        parts = []
        speedups = []
        for w in data.workloads:
            naive = data.plan(w, machine, p, "dp", "naive")
            opt = data.plan(w, machine, p, "dp", "optimized")
            if naive and opt and w.startswith("chain:"):
                speedups.append(naive["predicted_s"] / opt["predicted_s"])
                parts.append(f"{w[6:]} {speedups[-1]:.2f}x")
        if parts:
            lines.append(f"- **Optimized vs naive exchange, DP plans, {machine}:** chains "
                         f"{', '.join(parts)} (geomean {geomean(speedups):.3f}). Paper: "
                         f"{PAPER['v100']}.")
    for machine in data.machines:
        med, best, greedy = {"llama": [], "chain": []}, {"llama": [], "chain": []}, {
            "llama": [], "chain": []}
        for w in data.workloads:
            kind = "chain" if w.startswith("chain:") else "llama"
            dp = data.plan(w, machine, p, "dp")
            g = data.plan(w, machine, p, "greedy")
            rs = data.randoms(w, machine, p)
            if dp and rs:
                times = [r["predicted_s"] / dp["predicted_s"] for r in rs]
                med[kind].append(statistics.median(times))
                best[kind].append(min(times))
            if dp and g:
                greedy[kind].append(g["predicted_s"] / dp["predicted_s"])
        for kind, name in (("llama", "transformer block"), ("chain", "chains")):
            if med[kind]:
                lines.append(
                    f"- **Random and greedy, {name}, {machine}, {p} devices (time / DP's, "
                    f"geomean over workloads):** random median {geomean(med[kind]):.3f}, random "
                    f"best {geomean(best[kind]):.3f}, greedy {geomean(greedy[kind]):.3f}. "
                    f"Paper: {PAPER['random']}.")
    return lines


def setup_table(data, w, m, p):
    """Every plan of one setup; the rows paper_check.py compares with the CSV."""
    rows = sorted(data.by_setup[(w, m, p)],
                  key=lambda r: (r["schedule"], plan_order(r["plan"]), r["seed"]))
    out = ["| plan | seed | schedule | strategy | cost (bytes) | simulated (ms) | vs DP | "
           "compute (ms) | comm. only (ms) | idle (ms) | planning (ms) | synthesis (ms) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        dp = data.plan(w, m, p, "dp", r["schedule"])
        ratio = r["predicted_s"] / dp["predicted_s"] if dp else float("nan")
        out.append(
            f"| {r['plan']} | {r['seed']} | {r['schedule']} | {r['strategy']} | "
            f"{r['cost_bytes']:.0f} | {ms(r['predicted_s'])} | {ratio:.3f} | "
            f"{ms(r['compute_s'])} | {ms(r['communication_s'])} | {ms(r['idle_s'])} | "
            f"{r['planning_s'] * 1e3:.2f} | {r['synthesis_s'] * 1e3:.2f} |")
    return out


def plan_order(plan):
    order = ["dp", "greedy", "random"] + BASELINES + ["time-dp", "search"]
    return order.index(plan) if plan in order else len(order)


def summary_table(data, machine):
    p = data.pmax
    head = ("| workload | DP | greedy | random median | random best | "
            + " | ".join(BASELINES) + " | DP's strategy |")
    out = [head, "|" + "---|" * (6 + len(BASELINES))]
    for w in data.workloads:
        dp = data.plan(w, machine, p, "dp")
        if not dp:
            continue

        def cell(row):
            if not row:
                return "-"
            return f"{ms(row['predicted_s'])} ({row['predicted_s'] / dp['predicted_s']:.2f}x)"
        rs = sorted(data.randoms(w, machine, p), key=lambda r: r["predicted_s"])
        median_row = rs[(len(rs) - 1) // 2] if rs else None
        cells = [ms(dp["predicted_s"]), cell(data.plan(w, machine, p, "greedy")),
                 cell(median_row), cell(rs[0] if rs else None)]
        cells += [cell(data.plan(w, machine, p, b)) for b in BASELINES]
        out.append(f"| {w} | " + " | ".join(cells) + f" | {dp['strategy']} |")
    return out


def scaling_table(data):
    out = ["| workload | machine | " + " | ".join(f"p = {p} (ms)" for p in data.devices)
           + " | speedup | speedup, outputs left distributed |",
           "|---|---|" + "---|" * (len(data.devices) + 2)]
    for w in data.workloads:
        for m in data.machines:
            times = [data.plan(w, m, p, "dp") for p in data.devices]
            if not all(times):
                continue
            speedup = times[0]["predicted_s"] / times[-1]["predicted_s"]
            spread = times[0]["distributed_s"] / times[-1]["distributed_s"]
            out.append(f"| {w} | {m} | " + " | ".join(ms(t["predicted_s"]) for t in times)
                       + f" | {speedup:.2f}x | {spread:.2f}x |")
    return out


def pearson_table(data):
    """Per setup: Pearson(cost in elements, simulated time) over the cost model's own plans (DP,
    greedy, random: all on p devices, as the paper's table) and over every plan."""
    p = data.pmax
    out = ["| workload | " + " | ".join(data.machines) + " |",
           "|---|" + "---|" * len(data.machines)]
    own_values = []
    for w in data.workloads:
        cells = []
        for m in data.machines:
            rows = [r for r in data.by_setup[(w, m, p)] if r["schedule"] == "optimized"]
            own = [r for r in rows if r["plan"] in ("dp", "greedy", "random")]
            r_own = pearson([x["cost_elements"] for x in own], [x["predicted_s"] for x in own])
            r_all = pearson([x["cost_elements"] for x in rows], [x["predicted_s"] for x in rows])
            own_values.append(r_own)
            cells.append(" / ".join("-" if math.isnan(r) else f"{r:.2f}" for r in (r_own, r_all)))
        out.append(f"| {w} | " + " | ".join(cells) + " |")
    return out, [v for v in own_values if not math.isnan(v)]


def timing_table(data):
    out = ["| workload | DP planning (ms, median) | optimized synthesis per plan (ms, median) | "
           "naive synthesis (ms, median) |", "|---|---|---|---|"]
    for w in data.workloads:
        dp = [r["planning_s"] for r in data.rows if r["workload"] == w and r["plan"] == "dp"
              and r["devices"] == data.pmax]
        opt = [r["synthesis_s"] for r in data.rows if r["workload"] == w
               and r["schedule"] == "optimized" and r["devices"] == data.pmax]
        naive = [r["synthesis_s"] for r in data.rows if r["workload"] == w
                 and r["schedule"] == "naive" and r["devices"] == data.pmax]
        out.append(f"| {w} | {statistics.median(dp) * 1e3:.2f} | "
                   f"{statistics.median(opt) * 1e3:.1f} | {statistics.median(naive) * 1e3:.1f} |")
    return out


def time_objective_table(data):
    """The time objectives against the DP (the bytes programme): the time programme's plan
    (objective time) and the search's (objective search), with their speedups over the DP."""
    p = data.pmax
    out = ["| workload | machine | DP (ms) | time DP (ms) | speedup | search (ms) | speedup | "
           "search found from | DP planning (ms) | time DP planning (ms) | search (s) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    speedups = {"time-dp": [], "search": []}
    for w in data.workloads:
        for m in data.machines:
            dp = data.plan(w, m, p, "dp")
            t = data.plan(w, m, p, "time-dp")
            sr = data.plan(w, m, p, "search")
            if not dp or not (t or sr):
                continue
            cells = [w, m, ms(dp["predicted_s"])]
            for name, row in (("time-dp", t), ("search", sr)):
                if row:
                    speedups[name].append(dp["predicted_s"] / row["predicted_s"])
                    cells += [ms(row["predicted_s"]), f"{speedups[name][-1]:.3f}x"]
                else:
                    cells += ["-", "-"]
            cells += [sr["origin"] if sr else "-", f"{dp['planning_s'] * 1e3:.2f}",
                      f"{t['planning_s'] * 1e3:.2f}" if t else "-",
                      f"{sr['planning_s']:.2f}" if sr else "-"]
            out.append("| " + " | ".join(cells) + " |")
    return out, speedups


def default_vs_baselines(data):
    """The default objective's plan (the time programme's) against the best hand-written
    baseline per setup, at every device count above one, with the search's and the bytes DP's
    times beside it."""
    out = []
    for p in sorted(d for d in data.devices if d > 1):
        out += [f"### {p} devices", "",
                "| workload | machine | default (ms) | best baseline | its time (ms) | "
                "default / best | search (ms) | default / search | bytes DP (ms) | "
                "default / bytes DP | bound (ms) | bound / best |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        ratios, losses, behind_search, headroom, at_bounds = [], [], [], [], []
        for w in data.workloads:
            for m in data.machines:
                t = data.plan(w, m, p, "time-dp")
                baselines = [(b, data.plan(w, m, p, b)) for b in BASELINES]
                baselines = [(b, r) for b, r in baselines if r]
                if not t or not baselines:
                    continue
                best_name, best = min(baselines, key=lambda item: item[1]["predicted_s"])
                ratio = t["predicted_s"] / best["predicted_s"]
                ratios.append(ratio)
                if ratio > 1.01:
                    losses.append(f"{w} on {m}")
                sr = data.plan(w, m, p, "search")
                dp = data.plan(w, m, p, "dp")
                search_ratio = t["predicted_s"] / sr["predicted_s"] if sr else None
                bound = max(t["compute_bound_s"], t["delivery_bound_s"])
                if bound > 0:
                    headroom.append(bound / best["predicted_s"])
                    serial = t["compute_bound_s"] + t["delivery_bound_s"]
                    if best["predicted_s"] <= serial * 1.001:
                        at_bounds.append(f"{w} on {m}")
                if search_ratio and search_ratio > 1.03:
                    behind_search.append(f"{w} on {m}")
                out.append("| " + " | ".join([
                    w, m, ms(t["predicted_s"]), best_name, ms(best["predicted_s"]),
                    f"{ratio:.3f}", ms(sr["predicted_s"]) if sr else "-",
                    f"{search_ratio:.3f}" if search_ratio else "-",
                    ms(dp["predicted_s"]) if dp else "-",
                    f"{t['predicted_s'] / dp['predicted_s']:.3f}" if dp else "-",
                    ms(bound) if bound > 0 else "-",
                    f"{bound / best['predicted_s']:.3f}" if bound > 0 else "-"]) + " |")
        if ratios:
            out += ["", f"At {p} devices the default is slower than the best baseline by more "
                    f"than 1 % on {len(losses)} of {len(ratios)} setups"
                    + (f" ({'; '.join(losses)})" if losses else "")
                    + f"; geomean default / best baseline {geomean(ratios):.3f}; more than 3 % "
                    f"behind the search on {len(behind_search)}"
                    + (f" ({'; '.join(behind_search)})" if behind_search else "") + "."]
            if headroom:
                out += ["", f"No plan can beat the bound (the larger of the compute and delivery "
                        f"bounds): geomean bound / best baseline {geomean(headroom):.3f}. On "
                        f"{len(at_bounds)} of {len(ratios)} setups the best baseline takes no "
                        "longer than the two bounds one after the other (within 0.1 %): it "
                        "computes at the compute bound and then delivers its outputs; a plan "
                        "can only gain there by delivering outputs while it still computes"
                        + (f" ({'; '.join(at_bounds)})" if at_bounds else "") + "."]
            out += [""]
    return out


def sim_check_section(path):
    if not path or not os.path.exists(path):
        return ["No simulator-vs-measured run was given to this report (`--sim-check`); see "
                "docs/simulation.md, \"Is the simulator true?\", for the CPU backend check."]
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    by = collections.defaultdict(list)
    for r in rows:
        by[r["workload"]].append((float(r["predicted_s"]), float(r["measured_s"])))
    out = ["**Measured** on the CPU backend of this machine (predicted by the same simulator "
           "with the calibrated `cpu` description):", "",
           "| workload | plans | Pearson (predicted, measured) | median predicted / measured |",
           "|---|---|---|---|"]
    for w, pairs in by.items():
        out.append(f"| {w} | {len(pairs)} | {pearson([a for a, _ in pairs], [b for _, b in pairs]):.3f} | "
                   f"{statistics.median(a / b for a, b in pairs):.3f} |")
    every = [pair for pairs in by.values() for pair in pairs]
    out.append(f"| **every plan** | {len(every)} | "
               f"{pearson([a for a, _ in every], [b for _, b in every]):.3f} | "
               f"{statistics.median(a / b for a, b in every):.3f} |")
    out += ["", "The goal was a Pearson of at least 0.9 per setup; it is met over every plan "
            "together, and within one workload only by chain:C. docs/simulation.md, \"Is the "
            "simulator true?\", gives the reasons (software f16 conversion on the CPU, one "
            "efficiency for every kernel, copies on the destination's core, plans closer together "
            "than the machine's noise)."]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sim-check", default="")
    parser.add_argument("--elapsed", default="", help="wall time of the run, for the header")
    args = parser.parse_args()
    data = Data(read_rows(args.csv))
    os.makedirs(args.out, exist_ok=True)
    figures = []
    for machine in data.machines:
        figures.append(figure_time_per_workload(data, machine, args.out))
        figures.append(figure_dp_greedy_random(data, machine, args.out))
    figures.append(figure_naive_vs_optimized(data, args.out))
    scaling = figure_scaling(data, args.out)
    if scaling:
        figures.append(scaling)

    p = data.pmax
    md = ["# The paper's experiments on the whole-plan simulator", "",
          f"Written by `bench/paper{' --quick' if args.quick else ''}` on "
          f"{datetime.date.today().isoformat()}"
          + (f" in {args.elapsed}" if args.elapsed else "")
          + f": {len(data.rows)} plans × schedules, {len(data.workloads)} workloads, machines "
          f"{', '.join(data.machines)}, devices {', '.join(map(str, data.devices))}. "
          "The CSV beside this file (`paper.csv`) holds every number.", "",
          "**Every time in this report is simulated** by the whole-plan simulator "
          "(docs/simulation.md) on the built-in topologies (docs/topologies.md, datasheet peaks "
          "and assumed efficiencies), not measured on GPUs — except the planning and synthesis "
          "times, which are measured wall times of this run on the machine that ran it, and the "
          "simulator-vs-measured section at the end. Costs are the paper's cost model in bytes "
          "(docs/planner.md). Ratios are to the DP's plan with the same exchange programs.", "",
          "## Findings against the paper", ""]
    md += findings(data)
    md += ["", "## Time per workload and plan", ""]
    for machine in data.machines:
        md += [f"### {machine}, {p} devices (optimized exchanges; ms, ratio to DP)", ""]
        md += summary_table(data, machine)
        md += ["", f"![time per workload, {machine}](time_per_workload_{machine}.png)", "",
               f"![DP vs greedy vs random, {machine}](dp_greedy_random_{machine}.png)", ""]
    md += ["## Naive vs optimized exchange programs", "",
           "![naive vs optimized](naive_vs_optimized.png)", ""]
    md += ["## Scaling of the DP's plans (optimized exchanges)", "",
           "Every plan ends by offloading each saved output to the host, every device its own "
           "blocks over its host link (what the runtime fetches); the last column leaves the "
           "outputs where they were computed "
           "(`PlanSimulationOptions::offload_saved_outputs = false`), which is what the paper's "
           "measurements are taken to include.", ""]
    md += scaling_table(data)
    if scaling:
        md += ["", "![scaling](scaling.png)"]
    table, values = pearson_table(data)
    md += ["", f"## Cost vs simulated time (the paper's Table 1), {p} devices", "",
           "Pearson correlation between the paper's cost (elements) and simulated time per setup "
           "(optimized exchanges), first over the cost model's own plans (DP, greedy and the random "
           "draws, which all use every device, as in the paper's table), then over every plan, "
           "the hand-written baselines included (some of which leave devices idle: little "
           f"communication, much time). Paper: {PAPER['pearson']}.", ""]
    md += table
    if values:
        md += ["", f"Over the cost model's own plans: median over setups "
               f"{statistics.median(values):.2f}; {sum(v > 0.72 for v in values)} of "
               f"{len(values)} above 0.72."]
    table, speedups = time_objective_table(data)
    md += ["", f"## Beyond the paper: planning by time (`--objective time`, `--objective search`), "
           f"{p} devices", "",
           "The DP column is the paper's programme over bytes (`--objective bytes`). *Time DP* is "
           "the same programme pricing every candidate by predicted time on the machine "
           "(compiler/logical/time_dp.h, the default objective). *Search* simulates the whole "
           "plan: the time DP's, the DP's, greedy's and the baselines' plans are simulated, then "
           "single-operator changes (cheapest by cost first) are tried while one is faster "
           "(compiler/logical/time_objective.h). Optimized exchanges. The search's time here is "
           "measured in this run, where the setup's synthesis cache already holds most of the "
           "exchanges it needs.", ""]
    md += table
    for name, label in (("time-dp", "The time DP's plan"), ("search", "The search's plan")):
        values = speedups[name]
        if values:
            md += ["", f"{label} is faster than the DP's on {sum(v > 1.0005 for v in values)} of "
                   f"{len(values)} setups; geomean speedup {geomean(values):.3f}x, best "
                   f"{max(values):.2f}x."]
    md += ["", "## The default plan against the hand-written baselines", "",
           "The default objective's plan (the time programme, `--objective time`) against the "
           "fastest of the four hand-written baselines per setup, with the search objective's "
           "plan and the bytes DP's (the paper's programme) beside it. Optimized exchanges; "
           "simulated.", ""]
    md += default_vs_baselines(data)
    md += ["", f"## Planning and synthesis time ({p} devices; measured on this machine)", ""]
    md += timing_table(data)
    md += ["", "## Is the simulator true?", ""]
    md += sim_check_section(args.sim_check)
    md += ["", "## Every plan", "",
           "One table per workload, machine and device count: every plan with both exchange "
           "schedules (`paper_check.py` checks these tables equal the CSV).", ""]
    for (w, m, devices) in sorted(data.by_setup, key=lambda k: (
            data.workloads.index(k[0]), data.machines.index(k[1]), k[2])):
        md += [f"### {w} on {m}, {devices} devices", ""]
        md += setup_table(data, w, m, devices)
        md += [""]
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"paper_report: {os.path.join(args.out, 'report.md')} and {len(figures)} figures")


if __name__ == "__main__":
    main()
