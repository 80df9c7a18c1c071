#pragma once

// What the runtime tests that run a lowered ExecGraph on a backend share: random f32 inputs for
// a graph, and one run that loads every input block, executes and reads every saved output.

#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/dense_block.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/physical/exec_graph.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/saved_output.h"

namespace einsummable::runtime::testing {

// Uniform f32 values in [-1, 1) for every graph input, as whole host tensors.
inline std::map<std::string, ir::HostTensor> random_inputs(const ir::Graph& graph, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::map<std::string, ir::HostTensor> inputs;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        std::vector<double> values(tensor.type.elements());
        for (double& v : values) {
            v = uniform(rng);
        }
        inputs.emplace(tensor.name, ir::HostTensor(tensor.type.box(), std::move(values)));
    }
    return inputs;
}

struct ExecRun {
    std::map<std::string, std::vector<float>> outputs; // every saved output, row-major
    std::vector<std::vector<int64_t>> bytes_moved;
};

// Prepares `exec` (f32 throughout) on `backend`, writes every input block, runs, and reads every
// saved output. Failures are test failures.
inline ExecRun run_on(Backend& backend, const physical::ExecGraph& exec,
                      const std::map<std::string, ir::HostTensor>& inputs) {
    ExecRun run;
    absl::StatusOr<std::unique_ptr<Executable>> exe = backend.prepare(exec);
    EXPECT_TRUE(exe.ok()) << exe.status();
    if (!exe.ok()) {
        return run;
    }
    for (const auto& [name, blocks] : exec.input_blocks) {
        const ir::HostTensor& whole = inputs.at(name);
        for (physical::BufferId id : blocks) {
            const physical::Buffer& buffer = exec.buffers[id];
            EXPECT_EQ(buffer.dtype, ir::DType::f32) << name;
            const ir::HostTensor block = whole.slice(buffer.box);
            const std::vector<float> values(block.values().begin(), block.values().end());
            absl::Status written = (*exe)->write_buffer(
                id, absl::MakeConstSpan(reinterpret_cast<const std::byte*>(values.data()),
                                        values.size() * sizeof(float)));
            EXPECT_TRUE(written.ok()) << name << ": " << written;
        }
    }
    absl::Status ran = (*exe)->run();
    EXPECT_TRUE(ran.ok()) << ran;
    for (const auto& [name, blocks] : exec.outputs) {
        // Each block from the device holding it, into its part of the whole tensor; f32, or i64
        // indices (argmax) read as f32.
        const ir::DType dtype = exec.buffers[blocks.front()].dtype;
        EXPECT_TRUE(dtype == ir::DType::f32 || dtype == ir::DType::i64) << name;
        absl::StatusOr<std::vector<std::byte>> bytes = read_saved_output(**exe, exec, name);
        EXPECT_TRUE(bytes.ok()) << name << ": " << bytes.status();
        const int64_t count =
            bytes.ok() ? static_cast<int64_t>(bytes->size()) / ir::dtype_size(dtype) : 0;
        std::vector<float> values(static_cast<size_t>(count));
        if (count > 0) {
            ir::to_f32(dtype, bytes->data(), values.data(), count);
        }
        run.outputs.emplace(name, std::move(values));
    }
    run.bytes_moved = (*exe)->bytes_moved();
    return run;
}

// run_on a CPU backend with the graph's devices.
inline ExecRun run_on_cpu(const physical::ExecGraph& exec,
                          const std::map<std::string, ir::HostTensor>& inputs) {
    std::unique_ptr<Backend> backend = cpu::make_cpu_backend({exec.devices, 1});
    return run_on(*backend, exec, inputs);
}

} // namespace einsummable::runtime::testing
