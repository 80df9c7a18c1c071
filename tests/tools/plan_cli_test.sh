#!/usr/bin/env bash
# einsummable-plan from the outside: good runs print a plan, bad arguments and graph files give
# one line naming the problem on stderr and exit non-zero.
# Usage: plan_cli_test.sh PATH/TO/einsummable-plan SOURCE_DIR
set -u
plan="$1"
source_dir="$2"
failures=0
passes=0

# expect_ok NAME PATTERN ARGS...: exit 0 and stdout matches PATTERN.
expect_ok() {
    local name="$1" pattern="$2"
    shift 2
    local out
    if ! out="$("$plan" "$@" 2>&1)"; then
        echo "FAIL $name: exit non-zero: $out"
        failures=$((failures + 1))
    elif ! grep -qE -- "$pattern" <<<"$out"; then
        echo "FAIL $name: output does not match '$pattern':"
        echo "$out" | head -5
        failures=$((failures + 1))
    else
        passes=$((passes + 1))
    fi
}

# expect_error NAME PATTERN ARGS...: exit non-zero, stderr is one line matching PATTERN.
expect_error() {
    local name="$1" pattern="$2"
    shift 2
    local err rc
    err="$("$plan" "$@" 2>&1 >/dev/null)"
    rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "FAIL $name: exit 0"
        failures=$((failures + 1))
    elif [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ] || ! grep -qE -- "$pattern" <<<"$err"; then
        echo "FAIL $name: expected one line matching '$pattern', got:"
        echo "$err"
        failures=$((failures + 1))
    else
        passes=$((passes + 1))
    fi
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

expect_ok text-plan "strategy: 3D matmul" --workload matmul:64 --devices 8
expect_ok json-plan '"strategy": "data parallel"' --workload llama-block:seqs=8x128 --devices 8 --format json
expect_ok graph-text "h \(einsum\)" --graph "$source_dir/proto/examples/ffn.textproto" --bind tokens=256 --devices 4
expect_ok graph-json "planner=greedy" --graph "$source_dir/proto/examples/ffn.json" --bind tokens=256 --planner greedy
expect_ok random-seed "planner=random seed=7" --workload chain:C --planner random --seed 7

# The JSON output is valid JSON.
if "$plan" --workload chain:B --format json | python3 -c 'import json, sys; json.load(sys.stdin)'; then
    passes=$((passes + 1))
else
    echo "FAIL json-valid: --format json is not valid JSON"
    failures=$((failures + 1))
fi

expect_error no-source "exactly one of --workload" --devices 4
expect_error both-sources "exactly one of --workload" --workload ffn --graph x.textproto
expect_error unknown-workload "unknown workload 'nope'" --workload nope
expect_error bad-planner "unknown planner 'annealing'" --workload ffn --planner annealing
expect_error bad-format "unknown format 'yaml'" --workload ffn --format yaml
expect_error bad-devices "devices must be at least 1" --workload ffn --devices 0
expect_error missing-file "cannot read '$tmp/none.textproto'" --graph "$tmp/none.textproto"
expect_error unbound-symbol "symbol 'tokens' is not bound" --graph "$source_dir/proto/examples/ffn.textproto"
expect_error bad-bind "--bind: 'tokens' is not NAME=SIZE" --graph "$source_dir/proto/examples/ffn.textproto" --bind tokens
printf 'inputs { name: "x" dtype: F32 dims { fixed: 4 } }\noperators { name: "y" kind: "softmax" inputs: "x" \n' >"$tmp/truncated.textproto"
expect_error syntax-error "truncated.textproto: line [0-9]+ column [0-9]+" --graph "$tmp/truncated.textproto"
printf 'inputs { name: "x" dtype: F32 dims { fixed: 4 } }\noperators { name: "y" kind: "conv" inputs: "x" }\nsaved: "y"\n' >"$tmp/conv.textproto"
expect_error unknown-operator "node 'y'.*unknown operator 'conv'" --graph "$tmp/conv.textproto"
expect_error positional "unexpected argument 'extra'" --workload ffn extra

echo "${passes} passed, ${failures} failed"
[ "$failures" -eq 0 ]
