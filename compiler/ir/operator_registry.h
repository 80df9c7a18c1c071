#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Builds an operator from its attributes and input types; errors name the attribute, input or
// dimension at fault.
using OperatorFactory = absl::StatusOr<OperatorPtr> (*)(const Attributes& attributes,
                                                        std::vector<TensorType> inputs);

struct OperatorKind {
    absl::string_view name;
    OperatorFactory make;
    // Whether the factory is shown integer (i32, i64) inputs: only an operator that declares
    // `static constexpr bool kTakesIntegers = true` (embedding, for its ids) checks them itself;
    // make_operator refuses integer inputs to every other kind, naming the input.
    bool takes_integers = false;

    // The entry of operator class Op: its kind constant Op::kKind, its factory Op::make and
    // Op::kTakesIntegers where it declares one.
    template <typename Op>
    static constexpr OperatorKind of() {
        if constexpr (requires { Op::kTakesIntegers; }) {
            return {Op::kKind, &Op::make, Op::kTakesIntegers};
        } else {
            return {Op::kKind, &Op::make, false};
        }
    }
};

// Every operator kind, in the order of operator_registry.cc. Adding an operator is its files in
// compiler/ir/ops/ plus one line there (docs/operators.md "Adding an operator").
absl::Span<const OperatorKind> operator_kinds();

absl::StatusOr<OperatorPtr> make_operator(absl::string_view kind, const Attributes& attributes,
                                          std::vector<TensorType> inputs);

} // namespace einsummable::ir
