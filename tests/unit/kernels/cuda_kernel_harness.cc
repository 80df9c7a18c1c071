#include "tests/unit/kernels/cuda_kernel_harness.h"

#include <cmath>
#include <cstddef>
#include <iostream>
#include <limits>
#include <memory>

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "compiler/ir/dense_block.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/partial_block.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_libraries.h"
#include "kernels/cuda/kernel.h"
#include "tests/unit/ir/random_cases.h"

namespace einsummable::kernels::cuda::testing {

uint64_t seed_for(const std::string& name) {
    uint64_t hash = 1469598103934665603ull;
    for (char c : name) {
        hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    const uint64_t base = ir::testing::test_seed();
    const uint64_t seed = base + hash % 1000003;
    std::cout << "seed " << seed << " for '" << name << "' (replay: EINSUMMABLE_TEST_SEED=" << base
              << ")\n";
    return seed;
}
namespace {

// One device allocation, freed on destruction.
struct DeviceBytes {
    void* data = nullptr;
    ~DeviceBytes() {
        if (data != nullptr) {
            cudaFree(data);
        }
    }
};

std::vector<std::byte> to_storage(ir::DType dtype, const std::vector<float>& values) {
    std::vector<std::byte> bytes(values.size() * ir::dtype_size(dtype));
    ir::from_f32(dtype, values.data(), bytes.data(), static_cast<int64_t>(values.size()));
    return bytes;
}

std::vector<float> from_storage(ir::DType dtype, const std::vector<std::byte>& bytes) {
    std::vector<float> values(bytes.size() / ir::dtype_size(dtype));
    ir::to_f32(dtype, bytes.data(), values.data(), static_cast<int64_t>(values.size()));
    return values;
}

// The storage dtype of input `idx` when the test runs `op` in `dtype`: integer inputs
// (embedding's ids) keep their own.
ir::DType input_dtype(const ir::Operator& op, size_t idx, ir::DType dtype) {
    const ir::DType own = op.input_types()[idx].dtype;
    return ir::is_integer(own) ? own : dtype;
}

// The storage dtype of output `idx` when the test runs `op` in `dtype`: that output's own dtype
// once `op` is made again with its floating-point inputs in `dtype` — argmax's indices stay i64,
// top_k's pairs are f32 (f64 for f64) whatever x's dtype, the rest follow `dtype`. `dtype` when
// the operator cannot be made so.
ir::DType output_dtype(const ir::Operator& op, size_t idx, ir::DType dtype) {
    std::vector<ir::TensorType> inputs = op.input_types();
    for (ir::TensorType& type : inputs) {
        if (!ir::is_integer(type.dtype)) {
            type.dtype = dtype;
        }
    }
    absl::StatusOr<ir::OperatorPtr> made = ir::make_operator(op.kind(), op.attributes(), inputs);
    return made.ok() ? (*made)->output_types()[idx].dtype : dtype;
}

// Each output block rounded to what its storage dtype keeps.
Blocks round_outputs(const ir::Operator& op, ir::DType dtype, const Blocks& outputs) {
    Blocks rounded;
    for (size_t idx = 0; idx < outputs.size(); ++idx) {
        rounded.push_back(round_to(output_dtype(op, idx, dtype), {outputs[idx]})[0]);
    }
    return rounded;
}

// Each input block rounded to what its storage dtype keeps.
Blocks round_inputs(const ir::Operator& op, ir::DType dtype, const Blocks& inputs) {
    Blocks rounded;
    rounded.reserve(inputs.size());
    for (size_t idx = 0; idx < inputs.size(); ++idx) {
        const ir::DType storage = input_dtype(op, idx, dtype);
        rounded.push_back(from_storage(storage, to_storage(storage, inputs[idx])));
    }
    return rounded;
}

// run_cuda_with and run_cuda_partial: `stats` marks the outputs for log-sum-exp statistics and
// returns them after the outputs.
absl::StatusOr<Blocks> run_on_gpu(const CudaKernelFactory& factory, const ir::Operator& op,
                                  const ir::FunctionSpec& function, ir::DType dtype,
                                  const Blocks& inputs, bool stats);

} // namespace

bool gpu_present() {
    absl::StatusOr<std::vector<DeviceInfo>> devices = list_devices();
    return devices.ok() && !devices->empty();
}

Blocks round_to(ir::DType dtype, const Blocks& blocks) {
    Blocks rounded;
    rounded.reserve(blocks.size());
    for (const std::vector<float>& block : blocks) {
        rounded.push_back(from_storage(dtype, to_storage(dtype, block)));
    }
    return rounded;
}

absl::StatusOr<Blocks> run_cuda(const ir::Operator& op, const ir::FunctionSpec& function,
                                ir::DType dtype, const Blocks& inputs) {
    return run_cuda_with(&prepare_kernel, op, function, dtype, inputs);
}

absl::StatusOr<Blocks> run_cuda_with(const CudaKernelFactory& factory, const ir::Operator& op,
                                     const ir::FunctionSpec& function, ir::DType dtype,
                                     const Blocks& inputs) {
    return run_on_gpu(factory, op, function, dtype, inputs, /*stats=*/false);
}

absl::StatusOr<Blocks> run_cuda_partial(const CudaKernelFactory& factory, const ir::Operator& op,
                                        const ir::FunctionSpec& function, ir::DType dtype,
                                        const Blocks& inputs) {
    if (function.outputs.size() != 1) {
        return absl::InvalidArgumentError("run_cuda_partial: one output block expected");
    }
    return run_on_gpu(factory, op, function, dtype, inputs, /*stats=*/true);
}

namespace {

absl::StatusOr<Blocks> run_on_gpu(const CudaKernelFactory& factory, const ir::Operator& op,
                                  const ir::FunctionSpec& function, ir::DType dtype,
                                  const Blocks& inputs, bool stats) {
    if (absl::Status status = cuda_status(cudaSetDevice(0), "cudaSetDevice(0)"); !status.ok()) {
        return status;
    }
    DeviceLibraries libraries(0);
    KernelRequest request;
    request.op = &op;
    request.function = &function;
    for (size_t idx = 0; idx < function.inputs.size(); ++idx) {
        request.input_dtypes.push_back(input_dtype(op, idx, dtype));
    }
    for (size_t idx = 0; idx < function.outputs.size(); ++idx) {
        request.output_dtypes.push_back(output_dtype(op, idx, dtype));
    }
    if (stats) {
        request.output_stats.assign(function.outputs.size(), true);
    }
    request.libraries = &libraries;
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel = factory(request);
    if (!kernel.ok()) {
        return kernel.status();
    }
    if (inputs.size() != function.inputs.size()) {
        return absl::InvalidArgumentError("run_cuda: one host block per input expected");
    }
    std::vector<DeviceBytes> device_inputs(inputs.size());
    std::vector<const void*> input_pointers;
    for (size_t idx = 0; idx < inputs.size(); ++idx) {
        const std::vector<std::byte> bytes = to_storage(input_dtype(op, idx, dtype), inputs[idx]);
        if (absl::Status status =
                cuda_status(cudaMalloc(&device_inputs[idx].data, bytes.size() + 1), "cudaMalloc");
            !status.ok()) {
            return status;
        }
        if (absl::Status status = cuda_status(cudaMemcpy(device_inputs[idx].data, bytes.data(),
                                                         bytes.size(), cudaMemcpyHostToDevice),
                                              "cudaMemcpy to device");
            !status.ok()) {
            return status;
        }
        input_pointers.push_back(device_inputs[idx].data);
    }
    std::vector<DeviceBytes> device_outputs(function.outputs.size());
    std::vector<void*> output_pointers;
    std::vector<void*> stats_pointers;
    for (size_t idx = 0; idx < function.outputs.size(); ++idx) {
        // With statistics: the elements, padded to 4 bytes, then the f32 statistics, as a
        // physical::Buffer with stats lays them out.
        const size_t bytes = static_cast<size_t>(
            ir::block_bytes(function.outputs[idx], request.output_dtypes[idx], stats));
        if (absl::Status status =
                cuda_status(cudaMalloc(&device_outputs[idx].data, bytes + 1), "cudaMalloc");
            !status.ok()) {
            return status;
        }
        // NaN-filled, so that an element the kernel never writes shows up.
        if (absl::Status status =
                cuda_status(cudaMemset(device_outputs[idx].data, 0xff, bytes), "cudaMemset");
            !status.ok()) {
            return status;
        }
        output_pointers.push_back(device_outputs[idx].data);
        stats_pointers.push_back(
            stats ? static_cast<std::byte*>(device_outputs[idx].data) +
                        ir::stats_offset(function.outputs[idx], request.output_dtypes[idx])
                  : nullptr);
    }
    DeviceBytes scratch;
    if ((*kernel)->scratch_bytes() > 0) {
        if (absl::Status status = cuda_status(
                cudaMalloc(&scratch.data, static_cast<size_t>((*kernel)->scratch_bytes())),
                "cudaMalloc scratch");
            !status.ok()) {
            return status;
        }
    }
    cudaStream_t stream = nullptr;
    if (absl::Status status = cuda_status(cudaStreamCreate(&stream), "cudaStreamCreate");
        !status.ok()) {
        return status;
    }
    KernelLaunch launch;
    launch.stream = stream;
    launch.inputs = input_pointers;
    launch.outputs = output_pointers;
    if (stats) {
        launch.output_stats = stats_pointers;
    }
    launch.scratch = scratch.data;
    absl::Status run_status = (*kernel)->enqueue(launch);
    absl::Status sync_status = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cudaStreamDestroy(stream);
    if (!run_status.ok()) {
        return run_status;
    }
    if (!sync_status.ok()) {
        return sync_status;
    }
    Blocks outputs;
    for (size_t idx = 0; idx < function.outputs.size(); ++idx) {
        const ir::DType storage = request.output_dtypes[idx];
        std::vector<std::byte> bytes(
            static_cast<size_t>(function.outputs[idx].volume() * ir::dtype_size(storage)));
        if (absl::Status status = cuda_status(cudaMemcpy(bytes.data(), device_outputs[idx].data,
                                                         bytes.size(), cudaMemcpyDeviceToHost),
                                              "cudaMemcpy to host");
            !status.ok()) {
            return status;
        }
        outputs.push_back(from_storage(storage, bytes));
    }
    for (size_t idx = 0; stats && idx < function.outputs.size(); ++idx) {
        std::vector<float> lse(static_cast<size_t>(ir::stats_count(function.outputs[idx])));
        if (absl::Status status =
                cuda_status(cudaMemcpy(lse.data(), stats_pointers[idx], lse.size() * sizeof(float),
                                       cudaMemcpyDeviceToHost),
                            "cudaMemcpy of the statistics to host");
            !status.ok()) {
            return status;
        }
        outputs.push_back(std::move(lse));
    }
    return outputs;
}

} // namespace

absl::StatusOr<Blocks> run_cpu(const ir::Operator& op, const ir::FunctionSpec& function,
                               ir::DType dtype, const Blocks& inputs) {
    const Blocks rounded = round_inputs(op, dtype, inputs);
    std::vector<const float*> input_pointers;
    for (const std::vector<float>& block : rounded) {
        input_pointers.push_back(block.data());
    }
    Blocks outputs;
    for (const ir::Box& box : function.outputs) {
        outputs.emplace_back(static_cast<size_t>(box.volume()));
    }
    std::vector<float*> output_pointers;
    for (std::vector<float>& block : outputs) {
        output_pointers.push_back(block.data());
    }
    if (absl::Status status = cpu::run_f32(op, function, input_pointers, output_pointers);
        !status.ok()) {
        return status;
    }
    return round_outputs(op, dtype, outputs);
}

absl::StatusOr<Blocks> run_cpu_partial(const ir::Operator& op, const ir::FunctionSpec& function,
                                       ir::DType dtype, const Blocks& inputs) {
    if (function.outputs.size() != 1) {
        return absl::InvalidArgumentError("run_cpu_partial: one output block expected");
    }
    const Blocks rounded = round_inputs(op, dtype, inputs);
    std::vector<const float*> input_pointers;
    for (const std::vector<float>& block : rounded) {
        input_pointers.push_back(block.data());
    }
    std::vector<float> values(static_cast<size_t>(function.outputs[0].volume()));
    std::vector<float> lse(static_cast<size_t>(ir::stats_count(function.outputs[0])));
    if (absl::Status status =
            cpu::partial_f32(op, function, input_pointers, values.data(), lse.data());
        !status.ok()) {
        return status;
    }
    return Blocks{round_outputs(op, dtype, {values})[0], std::move(lse)};
}

double worst_error(const Blocks& actual, const Blocks& expected, double atol, double rtol) {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    if (actual.size() != expected.size()) {
        return kInf;
    }
    double worst = 0.0;
    for (size_t block = 0; block < actual.size(); ++block) {
        if (actual[block].size() != expected[block].size()) {
            return kInf;
        }
        for (size_t idx = 0; idx < actual[block].size(); ++idx) {
            const double a = actual[block][idx];
            const double b = expected[block][idx];
            if (std::isnan(a) || std::isnan(b)) {
                if (std::isnan(a) != std::isnan(b)) {
                    return kInf;
                }
                continue;
            }
            if (std::isinf(a) || std::isinf(b)) {
                if (a != b) {
                    return kInf;
                }
                continue;
            }
            worst = std::max(worst, std::abs(a - b) / (atol + rtol * std::abs(b)));
        }
    }
    return worst;
}

Tolerance tolerance_for(ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return {2e-3, 4e-3};
    case ir::DType::bf16:
        return {1.6e-2, 3.2e-2};
    case ir::DType::f32:
        return {1e-4, 1e-4};
    case ir::DType::f64:
        // The GPU computes f64 in f64, but the CPU reference (run_cpu) computes in f32.
        return {1e-4, 1e-4};
    case ir::DType::i32: // ids and indices: exact
    case ir::DType::i64:
        return {0.0, 0.0};
    }
    return {0.0, 0.0};
}

std::string function_string(const ir::FunctionSpec& function) {
    std::string out;
    for (const ir::Box& box : function.inputs) {
        absl::StrAppend(&out, out.empty() ? "" : ", ", box.to_string());
    }
    absl::StrAppend(&out, " ->");
    for (const ir::Box& box : function.outputs) {
        absl::StrAppend(&out, " ", box.to_string());
    }
    return out;
}

Blocks blocks_of(const std::vector<ir::HostTensor>& whole, const ir::FunctionSpec& function) {
    Blocks blocks;
    for (size_t idx = 0; idx < function.inputs.size(); ++idx) {
        const ir::HostTensor block = whole[idx].slice(function.inputs[idx]);
        blocks.emplace_back(block.values().begin(), block.values().end());
    }
    return blocks;
}

std::string first_mismatch(const Blocks& actual, const Blocks& expected,
                           const Tolerance& tolerance) {
    for (size_t block = 0; block < actual.size() && block < expected.size(); ++block) {
        for (size_t idx = 0; idx < actual[block].size() && idx < expected[block].size(); ++idx) {
            const Blocks one_actual = {{actual[block][idx]}};
            const Blocks one_expected = {{expected[block][idx]}};
            if (worst_error(one_actual, one_expected, tolerance.atol, tolerance.rtol) > 1.0) {
                return absl::StrCat("output ", block, " element ", idx, ": cuda ",
                                    actual[block][idx], ", cpu ", expected[block][idx]);
            }
        }
    }
    return "block counts or sizes differ";
}

} // namespace einsummable::kernels::cuda::testing
