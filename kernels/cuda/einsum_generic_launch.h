#pragma once

// The launch behind prepare_generic_einsum (einsum_generic.cc plans it, einsum_generic.cu holds
// the kernel). C++17 and free of the ir operator headers, which nvcc cannot compile as C++20.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"
#include "compiler/ir/dtype.h"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cuda {

struct KernelRequest; // kernel.h, which nvcc cannot compile

inline constexpr int kMaxGenericEinsumInputs = 8;
// Loops over the output's and over the reduced indices, each after dropping extent-1 indices
// and merging neighbours that every operand walks contiguously.
inline constexpr int kMaxGenericEinsumLoops = 8;

// ir::AggOp's sum, max and min, without join_agg_spec.h (C++20).
enum class EinsumAgg { sum, max, min };

// One function spec of an einsum as nested loops: the output's (dense row-major, the thread's
// linear index) and the reduced ones, innermost last in each; strides in elements per input.
// Passed to the kernel by value.
struct GenericEinsumPlan {
    int num_inputs = 0;
    ScalarMathFn join = ScalarMathFn::identity;
    double constant = 0.0;
    EinsumAgg agg = EinsumAgg::sum;
    int64_t output_count = 0;  // output elements (threads)
    int64_t reduced_count = 1; // points per output element; 0 writes the aggregate's 0
    int output_loops = 0;
    int reduced_loops = 0;
    int64_t output_extent[kMaxGenericEinsumLoops] = {};
    int64_t reduced_extent[kMaxGenericEinsumLoops] = {};
    int64_t output_stride[kMaxGenericEinsumInputs][kMaxGenericEinsumLoops] = {};
    int64_t reduced_stride[kMaxGenericEinsumInputs][kMaxGenericEinsumLoops] = {};
};

// Runs the plan on blocks stored in `dtype` (all operands alike): inputs[i] for i < num_inputs,
// output of output_count elements. Returns the launch's error; output_count 0 launches nothing.
cudaError_t launch_generic_einsum(const GenericEinsumPlan& plan, ir::DType dtype,
                                  const void* const* inputs, void* output, cudaStream_t stream);

// The plan prepare_generic_einsum launches for `request`, or InvalidArgument naming the
// operator (einsum_generic.cc).
absl::StatusOr<GenericEinsumPlan> plan_generic_einsum(const KernelRequest& request);

// The kernel's own per-element code run on the host over host blocks, one element after another:
// lets tests check the plans and the kernel's indexing on machines without a GPU. Tests only.
void emulate_generic_einsum(const GenericEinsumPlan& plan, ir::DType dtype,
                            const void* const* inputs, void* output);

} // namespace einsummable::kernels::cuda
