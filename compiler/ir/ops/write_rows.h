#pragma once

#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Row scatter: state [R, ...] (a floating-point dtype), rows [n, ...] (state's dtype and trailing
// dimensions), slots [n] (i32 or i64) → out [R, ...] = state with out[slots[i]] = rows[i]; a
// slot of -1 writes its row nowhere (a padding token's). No attributes. What a decode step does
// to a key/value cache: each new token's keys written into the cache row its sequence owns
// (docs/generation.md).
//
// Shardable: the state's rows (index 0) and its trailing dimensions, anywhere. A function over
// the state rows [a, b) copies its state block and writes the rows whose slot falls in [a, b);
// every function reads all the rows and slots (a step's few). Nothing is aggregated.
//
// A slot outside [0, R) other than -1, or one written twice, is an error naming the positions,
// never a write outside the state: check_input_values refuses it before a request runs, and the
// kernels skip it. The output is a new tensor, unless the state is resident (docs/runtime.md
// "Resident state"): then the output is the state's own blocks, written in place, and the state
// keeps the rows for the next run.
class WriteRows final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "write_rows";
    // The slot of a row written nowhere.
    static constexpr int64_t kNotWritten = -1;
    // slots is i32 or i64; make checks the others.
    static constexpr bool kTakesIntegers = true;
    absl::string_view kind() const override { return kKind; }
    // A copy and a scatter: memory-bound.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    // (rows of the state, then its trailing dimensions).
    std::vector<ShardableIndex> shardable_indices() const override;
    // The state's rows: token; the rest: feature.
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    double flops(const FunctionSpec& function) const override;
    // For slots (input 2): each in [0, R) (or -1: not written) and none twice; the error names
    // the first culprit.
    absl::Status check_input_values(int input, absl::Span<const std::byte> bytes) const override;

    int64_t state_rows() const { return input_types()[0].dims[0].size; }

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    WriteRows(std::vector<TensorType> inputs, TensorType output);
};

// The input whose buffer output 0 of `op` may take — an update in place: every function's
// output block equals its block of that input, and the kernel runs correctly with the two
// aliased, writing only what changes. A runtime uses it only for a resident state
// (docs/runtime.md "Resident state": the input read by nothing else, which then holds output 0
// after a run). write_rows: its state (0); every other operator: -1.
inline int in_place_input(const Operator& op) {
    return dynamic_cast<const WriteRows*>(&op) != nullptr ? 0 : -1;
}

} // namespace einsummable::ir
