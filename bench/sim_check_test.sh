#!/usr/bin/env bash
# cpu_calibrate and sim_check end to end in their --quick modes (docs/simulation.md, "Is the
# simulator true?"). Asserts structure only, never timings: calibrate exits 0 and writes a
# topology with every device key (the per-class ones too) that sim_check parses; sim_check exits 0, prints a row for
# every plan (3 random seeds + every other planner) and a summary, and its CSV has the same
# plans with positive, finite times and ratios.
# Usage: sim_check_test.sh PATH/TO/cpu_calibrate PATH/TO/sim_check
set -u
calibrate="$1"
sim_check="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL $*"
    failures=$((failures + 1))
}

if ! "$calibrate" --out "$tmp/cpu.topo" --quick --devices 4 >"$tmp/calibrate.out" 2>&1; then
    fail "cpu_calibrate --quick exited non-zero:"
    cat "$tmp/calibrate.out"
fi
for key in name gpus kind link_bandwidth hbm_bandwidth latency peak_f32 peak_f16 peak_bf16 \
    memory compute_efficiency memory_efficiency launch_overhead gemm_compute_efficiency \
    attention_compute_efficiency elementwise_memory_efficiency norm_memory_efficiency; do
    grep -q "^$key: " "$tmp/cpu.topo" || fail "topology has no '$key:' line"
done
grep -q '^gpus: 4$' "$tmp/cpu.topo" || fail "topology: gpus is not --devices 4"
grep -q '^name: cpu-' "$tmp/cpu.topo" || fail "topology: name is not cpu-<host>"
grep -q '^# Measured .* cores' "$tmp/cpu.topo" || fail "topology: no comment on what was measured"

# Usage errors exit 2.
"$calibrate" >/dev/null 2>&1
[ $? -eq 2 ] || fail "cpu_calibrate without --out: expected exit 2"
"$sim_check" --plans 3 >/dev/null 2>&1
[ $? -eq 2 ] || fail "sim_check without --topology: expected exit 2"
printf 'name: broken\n' >"$tmp/broken.topo"
"$sim_check" --topology "$tmp/broken.topo" --quick >/dev/null 2>&1
[ $? -eq 2 ] || fail "sim_check on a broken topology: expected exit 2"
"$sim_check" --topology "$tmp/cpu.topo" --devices 5 --quick >/dev/null 2>&1
[ $? -eq 2 ] || fail "sim_check --devices 5 on a 4-GPU topology: expected exit 2"

if ! "$sim_check" --topology "$tmp/cpu.topo" --plans 3 --quick --seed 7 --csv "$tmp/check.csv" \
    --compare_topology dgx-h100 >"$tmp/check.out" 2>&1; then
    fail "sim_check --quick exited non-zero:"
    cat "$tmp/check.out"
fi
grep -q '^sim_check: seed 7, topology cpu-' "$tmp/check.out" || fail "sim_check does not print its seed"
grep -q '^overall Pearson ' "$tmp/check.out" || fail "sim_check prints no overall Pearson"
grep -q '^On --compare_topology dgx-h100 ' "$tmp/check.out" ||
    fail "sim_check --compare_topology prints no second summary"
python3 - "$tmp/check.csv" "$tmp/check.out" <<'PY' || fail "sim_check's rows"
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out = open(sys.argv[2]).read().splitlines()
expected = [("random", str(7 + i)) for i in range(3)] + [
    (p, "7") for p in ["dp", "greedy", "data-parallel", "megatron", "ulysses", "row-sharded"]]
got = [(r["planner"], r["seed"]) for r in rows]
assert got == expected, got
for r in rows:
    for key in ("measured_s", "predicted_s", "ratio", "compare_predicted_s"):
        v = float(r[key])
        assert math.isfinite(v) and v > 0, (key, r)
    assert int(r["nodes"]) > 0, r
plan_rows = [l for l in out if l.startswith("| " + rows[0]["workload"] + " | ")]
# every plan, then its summary row on the topology and on --compare_topology
assert len(plan_rows) == len(expected) + 2, plan_rows
assert sum(l.startswith("| all | %d | " % len(expected)) for l in out) == 2, out
PY

echo "$failures failed"
[ "$failures" -eq 0 ]
