#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"
#include "kernels/cuda/device_libraries.h"
#include "kernels/kernel_registry.h"

namespace einsummable::kernels::cuda {

// The CUDA backend's kernels (runtime/cuda). A kernel is prepared once per function spec and
// device when a plan is prepared, and its work is then enqueued on a stream that the runtime
// captures into the plan's CUDA graph (docs/cuda.md). Preparing makes every choice — library
// algorithm and heuristic queries (cuBLASLt, cuDNN), launch shapes, constant tables it uploads
// — so enqueue() only launches.

// One launch of a prepared kernel. Pointers are device memory on the kernel's device (its
// arena and its scratch), fixed for the life of the plan's graph.
struct KernelLaunch {
    cudaStream_t stream = nullptr;
    // One pointer per input and output of the function spec, in the spec's order; each block is
    // dense row-major in its buffer's dtype.
    absl::Span<const void* const> inputs;
    absl::Span<void* const> outputs;
    // Per output, where its statistics go when the request asked for them
    // (KernelRequest::output_stats; f32, one per vector along the block's last dimension), else
    // null. May be empty when no output has statistics.
    absl::Span<void* const> output_stats;
    // scratch_bytes() of device memory, 256-byte aligned, that no other work uses while this
    // launch runs (null when scratch_bytes() is 0).
    void* scratch = nullptr;
};

// One function spec of one operator, prepared for one device.
class PreparedKernel {
public:
    virtual ~PreparedKernel() = default;

    // Device scratch enqueue() needs (packing buffers, library workspaces); 0 for none. The
    // runtime gives each device one scratch region as large as its largest kernel needs, and
    // orders the kernels that use it one after another.
    virtual int64_t scratch_bytes() const = 0;

    // Enqueues the work on launch.stream: kernel launches and library calls only — no
    // allocation, no synchronisation, no host access to device memory, no heuristic queries —
    // so it can be captured into a CUDA graph. Every CUDA, cuBLAS and cuDNN return code is
    // checked; errors name the operator and the call.
    virtual absl::Status enqueue(const KernelLaunch& launch) const = 0;

    // What runs, for explain and logs: "cublasLt bf16 gemm m=4096 n=4096 k=4096 batch=1".
    virtual std::string describe() const = 0;
};

// What a kernel is prepared for. The caller has made `libraries.physical_device` current.
struct KernelRequest {
    const ir::Operator* op = nullptr;
    const ir::FunctionSpec* function = nullptr;
    // The storage dtype of every input and output block (the buffers' dtypes).
    std::vector<ir::DType> input_dtypes;
    std::vector<ir::DType> output_dtypes;
    DeviceLibraries* libraries = nullptr;
    // Per output (or empty: none): the output is a partial result aggregated with a block ⊕
    // with statistics (ir::carries_stats: log_sum_exp, arg_max; physical::Buffer::stats), so
    // the kernel also writes its statistics. Only attention's and argmax's kernels take such
    // outputs; prepare_kernel refuses others.
    std::vector<bool> output_stats;

    // Whether output `idx` is marked for statistics.
    bool stats_for(size_t idx) const { return idx < output_stats.size() && output_stats[idx]; }
};

// One operator kind's kernel factory. Kernel files register their kinds in cuda_kernels()
// beside the kernels (kernel_registry.h). InvalidArgument naming the operator for a function
// spec or dtype the kernel cannot run; the status of the failing call otherwise.
using CudaKernelFactory =
    std::function<absl::StatusOr<std::unique_ptr<PreparedKernel>>(const KernelRequest& request)>;
KernelRegistry<CudaKernelFactory>& cuda_kernels();

// InvalidArgument "<op.describe()>: <message>": how kernel factories refuse a request.
absl::Status request_error(const ir::Operator& op, absl::string_view message);

// Prepares request.op's function spec through cuda_kernels(). Checks first what every kernel
// relies on: block counts, that every box lies inside its operand's type, and dtype counts.
// InvalidArgument naming the operator when its kind has no CUDA kernel.
absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_kernel(const KernelRequest& request);

} // namespace einsummable::kernels::cuda
