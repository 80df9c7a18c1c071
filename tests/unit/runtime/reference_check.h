#pragma once

// What the runtime tests of resident inputs and state and memory-fitted plans share: a tiny
// LLaMA, random values, and the largest relative error of a plan's saved outputs, read from one
// lease, against the double-precision reference.

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/spec_execution.h"
#include "compiler/workloads/llama.h"
#include "gtest/gtest.h"
#include "kernels/cpu/block_kernel.h"
#include "runtime/plan.h"

namespace einsummable::runtime::testing {

using Values = std::map<std::string, std::vector<float>>;

// A LLaMA small enough for tests of many plans: d_model 32, 4 query heads over 2 kv heads of 8,
// d_ff 48, f32; no sequences yet.
inline workloads::LlamaConfig tiny_llama() {
    workloads::LlamaConfig config;
    config.d_model = 32;
    config.heads_q = 4;
    config.heads_kv = 2;
    config.d_head = 8;
    config.d_ff = 48;
    config.dtype = ir::DType::f32;
    return config;
}

// n values uniform in [-1, 1) from `rng`.
inline std::vector<float> random_values(int64_t n, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> values(n);
    for (float& v : values) {
        v = uniform(rng);
    }
    return values;
}

// `inputs` are every graph input's values (what was loaded); the outputs come from `lease`,
// which must have executed.
inline double compare_to_reference(const Plan& plan, Plan::Lease& lease, const Values& inputs) {
    std::map<std::string, ir::HostTensor> host;
    for (const auto& [name, values] : inputs) {
        const ir::GraphTensor& tensor = plan.graph().tensor(*plan.graph().find_tensor(name));
        host.emplace(name, ir::HostTensor(tensor.type.box(),
                                          std::vector<double>(values.begin(), values.end())));
    }
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(plan.graph(), host, kernels::cpu::run_block);
    EXPECT_TRUE(reference.ok()) << reference.status();
    double worst = 0.0;
    for (const auto& [name, expected] : *reference) {
        absl::StatusOr<std::vector<float>> actual = lease.offload(name);
        EXPECT_TRUE(actual.ok()) << actual.status();
        if (!actual.ok()) {
            return 1e9;
        }
        worst = std::max(
            worst,
            ir::max_relative_error(
                ir::HostTensor(expected.box(), std::vector<double>(actual->begin(), actual->end())),
                expected));
    }
    return worst;
}

} // namespace einsummable::runtime::testing
