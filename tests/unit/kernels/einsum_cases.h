#pragma once

// Helpers shared by the CPU kernel tests: an einsum operator from its equation and input types,
// and random input types for an equation.

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ops/einsum.h"
#include "gtest/gtest.h"

namespace einsummable::kernels::cpu::einsum_cases {

// The einsum `equation` over `types` (optional join and aggregation); nullptr, with a test
// failure, when the operator cannot be made.
inline ir::OperatorPtr make_einsum(const std::string& equation, std::vector<ir::TensorType> types,
                                   const std::string& join = "", const std::string& agg = "") {
    ir::Attributes attributes = {{"equation", equation}};
    if (!join.empty()) {
        attributes.set("join", join);
    }
    if (!agg.empty()) {
        attributes.set("agg", agg);
    }
    absl::StatusOr<ir::OperatorPtr> op = ir::Einsum::make(attributes, std::move(types));
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

// f32 input types for `equation` with a random extent in [1, max_extent] per index letter (drawn
// in order of first appearance).
inline std::vector<ir::TensorType> random_types(const std::string& equation, std::mt19937_64& rng,
                                                int64_t max_extent) {
    const std::string inputs = equation.substr(0, equation.find("->"));
    std::uniform_int_distribution<int64_t> extent(1, max_extent);
    std::array<int64_t, 128> size_of{};
    std::vector<ir::TensorType> types(1);
    for (char c : inputs) {
        if (c == ',') {
            types.emplace_back();
            continue;
        }
        int64_t& size = size_of[static_cast<unsigned char>(c)];
        if (size == 0) {
            size = extent(rng);
        }
        types.back().dims.push_back({std::string(1, c), size});
    }
    return types;
}

} // namespace einsummable::kernels::cpu::einsum_cases
