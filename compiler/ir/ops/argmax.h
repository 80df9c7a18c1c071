#pragma once

#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// The index of the largest element along the last dimension: x [..., vocab] (a floating-point
// dtype) → indices [..., 1] (i64; the reduced dimension kept with size 1, named "argmax"), like
// torch.argmax(x, dim=-1, keepdim=True). The first largest element wins a tie; NaN counts as
// larger than any number (the first NaN wins; an einsum max over the same dimension gives the
// element itself, NaN then); a row of -inf gives 0. No attributes. Greedy decoding's next token:
// a plan returns one id per row instead of the whole row of logits.
//
// As a join followed by an aggregation: every index of x is shardable anywhere. A function
// given the vocabulary columns [a, b) finds the largest element of its part; its partial result
// is that element's index, carried with the element itself as the statistic (a (value, index)
// pair, ir::PartialBlock), and AggOp::arg_max keeps the larger pair (ties to the smaller index:
// ir::combine_arg_max). So a plan can leave a vocabulary-parallel LM head's logits sharded and
// combine n pairs per row instead of gathering the rows. The leading dimensions are tokens.
//
// The vocabulary may hold at most 2^24 entries: the CPU backend computes in f32, where every
// index below 2^24 is exact.
class ArgMax final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "argmax";
    static constexpr int64_t kMaxVocabulary = int64_t{1} << 24;
    absl::string_view kind() const override { return kKind; }
    // One pass over x, reading each element once: memory-bound.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    // Every dimension of x; the last is the vocabulary.
    std::vector<ShardableIndex> shardable_indices() const override;
    // Leading dimensions: token; the vocabulary: contracted (reduced away).
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    // One comparison per element read.
    double flops(const FunctionSpec& function) const override;
    // OK when `function`'s blocks line up as this operator's specs make them (the indices' block
    // on x's rows, its last dimension 1); else InvalidArgument naming the blocks. The kernels
    // check this before reading.
    absl::Status check_blocks_line_up(const FunctionSpec& function) const;

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;
    absl::StatusOr<std::vector<PartialBlock>>
    compute_partials(absl::Span<const HostTensor> inputs,
                     const FunctionSpec& function) const override;

private:
    ArgMax(std::vector<TensorType> inputs, TensorType output);
};

} // namespace einsummable::ir
