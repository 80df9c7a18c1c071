#!/usr/bin/env bash
# einsummable-plan from the outside: good runs print a plan, bad arguments and graph files give
# one line naming the problem on stderr and exit non-zero.
# Usage: plan_cli_test.sh PATH/TO/einsummable-plan SOURCE_DIR
set -u
plan="$1"
source_dir="$2"
tool="$plan"
# shellcheck source=tests/tools/cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

expect_ok text-plan "strategy: 3D matmul" --workload matmul:64 --devices 8 --objective bytes
expect_ok json-plan '"strategy": "data parallel"' --workload llama-block:seqs=8x128 --devices 8 --format json
expect_ok graph-text "h \(einsum\)" --graph "$source_dir/proto/examples/ffn.textproto" --bind tokens=256 --devices 4
expect_ok graph-json "planner=greedy" --graph "$source_dir/proto/examples/ffn.json" --bind tokens=256 --planner greedy
# A graph file's inputs without symbolic dimensions (w1, w2) are its weights: x's rows are tokens.
expect_ok graph-weights "strategy: data parallel" --graph "$source_dir/proto/examples/ffn.textproto" --bind tokens=256 --devices 4 --planner data-parallel
expect_ok random-seed "planner=random seed=7" --workload chain:C --planner random --seed 7

# The JSON output is valid JSON.
expect_true json-valid bash -c '"$0" --workload chain:B --format json | python3 -c "import json, sys; json.load(sys.stdin)"' "$plan"

