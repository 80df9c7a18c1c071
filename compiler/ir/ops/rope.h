#pragma once

#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Rotary position embedding on x [tokens, ..., d_head] (d_head even), "rotate half" form: for
// i < d/2 with angle = position · theta^(-2i/d),
//   y[i] = x[i]·cos − x[i+d/2]·sin,   y[i+d/2] = x[i]·sin + x[i+d/2]·cos.
// A token's position is its absolute index minus the start of its packed sequence (attributes
// theta, default 10000, and sequence_ends). Since positions come from the absolute box a block
// covers, tokens can be split anywhere; the middle dimensions are shardable, d_head is not.
//
// With a second input `positions` (i32 or i64 [tokens], split with x's tokens) token t's
// position is positions[t] instead, given at run time: a decode step's new tokens continue
// their sequences' caches (their positions are the cache lengths), as transformers'
// position_ids. sequence_ends is then not an attribute; a position must lie in
// [0, kMaxPosition) (check_input_values).
//
// Optional frequency scaling for checkpoints trained for longer contexts, as transformers'
// rope_scaling defines it (attribute `scaling`, default "none"):
//   "linear" (`scaling_factor` f): every frequency divided by f;
//   "llama3" (`scaling_factor` f, `low_freq_factor` l, `high_freq_factor` h,
//   `original_max_position` L): with wavelength w = 2π/frequency, w > L/l divides by f, w < L/h
//   keeps the frequency, and between the two s = (L/w − l)/(h − l) blends them,
//   (1 − s)·freq/f + s·freq.
// The scaling attributes appear in the operator's attributes only when scaling is not "none".
class Rope final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "rope";
    // Input 1, the optional positions, holds integers.
    static constexpr bool kTakesIntegers = true;
    // Positions a kernel reads exactly: 2^24 (the CPU kernels read operands as f32).
    static constexpr int64_t kMaxPosition = int64_t{1} << 24;
    absl::string_view kind() const override { return kKind; }
    // Element-wise rotations: memory-bound.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    std::vector<ShardableIndex> shardable_indices() const override;
    // Dimension 0 (the positions) is a token; the middle dimensions are heads.
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    double flops(const FunctionSpec& function) const override;
    // The d_head/2 frequencies (radians per position), theta and scaling applied, computed once
    // by make: the reference and both backends' kernels read them here.
    const std::vector<double>& frequencies() const { return frequencies_; }
    // Whether positions come from input 1 (else from sequence_ends).
    bool has_positions() const { return input_types().size() == 2; }
    // A position outside [0, kMaxPosition) is an error naming the token and the position.
    absl::Status check_input_values(int input, absl::Span<const std::byte> bytes) const override;

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    Rope(Attributes attributes, std::vector<TensorType> inputs, std::vector<double> frequencies,
         std::vector<int64_t> sequence_ends);

    std::vector<double> frequencies_;
    std::vector<int64_t> sequence_ends_;
};

} // namespace einsummable::ir
