#!/usr/bin/env python3
"""Checks the invariants of a bench/paper report directory:

    paper_check.py DIR

- every reference workload x machine x device count of the run has every plan (dp, greedy, the
  random draws, the four baselines) with both exchange schedules;
- the DP's cost is at most the greedy's and every random plan's, per setup; the search
  objective's plan is never slower than the DP's (the bytes programme's) nor than the time
  programme's (time-dp), both among its starting points;
- simulated times are positive and finite, and each plan's mean device time splits into
  compute + communication-only + idle;
- no plan is faster than its setup's lower bounds (compute_bound_s, delivery_bound_s), when the
  CSV has them;
- the "Every plan" tables of report.md equal the CSV, row for row;
- every figure the report shows exists.
Prints what it checked; exits 1 naming the first problems found.
"""

import csv
import math
import os
import re
import sys

WORKLOADS = [
    "llama-block:tokens=1024", "llama-block:tokens=8192", "llama-block:tokens=131072",
    "llama-block:seqs=8x1024", "llama-block:seqs=128x1024",
    "chain:A", "chain:B", "chain:C", "chain:D", "chain:E",
]
FIXED_PLANS = ["dp", "greedy", "data-parallel", "megatron", "ulysses", "row-sharded", "time-dp",
               "search"]
SCHEDULES = ["naive", "optimized"]


def ms(seconds):
    return f"{seconds * 1e3:.4f}"


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    problems = []
    with open(os.path.join(out, "paper.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if r["plan"] == "time":  # CSVs from before the time programme: the search's row
            r["plan"] = "search"
    if not rows:
        print("paper_check: the CSV has no rows", file=sys.stderr)
        return 1
    machines = sorted({r["machine"] for r in rows})
    devices = sorted({int(r["devices"]) for r in rows})
    seeds = sorted({int(r["seed"]) for r in rows if r["plan"] == "random"})
    if seeds != list(range(len(seeds))) or not seeds:
        problems.append(f"random seeds are {seeds}, expected 0..N-1 with N >= 1")
    keyed = {}
    for r in rows:
        key = (r["workload"], r["machine"], int(r["devices"]), r["plan"], int(r["seed"]),
               r["schedule"])
        if key in keyed:
            problems.append(f"duplicate row {key}")
        keyed[key] = r

    # 1. Every workload x plan row present.
    for w in WORKLOADS:
        for m in machines:
            for p in devices:
                for s in SCHEDULES:
                    wanted = [(plan, 0) for plan in FIXED_PLANS] + [("random", k) for k in seeds]
                    for plan, seed in wanted:
                        if (w, m, p, plan, seed, s) not in keyed:
                            problems.append(f"missing row: {w} {m} p={p} {plan} seed={seed} {s}")
    # 2. DP cost <= greedy and random cost; 3. times positive, split adds up.
    for key, r in keyed.items():
        w, m, p, plan, seed, s = key
        t = float(r["predicted_s"])
        if not (math.isfinite(t) and t > 0):
            problems.append(f"{key}: simulated time {t} is not positive and finite")
        split = float(r["compute_s"]) + float(r["communication_s"]) + float(r["idle_s"])
        if abs(split - t) > 1e-6 * t:
            problems.append(f"{key}: compute + communication + idle = {split}, predicted {t}")
        for bound in ("compute_bound_s", "delivery_bound_s"):
            if r.get(bound) and t < float(r[bound]) * (1 - 1e-9):
                problems.append(f"{key}: simulated time {t} is below the {bound} {r[bound]}")
        if plan == "search":
            for start in ("dp", "time-dp"):
                other = keyed.get((w, m, p, start, 0, s))
                if other and float(r["predicted_s"]) > float(other["predicted_s"]) * (1 + 1e-9):
                    problems.append(f"{key}: the search objective's plan ({r['predicted_s']} s) "
                                    f"is slower than the {start} plan ({other['predicted_s']} s)")
        if plan in ("greedy", "random"):
            dp = keyed.get((w, m, p, "dp", 0, s))
            if dp and float(dp["cost_bytes"]) > float(r["cost_bytes"]) * (1 + 1e-12):
                problems.append(f"{key}: cost {r['cost_bytes']} below the DP's {dp['cost_bytes']}")

    # 4. The tables equal the CSV.
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    tables = report.split("## Every plan", 1)
    if len(tables) != 2:
        problems.append("report.md has no 'Every plan' section")
        tables = ["", ""]
    seen = set()
    setup = None
    for line in tables[1].splitlines():
        heading = re.match(r"### (.+) on (\S+), (\d+) devices$", line)
        if heading:
            setup = (heading.group(1), heading.group(2), int(heading.group(3)))
            continue
        if not line.startswith("| ") or line.startswith("| plan ") or setup is None:
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        plan, seed, schedule, strategy, cost, simulated = cells[:6]
        key = setup + (plan, int(seed), schedule)
        r = keyed.get(key)
        if r is None:
            problems.append(f"report row {key} is not in the CSV")
            continue
        if key in seen:
            problems.append(f"report row {key} appears twice")
        seen.add(key)
        expected = [r["strategy"], f"{float(r['cost_bytes']):.0f}", ms(float(r["predicted_s"]))]
        if [strategy, cost, simulated] != expected:
            problems.append(f"report row {key}: {[strategy, cost, simulated]} != CSV {expected}")
    if seen != set(keyed):
        problems.append(f"{len(set(keyed) - seen)} CSV rows are missing from the report's tables")

    # 5. Figures.
    for figure in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report):
        if not os.path.exists(os.path.join(out, figure)):
            problems.append(f"figure {figure} is missing")
    if "simulated" not in report.split("## Findings", 1)[0]:
        problems.append("the report does not say its times are simulated")

    if problems:
        for problem in problems[:30]:
            print(f"paper_check: {problem}", file=sys.stderr)
        print(f"paper_check: FAILED, {len(problems)} problems", file=sys.stderr)
        return 1
    print(f"paper_check: {len(rows)} rows; {len(WORKLOADS)} workloads x {len(machines)} machines x "
          f"devices {devices} x {len(FIXED_PLANS) + len(seeds)} plans x 2 schedules present; DP "
          "cost <= greedy and random; search <= DP and time DP time; times positive and above the "
          "bounds; tables equal "
          "the "
          "CSV; figures present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
