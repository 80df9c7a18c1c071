#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"
#include "kernels/cuda/kernel.h"
#include "tests/unit/gpu_required.h"

// What the CUDA kernel tests share: whether a GPU is present, and one function spec of an
// operator run through the CUDA kernel registry and through the CPU kernels on the same values,
// so that every GPU kernel test checks against the CPU backend's answers.

namespace einsummable::kernels::cuda::testing {

// True when a CUDA GPU is visible (kernels/cuda/device_info.h). Tests that need one begin with
// EINSUMMABLE_SKIP_WITHOUT_GPU().
bool gpu_present();

#define EINSUMMABLE_SKIP_WITHOUT_GPU()                                                             \
    do {                                                                                           \
        if (!::einsummable::kernels::cuda::testing::gpu_present()) {                               \
            EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED("no CUDA GPU: this test runs on a machine with "  \
                                                 "one (scripts/gpu-check)");                       \
        }                                                                                          \
    } while (0)

// A seed per test case that is the same on every platform: the base seed
// (ir::testing::test_seed, EINSUMMABLE_TEST_SEED) plus FNV-1a of `name`. Prints both, so that a
// failure replays with the base seed it names.
uint64_t seed_for(const std::string& name);

// "[0, 4) x [0, 8), [0, 8) x [0, 2) -> [0, 4) x [0, 2)": a function spec's boxes, for traces.
std::string function_string(const ir::FunctionSpec& function);

// Host values of one function spec's blocks, as f32, in the spec's order (each dense row-major,
// of its box's volume).
using Blocks = std::vector<std::vector<float>>;

// Rounds every value to `dtype` and back (what storing a block in that dtype keeps).
Blocks round_to(ir::DType dtype, const Blocks& blocks);

// Runs `function` of `op` on GPU 0 through prepare_kernel (kernel.h): inputs are stored in
// `dtype`, outputs read back in `dtype` and widened to f32. The status of preparing or running
// the kernel, or of the CUDA calls around it (naming the call).
absl::StatusOr<Blocks> run_cuda(const ir::Operator& op, const ir::FunctionSpec& function,
                                ir::DType dtype, const Blocks& inputs);
// The same with one particular factory (prepare_generic_einsum, prepare_flash_attention, ...)
// instead of the kind's registered one; prepare_kernel's checks are skipped.
absl::StatusOr<Blocks> run_cuda_with(const CudaKernelFactory& factory, const ir::Operator& op,
                                     const ir::FunctionSpec& function, ir::DType dtype,
                                     const Blocks& inputs);

// The CPU backend's answer for the same call: inputs rounded to `dtype`, the f32 CPU kernel
// (kernels/cpu run_f32), outputs rounded to `dtype`.
absl::StatusOr<Blocks> run_cpu(const ir::Operator& op, const ir::FunctionSpec& function,
                               ir::DType dtype, const Blocks& inputs);

// Attention's partial result over a block of keys (ir::AggOp::log_sum_exp): the same calls with
// the output marked for statistics (KernelRequest::output_stats), returning the output and then
// its f32 log-sum-exp statistics as a second block. The CPU side is partial_f32.
absl::StatusOr<Blocks> run_cuda_partial(const CudaKernelFactory& factory, const ir::Operator& op,
                                        const ir::FunctionSpec& function, ir::DType dtype,
                                        const Blocks& inputs);
absl::StatusOr<Blocks> run_cpu_partial(const ir::Operator& op, const ir::FunctionSpec& function,
                                       ir::DType dtype, const Blocks& inputs);

// Largest |a - b| / (atol + rtol * |b|) over every element; > 1 means out of tolerance. Block
// counts and sizes must match (a mismatch returns +inf). NaN in either gives +inf unless both
// are NaN at the same place.
double worst_error(const Blocks& actual, const Blocks& expected, double atol, double rtol);

// Tolerances for comparing a GPU kernel with the CPU kernel in `dtype`: the storage rounding of
// the dtype plus accumulation-order differences.
struct Tolerance {
    double atol;
    double rtol;
};
Tolerance tolerance_for(ir::DType dtype);

// The input blocks of `function` cut from whole input tensors.
Blocks blocks_of(const std::vector<ir::HostTensor>& whole, const ir::FunctionSpec& function);

// The first element where `actual` and `expected` differ beyond `tolerance`, for a failure
// message.
std::string first_mismatch(const Blocks& actual, const Blocks& expected,
                           const Tolerance& tolerance);

} // namespace einsummable::kernels::cuda::testing
