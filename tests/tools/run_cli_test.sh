#!/usr/bin/env bash
# einsummable-run from the outside: small workloads run on CPU virtual devices and match the
# single-device reference; bad arguments give one line naming the problem and exit 2, a backend
# this machine cannot run exit 3. Every run passes --backend cpu, so the test means the same on a
# machine with a GPU (where auto would pick CUDA).
# Usage: run_cli_test.sh PATH/TO/einsummable-run SOURCE_DIR
set -u
source_dir="$2"
# shellcheck source=tests/tools/cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tool="$tmp/einsummable-run-cpu"
printf '#!/usr/bin/env bash\nexec "%s" --backend cpu "$@"\n' "$1" >"$tool"
chmod +x "$tool"

expect_ok ffn-small "y: [0-9.e+-]+ \(f32, tolerance 1e-05\)$" --workload ffn --scale small --devices 4
expect_ok llama-small "y: [0-9.e+-]+ \(f16, tolerance 1e-02\)$" --workload llama-block:seqs=8x1024 --scale small --devices 8 --iterations 50
expect_ok chain-small-naive "schedule naive" --workload chain:C --scale small --devices 3 --schedule naive
expect_ok ai-alias "schedule optimized" --workload ffn --scale small --devices 2 --schedule ai
expect_ok graph-file "bytes moved per execute: [1-9]" --graph "$source_dir/proto/examples/ffn.textproto" --bind tokens=64 --devices 4
expect_ok explain "exchange programs \(optimized, topology dgx-h100" --workload ffn --scale small --devices 4 --topology dgx-h100 --explain
expect_ok wide-switch "on 16 cpu devices" --workload ffn --scale small --devices 16 --iterations 20
expect_ok greedy-random "planner random" --workload chain:A --scale small --devices 4 --planner random --seed 3

