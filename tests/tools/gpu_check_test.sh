#!/usr/bin/env bash
# The GPU check's rehearsal (docs/cuda.md, "The GPU check"): scripts/gpu-check --pack packs this
# build's CUDA programs, and --packed on this machine with the GPUs hidden must stop at "no GPU
# visible" (exit 3) with every library resolved and every command line of the check accepted, so
# that a broken pack is found here and not on a GPU machine lent for minutes. Then the ways a pack
# or a call can be wrong, each refused with exit 2 and a line naming the culprit.
# Usage: gpu_check_test.sh SOURCE_DIR BUILD_DIR
set -u
source_dir="$1"
build_dir="$2"
# shellcheck source=tests/tools/cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"
check="$source_dir/scripts/gpu-check"
tool="$check" # for expect_output

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export CUDA_VISIBLE_DEVICES="" XZ_OPT="-0 -T0"

export GPU_PACK="$tmp/pack.tar.xz"
expect_output pack 0 "wrote $GPU_PACK" --pack --from "$build_dir"
expect_output rehearsal 3 "no GPU visible; the pack is sound.* 4 einsummable-run command lines" --packed
expect_output rehearsal-libraries 3 "^cublaslt: loaded" --packed

# A library missing from the pack and from this machine (a program linked against a library
# that is then removed, as a pack made elsewhere would be on the GPU machine): named with the
# program that needs it, before anything runs.
mkdir -p "$tmp/unpacked" "$tmp/stub"
tar -C "$tmp/unpacked" -xJf "$GPU_PACK"
echo 'int gpu_check_stub(void) { return 1; }' >"$tmp/stub/stub.c"
echo 'int gpu_check_stub(void); int main(void) { return gpu_check_stub(); }' >"$tmp/stub/probe.c"
cc -shared -fPIC -o "$tmp/stub/libgpu_check_stub.so" "$tmp/stub/stub.c" &&
    cc -o "$tmp/unpacked/gpu-pack/bin/probe" "$tmp/stub/probe.c" -L"$tmp/stub" -lgpu_check_stub
rm -f "$tmp/stub/libgpu_check_stub.so"
tar -C "$tmp/unpacked" -cJf "$tmp/broken.tar.xz" gpu-pack
GPU_PACK="$tmp/broken.tar.xz" expect_output missing-library 2 \
    "^  probe: libgpu_check_stub.so$" --packed
GPU_PACK="$tmp/none.tar.xz" expect_output no-pack 2 "cannot unpack $tmp/none.tar.xz" --packed

# A build configured without the cuDNN frontend's headers is not packed.
mkdir -p "$tmp/no-cudnn"
grep -v '^EINSUMMABLE_CUDNN_FRONTEND_INCLUDE_DIR' "$build_dir/CMakeCache.txt" \
    >"$tmp/no-cudnn/CMakeCache.txt"
expect_output no-frontend 2 "configured without cuDNN's or the cuDNN frontend's headers" \
    --pack --from "$tmp/no-cudnn"
mkdir -p "$tmp/no-programs"
cp "$build_dir/CMakeCache.txt" "$tmp/no-programs/"
expect_output no-programs 2 "no-programs/bin/[a-z_]+ is missing" \
    --pack --from "$tmp/no-programs"
expect_output bad-budget 2 "--budget=5: expected a number of seconds, at least 10" --packed --budget 5
expect_output from-alone 2 "--from goes with --pack" --packed --from "$build_dir"
expect_output bad-mode 2 "^usage: scripts/gpu-check" --fast

# The budget, against a pack of stand-ins that see a GPU: cuda_bench's table comes first, a step
# whose estimate exceeds the time left is skipped saying so, a step that overruns is stopped at
# the budget, the final table lists every step, and the check fails (exit 1) when any step did
# not pass. The stand-in einsummable-run sleeps far past the 12 s budget.
fake="$tmp/fake/gpu-pack"
mkdir -p "$fake/bin" "$fake/lib"
: >"$fake/lib/libeinsummable_cuda.so"
stand_in() { printf '#!/usr/bin/env bash\n%s\n' "$2" >"$fake/bin/$1" && chmod +x "$fake/bin/$1"; }
for test in cuda_library_kernels_test cuda_kernels_test cuda_rowwise_attention_test \
    cuda_block_ops_test cuda_einsum_generic_test cuda_plan_test cuda_graph_plan_test \
    cuda_discovery_test backend_choice_test daemon_test; do
    stand_in "$test" "echo '[  PASSED  ] 3 tests.'"
done
stand_in einsummable-cuda-info "printf 'cublaslt: loaded\ncudnn: loaded 9\nGPU 0: stand-in\n'"
stand_in cuda_bench "echo '| bench | stand-in table |'"
stand_in einsummable-run "sleep 120"
stand_in einsummabled "exit 0"
tar -C "$tmp/fake" -cJf "$tmp/fake.tar.xz" gpu-pack
started=$SECONDS
out="$(GPU_PACK="$tmp/fake.tar.xz" "$check" --packed --budget 12 2>&1)"
rc=$?
took=$((SECONDS - started))
first="$(grep -m 1 -E 'stand-in table|: skipped|timed out after' <<<"$out")"
if [ "$rc" -ne 1 ]; then
    fail_ "budget: exit $rc, expected 1: $out"
elif ! grep -q 'llama-block:tokens=1024,dtype=bf16 --devices 1: skipped (needs ~45 s, 1[0-2] s left)' <<<"$out" ||
    ! grep -q '| einsummable-run --backend cuda --workload ffn --scale small --devices 0,0 | FAIL (exit timed out after' <<<"$out" ||
    ! grep -q '| cuda_plan_test | skipped: needs ~90 s' <<<"$out" ||
    ! grep -q '^## GPU check: ' <<<"$out"; then
    fail_ "budget: skips, timeout or table missing:"
    printf '%s\n' "$out"
elif [[ "$first" != *"stand-in table"* ]]; then
    fail_ "budget: the bench table does not come first: $first"
elif [ "$took" -gt 40 ]; then
    fail_ "budget: a 12 s budget took $took s"
else
    pass_
fi

cli_summary