# --simulate: the whole-plan simulation (docs/simulation.md), its timeline and its JSON.
expect_ok simulate "whole-plan simulation on dgx-v100, naive exchange programs" --workload llama-block:tokens=1024 --devices 4 --simulate --topology dgx-v100 --schedule naive
expect_ok simulate-predicted "predicted time: [0-9.]+ ms \(simulated\)" --workload chain:C --devices 8 --simulate --iterations 20
expect_ok simulate-critical-path "critical path \([0-9]+ nodes\)" --workload chain:C --devices 8 --simulate --iterations 20
rm -f "$tmp/plan.svg"
expect_ok simulate-timeline "predicted time" --workload llama-block:seqs=8x1024 --devices 8 --simulate --schedule naive --timeline "$tmp/plan.svg"
expect_true simulate-timeline-xml python3 -c 'import sys, xml.etree.ElementTree as E; assert E.parse(sys.argv[1]).getroot().tag.endswith("svg")' "$tmp/plan.svg"
expect_true simulate-timeline-title grep -q "dp plan, 8 devices of dgx-a100 (naive exchanges): simulated" "$tmp/plan.svg"
expect_true simulate-timeline-lanes grep -q "device 7 (GPU 7)" "$tmp/plan.svg"
expect_true simulate-json bash -c '"$0" --workload chain:B --devices 4 --simulate --schedule naive --format json | python3 -c "
import json, sys
d = json.load(sys.stdin)
s = d[\"simulation\"]
assert d[\"plan\"][\"strategy\"], d
assert s[\"predicted_s\"] > 0 and len(s[\"devices\"]) == 4, s
# Each time is printed to 9 significant digits, so three of them sum to within a few 1e-9.
for t in s[\"devices\"]:
    assert abs(t[\"compute_s\"] + t[\"communication_s\"] + t[\"idle_s\"] - s[\"predicted_s\"]) < 1e-8 * s[\"predicted_s\"], t
assert abs(s[\"critical_path\"][-1][\"end_s\"] - s[\"predicted_s\"]) < 1e-12 + 1e-9 * s[\"predicted_s\"]
"' "$plan"
expect_error simulate-bad-topology 2 "--topology: .*cannot read 'nowhere.topo'" --workload ffn --simulate --topology nowhere.topo
expect_error simulate-too-many-devices 2 "--devices 16 is more than topology 'dgx-a100' has GPUs \(8\)" --workload ffn --devices 16 --simulate
expect_error simulate-bad-schedule 2 "--schedule: " --workload ffn --simulate --schedule fastest
expect_error timeline-without-simulate 2 "--timeline applies only with --simulate" --workload ffn --timeline "$tmp/x.svg"
expect_error simulate-no-peak 2 "gives no peak_bf16" --workload matmul:64,dtype=bf16 --devices 2 --simulate --topology dgx-v100

# Objectives (docs/planner.md "Objectives"): time by default, bytes (cost its old name), search.
expect_ok objective-default "^objective: time" --workload ffn --devices 4
expect_ok objective-default-many-devices "^objective: time" --workload matmul:256 --devices 16
expect_ok objective-bytes "^objective: bytes$" --workload ffn --devices 4 --objective bytes
expect_ok objective-cost-is-bytes "^objective: bytes$" --workload ffn --devices 4 --objective cost
expect_ok objective-baseline-is-its-own "^objective: bytes$" --workload ffn --devices 4 --planner megatron --objective search
expect_true objective-json bash -c '"$0" --workload ffn --devices 4 --format json | python3 -c "
import json, sys
o = json.load(sys.stdin)[\"objective\"]
assert o[\"name\"] == \"time\" and \"predicted_s\" in o and \"origin\" in o, o
"' "$plan"
# --objective search: the fastest plan by simulated time (docs/simulation.md).
expect_ok objective-search "objective search on dgx-a100: the fastest plan found comes from data-parallel" --workload llama-block:seqs=8x1024 --devices 8 --objective search --schedule naive
expect_true objective-search-json bash -c '"$0" --workload chain:C --devices 4 --objective search --schedule naive --format json | python3 -c "
import json, sys
d = json.load(sys.stdin)
o = d[\"objective\"]
assert o[\"name\"] == \"search\" and 0 < o[\"predicted_s\"] <= o[\"bytes_plan_predicted_s\"], o
assert d[\"plan\"][\"objective\"][\"name\"] == \"search\", d[\"plan\"]
"' "$plan"
expect_error bad-objective 2 "--objective: unknown objective 'speed' \(expected bytes, time or search; cost means bytes\)" --workload ffn --objective speed

expect_error no-source 2 "exactly one of --workload" --devices 4
expect_error both-sources 2 "exactly one of --workload" --workload ffn --graph x.textproto
expect_error unknown-workload 2 "unknown workload 'nope'" --workload nope
expect_error bad-planner 2 "unknown planner 'annealing'" --workload ffn --planner annealing
expect_error bad-format 2 "unknown format 'yaml'" --workload ffn --format yaml
expect_error bad-devices 2 "devices must be at least 1" --workload ffn --devices 0
expect_error missing-file 2 "cannot read '$tmp/none.textproto'" --graph "$tmp/none.textproto"
expect_error unbound-symbol 2 "symbol 'tokens' is not bound" --graph "$source_dir/proto/examples/ffn.textproto"
expect_error bad-bind 2 "--bind: 'tokens' is not NAME=SIZE" --graph "$source_dir/proto/examples/ffn.textproto" --bind tokens
printf 'inputs { name: "x" dtype: F32 dims { fixed: 4 } }\noperators { name: "y" kind: "softmax" inputs: "x" \n' >"$tmp/truncated.textproto"
expect_error syntax-error 2 "truncated.textproto: line [0-9]+ column [0-9]+" --graph "$tmp/truncated.textproto"
printf 'inputs { name: "x" dtype: F32 dims { fixed: 4 } }\noperators { name: "y" kind: "conv" inputs: "x" }\nsaved: "y"\n' >"$tmp/conv.textproto"
expect_error unknown-operator 2 "node 'y'.*unknown operator 'conv'" --graph "$tmp/conv.textproto"
expect_error positional 2 "unexpected argument 'extra'" --workload ffn extra

cli_summary