# JSON: valid, within tolerance, and the bytes per pair add up to the total (the bytes
# objective's plan moves blocks; the time objective runs the small FFN data parallel).
expect_true json-consistent bash -c '"$0" --workload ffn --scale small --devices 4 --objective bytes --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
assert d[\"within_tolerance\"], d
assert d[\"bytes_moved_per_execute\"] == sum(p[\"bytes\"] for p in d[\"bytes_by_pair\"]) > 0, d
assert len(d[\"peak_bytes\"]) == 4 and min(d[\"peak_bytes\"]) > 0, d
"' "$tool"
# One device moves nothing.
expect_true one-device-no-copies bash -c '"$0" --workload ffn --scale small --devices 1 --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
assert d[\"bytes_moved_per_execute\"] == 0 and d[\"within_tolerance\"], d
"' "$tool"

expect_error no-source 2 "exactly one of --workload" --devices 4
expect_error bad-scale 2 "unknown scale 'tiny'" --workload ffn --scale tiny
expect_error scale-graph 2 "--scale small applies to --workload" --graph x --scale small
expect_error no-small 2 "no small version of workload 'matmul:64'" --workload matmul:64 --scale small
expect_error bad-schedule 2 "--schedule: .*'fast'" --workload ffn --scale small --schedule fast
expect_error bad-topology 2 "--topology: .*'dgx-z'" --workload ffn --scale small --topology dgx-z
expect_error few-gpus 2 "compile: the plan is for 12 devices; topology dgx-v100 has 8" --workload ffn --scale small --devices 12 --topology dgx-v100
expect_error bad-devices 2 "--devices=0: expected a count from 1 to 1024" --workload ffn --devices 0
expect_error gpu-list-on-cpu 2 "--devices=0,0: a list of GPUs is for the CUDA backend" --workload ffn --devices 0,0
expect_error bad-repeat 2 "--repeat must be at least 1" --workload ffn --repeat 0
expect_error unknown-flag 2 "unknown flag '--gpus'" --workload ffn --gpus 3
expect_error unbound-symbol 2 "symbol 'tokens' is not bound" --graph "$source_dir/proto/examples/ffn.textproto"

# Objectives: time by default; --objective search, the fastest plan by simulated time, still
# checked against the reference.
expect_ok objective-default "objective time, schedule optimized" --workload ffn --scale small --devices 2
expect_ok objective-bytes "objective bytes, schedule naive" --workload ffn --scale small --devices 2 --objective cost --schedule naive
expect_ok objective-search "objective search, schedule naive" --workload llama-block:seqs=8x1024 --scale small --devices 4 --objective search --schedule naive
expect_true objective-json bash -c '"$0" --workload ffn --scale small --devices 2 --objective search --schedule naive --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
assert d[\"objective\"] == \"search\" and d[\"within_tolerance\"], d
"' "$tool"
expect_error objective-bad 2 "--objective: unknown objective 'fast' \(expected bytes, time or search; cost means bytes\)" --workload ffn --objective fast

# --predict_topology: the compiled plan is also simulated (docs/simulation.md); the predicted
# line comes right after the execute line, and --json carries the prediction.
expect_ok predict-builtin "^predicted: [0-9.]+ ms \(simulated on dgx-h100\)$" --workload ffn --scale small --devices 4 --predict_topology dgx-h100
expect_true predict-after-execute bash -c '"$0" --workload chain:C --scale small --devices 2 --predict_topology dgx-a100 | grep -A1 "^execute: " | grep -q "^predicted: "' "$tool"
expect_true predict-json bash -c '"$0" --workload llama-block:tokens=1024 --scale small --devices 2 --predict_topology dgx-a100 --json | python3 -c "
import json, math, sys
d = json.load(sys.stdin)
assert d[\"predicted_topology\"] == \"dgx-a100\", d
assert math.isfinite(d[\"predicted_s\"]) and d[\"predicted_s\"] > 0, d
"' "$tool"
expect_true no-predict-no-field bash -c '"$0" --workload ffn --scale small --devices 2 --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
assert \"predicted_s\" not in d and \"predicted_topology\" not in d, d
"' "$tool"
printf 'name: cpu-test\ngpus: 2\nkind: switch\nlink_bandwidth: 5 GB/s\nhbm_bandwidth: 10 GB/s\nlatency: 4 us\npeak_f32: 20 GFLOP/s\npeak_f16: 20 GFLOP/s\npeak_bf16: 20 GFLOP/s\ncompute_efficiency: 1\nmemory_efficiency: 1\nlaunch_overhead: 5 us\n' >"$tmp/cpu.topo"
expect_ok predict-file "^predicted: [0-9.]+ ms \(simulated on cpu-test\)$" --workload ffn --scale small --devices 2 --predict_topology "$tmp/cpu.topo"
printf 'name: broken\ngpus: 2\n' >"$tmp/broken.topo"
expect_error predict-unknown 2 "^einsummable-run: error: --predict_topology: unknown topology 'dgx-z'" --workload ffn --scale small --predict_topology dgx-z
expect_error predict-bad-file 2 "^einsummable-run: error: --predict_topology: .*broken.topo: missing required key" --workload ffn --scale small --predict_topology "$tmp/broken.topo"
expect_error predict-missing-file 2 "^einsummable-run: error: --predict_topology: cannot read" --workload ffn --scale small --predict_topology "$tmp/none.topo"
expect_error predict-few-gpus 2 "^einsummable-run: error: --predict_topology: the plan has 4 devices; topology 'cpu-test' has 2 GPUs" --workload ffn --scale small --devices 4 --predict_topology "$tmp/cpu.topo"

# Where the CUDA backend cannot be had (its plugin missing, or a build without CUDA), cuda is an
# error and auto runs on the CPU saying why. The raw tool, without the --backend cpu wrapper.
tool_raw="$1"
tool_no_plugin="$tmp/einsummable-run-no-plugin"
printf '#!/usr/bin/env bash\nEINSUMMABLE_CUDA_PLUGIN=/nonexistent/libeinsummable_cuda.so exec "%s" "$@"\n' \
    "$tool_raw" >"$tool_no_plugin"
chmod +x "$tool_no_plugin"
tool="$tool_no_plugin"
# Exit 3, not 2: the flags are fine, the machine cannot run the backend (scripts/gpu-check's
# rehearsal tells the two apart). A mistake in a later flag is still reported as such (exit 2),
# and a lone 0 is a count, with a hint.
expect_error cuda-unavailable 3 "--backend=cuda: .*CUDA backend" --workload ffn --scale small --backend cuda
expect_error cuda-bad-scale 2 "unknown scale 'tiny'" --workload ffn --scale tiny --backend cuda
expect_error cuda-bad-workload 2 "workload" --workload "llama-block:tokns=8" --backend cuda
expect_error cuda-zero-devices 2 "--devices=0: .*GPU 0 alone is --devices=1" --workload ffn --backend cuda --devices 0
expect_error cuda-bad-list 2 "--devices=0,x: 'x' is not a GPU ordinal" --workload ffn --backend cuda --devices 0,x
expect_ok auto-falls-back "^backend: --backend=auto: .*-> cpu backend with 2 virtual devices" --workload ffn --scale small --devices 2 --explain

cli_summary
