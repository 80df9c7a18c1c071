#!/usr/bin/env bash
# einsummable-exprog from the outside: check, simulate and synthesize on the paper's examples and
# on a preamble; --json is valid JSON and --timeline valid XML; bad arguments, files, programs
# and topologies give one line naming the problem on stderr and the documented exit status
# (1 for an invalid program, 2 for a usage error).
# Usage: exprog_cli_test.sh PATH/TO/einsummable-exprog SOURCE_DIR
set -u
exprog="$1"
source_dir="$2"
golden="$source_dir/tests/golden/exprog"
tool="$exprog"
# shellcheck source=tests/tools/cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"

# expect_json NAME ASSERTION ARGS...: with --json added, stdout is JSON, and the Python ASSERTION on it (d)
# holds.
expect_json() {
    local name="$1" assertion="$2"
    shift 2
    if "$exprog" "$@" --json | python3 -c "import json, sys; d = json.load(sys.stdin); assert $assertion"; then
        pass_
    else
        fail_ "$name: not JSON, or not: $assertion"
    fi
}

xml_valid() { python3 -c 'import sys, xml.etree.ElementTree as E; assert E.parse(sys.argv[1]).getroot().tag.endswith("svg")' "$1"; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# check: the paper's examples are valid; size-declared partitions get a membership.
expect_ok check-two-gpus "^valid$" check "$golden/paper_two_gpus.exprog"
expect_ok check-four-gpus "^valid$" check "$golden/paper_four_gpus.exprog"
expect_ok check-size-partitions "^valid$" check "$golden/paper_size_partitions.exprog"
expect_ok check-membership "^G1 = \{[0-9]+, [0-9]+, [0-9]+, [0-9]+\}$" check "$golden/paper_size_partitions.exprog"
expect_ok check-design "^G2 = \{[0-9]+, [0-9]+\}$" check "$golden/design.exprog"
expect_ok check-stdin "^valid$" check - <"$golden/paper_two_gpus.exprog"

# simulate: a time with units and a trace table, on built-in and file topologies.
expect_ok simulate-time "^simulated time: [0-9]+\.[0-9]{3} (s|ms|us|ns)$" simulate "$golden/paper_two_gpus.exprog"
expect_ok simulate-trace "transfer +0->1 .* egress\(0\),ingress\(1\) +A 0->1" simulate "$golden/paper_two_gpus.exprog"
expect_ok simulate-v100 "topology: dgx-v100 \(links, 8 GPUs\)" simulate "$golden/paper_size_partitions.exprog" --topology dgx-v100
expect_ok simulate-topology-file "topology: dgx-h100" simulate "$golden/paper_four_gpus.exprog" --topology "$source_dir/docs/topologies/dgx-h100.topo"
expect_ok simulate-membership "^membership: G1 = \{" simulate "$golden/paper_size_partitions.exprog"

# synthesize: a preamble (four GPUs, one atom each, all need the total) in every mode; the
# output is a program that checks as valid.
cat >"$tmp/preamble.exprog" <<'EOF'
GPUS: 0, 1, 2, 3
PARTITIONS: ALL {0, 1, 2, 3}
IN: A @ 0 (size: 256 MB)
IN: B @ 1 (size: 256 MB)
IN: C @ 2 (size: 256 MB)
IN: D @ 3 (size: 256 MB)
OUT: A+B+C+D @ ALL
EOF
for mode in naive optimized ai; do
    expect_ok "synthesize-$mode" "^# simulated time: [0-9.]+ (s|ms|us|ns) on dgx-a100$" synthesize "$tmp/preamble.exprog" --mode "$mode" --iterations 40
    if "$exprog" synthesize "$tmp/preamble.exprog" --mode "$mode" --iterations 40 >"$tmp/synth-$mode.exprog"; then
        expect_ok "synthesize-$mode-rechecks" "^valid$" check "$tmp/synth-$mode.exprog"
        expect_true "synthesize-$mode-has-actions" grep -qE "^([A-Za-z0-9_]+: )?A\+B\+C\+D(\[[0-9]+/[0-9]+\])? @ " "$tmp/synth-$mode.exprog"
    else
        echo "FAIL synthesize-$mode-rechecks: synthesize failed"
        failures=$((failures + 1))
    fi
done
expect_ok synthesize-naive-time "^# naive time: [0-9.]+ (s|ms|us|ns)" synthesize "$tmp/preamble.exprog" --mode naive
expect_ok synthesize-seed "seed 7" synthesize "$tmp/preamble.exprog" --seed 7 --iterations 10 --topology dgx-v100

# --json is valid JSON for every command; the fields are there.
expect_json json-check 'd["valid"] and len(d["membership"]["G1"]) == 4' check "$golden/paper_size_partitions.exprog"
expect_json json-simulate 'd["simulated_s"] > 0 and len(d["tasks"]) == 4 and d["topology"]["name"] == "dgx-a100"' simulate "$golden/paper_two_gpus.exprog"
expect_json json-synthesize 'd["naive_simulated_s"] >= d["simulated_s"] > 0 and "GPUS" in d["program"]' synthesize "$tmp/preamble.exprog" --iterations 20
if "$exprog" check "$golden/free_form.exprog" --json 2>/dev/null | json_valid; then
    passes=$((passes + 1))
else
    echo "FAIL json-invalid: check --json of an invalid program is not valid JSON"
    failures=$((failures + 1))
fi

# --timeline writes an SVG that parses as XML.
rm -f "$tmp/sim.svg" "$tmp/synth.svg"
expect_ok timeline-simulate "simulated time" simulate "$golden/paper_size_partitions.exprog" --topology dgx-v100 --timeline "$tmp/sim.svg"
expect_true timeline-simulate-xml xml_valid "$tmp/sim.svg"
expect_ok timeline-synthesize "simulated time" synthesize "$tmp/preamble.exprog" --iterations 10 --timeline "$tmp/synth.svg"
expect_true timeline-synthesize-xml xml_valid "$tmp/synth.svg"
expect_true timeline-title grep -q "on dgx-v100: simulated time" "$tmp/sim.svg"

# Errors: usage (exit 2).
expect_error no-command 2 "expected a command: check, simulate or synthesize"
expect_error unknown-command 2 "unknown command 'run' \(expected check, simulate or synthesize\)" run "$golden/paper_two_gpus.exprog"
expect_error no-file 2 "missing FILE" check
expect_error missing-file 2 "cannot read '$tmp/none.exprog'" check "$tmp/none.exprog"
expect_error extra-argument 2 "unexpected argument 'extra'" check "$golden/paper_two_gpus.exprog" extra
printf 'GPUS: 0, 1\nIN: A @ 0\nA+B -> 1\n' >"$tmp/syntax.exprog"
expect_error syntax-error 2 "syntax.exprog:line 3 column [0-9]+: expected '@'" check "$tmp/syntax.exprog"
expect_error unknown-topology 2 "unknown topology 'dgx-z9' \(built-in topologies: dgx-a100, dgx-h100, dgx-v100, dgx-a100-2nodes" simulate "$golden/paper_two_gpus.exprog" --topology dgx-z9
printf 'name: box\ngpus: 2\nkind: switch\nlink_bandwidth: fast\nhbm_bandwidth: 1 TB/s\nlatency: 1 us\n' >"$tmp/bad.topo"
expect_error bad-topology-file 2 "bad.topo:line 4: " simulate "$golden/paper_two_gpus.exprog" --topology "$tmp/bad.topo"
expect_error missing-topology-file 2 "cannot read '$tmp/none.topo'" simulate "$golden/paper_two_gpus.exprog" --topology "$tmp/none.topo"
expect_error bad-mode 2 "--mode: .*annealing" synthesize "$tmp/preamble.exprog" --mode annealing
expect_error bad-iterations 2 "--iterations must be at least 0" synthesize "$tmp/preamble.exprog" --iterations -1
expect_error bad-max-chunks 2 "--max_chunks must be between 0 and 4096" synthesize "$tmp/preamble.exprog" --max_chunks -1
# docs/exprog.md's pipelined ring: valid, and within 1% of the all-reduce bound (5.0 ms).
expect_ok docs-ring-valid "^valid$" check "$source_dir/docs/examples/ring_all_reduce.exprog"
expect_ok docs-ring-time "simulated time: 5\.0[0-4][0-9] ms" simulate "$source_dir/docs/examples/ring_all_reduce.exprog"
# --max_chunks 0: whole atoms and no ORDER (no pipelining); the default may chunk.
expect_true whole-atoms-without-pipelining bash -c '! "$0" synthesize "$1" --iterations 10 --max_chunks 0 | grep -qE "^ORDER:|\[[0-9]+/[0-9]+\] @"' "$exprog" "$tmp/preamble.exprog"
expect_ok synthesize-max-chunks "max chunks 2;" synthesize "$tmp/preamble.exprog" --iterations 10 --max_chunks 2
expect_error bad-seed 2 "--seed: " synthesize "$tmp/preamble.exprog" --seed many
expect_error unknown-flag 2 "unknown flag '--speed'" check "$golden/paper_two_gpus.exprog" --speed
expect_error timeline-on-check 2 "--timeline applies to simulate and synthesize" check "$golden/paper_two_gpus.exprog" --timeline "$tmp/x.svg"

# Errors: invalid programs (exit 1).
printf 'GPUS: 0, 1\nIN: A @ 0\nIN: B @ 1\nOUT: A+B @ 0, 1\nA @ 0 -> 1\nA+B @ 1\n' >"$tmp/unmet.exprog"
expect_error unmet-out 1 "unmet.exprog:line 4: OUT A\+B @ 0 is not met" check "$tmp/unmet.exprog"
expect_error unmet-out-simulate 1 "OUT A\+B @ 0 is not met" simulate "$tmp/unmet.exprog"
printf 'GPUS: 0, 1\nIN: A @ 0\nIN: B @ 1\nOUT: A @ 1\nA @ 0 -> 1\nA+B @ 0\n' >"$tmp/stuck.exprog"
expect_error never-fires 1 "line 6: action 'A\+B @ 0' can never fire" check "$tmp/stuck.exprog"
expect_error synthesize-with-actions 1 "paper_two_gpus.exprog: .*action" synthesize "$golden/paper_two_gpus.exprog"
printf 'GPUS: 0, 9\nIN: A @ 0\nOUT: A @ 9\nA @ 0 -> 9\n' >"$tmp/big.exprog"
expect_error gpu-beyond-topology 1 "uses GPU 9, the topology has 8 GPUs" simulate "$tmp/big.exprog"

cli_summary
