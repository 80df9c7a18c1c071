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

expect_ok text-plan "strategy: 3D matmul" --workload matmul:64 --devices 8
expect_ok json-plan '"strategy": "data parallel"' --workload llama-block:seqs=8x128 --devices 8 --format json
expect_ok graph-text "h \(einsum\)" --graph "$source_dir/proto/examples/ffn.textproto" --bind tokens=256 --devices 4
expect_ok graph-json "planner=greedy" --graph "$source_dir/proto/examples/ffn.json" --bind tokens=256 --planner greedy
expect_ok random-seed "planner=random seed=7" --workload chain:C --planner random --seed 7

# The JSON output is valid JSON.
expect_true json-valid bash -c '"$0" --workload chain:B --format json | python3 -c "import json, sys; json.load(sys.stdin)"' "$plan"

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
