#pragma once

#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// The k largest elements along the last dimension with their indices: x [..., vocab] (a
// floating-point dtype) → pairs [..., k, 2] (named "top_k" and "top_k_pair"): per row, k
// (value, index) pairs, best first — larger first, NaN larger than any number, ties to the
// smaller index (argmax's rule, so pair 0 is argmax's choice); like torch.topk(x, k, sorted=True)
// with its values and indices side by side. The pairs are f32 (f64 when x is f64): every index
// below 2^24 is exact in both, and values of f16 and bf16 are exact in f32. Attribute `k`
// (1 ≤ k ≤ vocab, at most 1024). What top-k sampling reads: k logits per row instead of the row.
//
// As a join followed by an aggregation: every index of x is shardable anywhere. A function
// given the vocabulary columns [a, b) writes its part's k best pairs (padded with (-inf, vocab)
// where the part has fewer than k elements), and AggOp::top_k merges two lists per row and
// keeps the first k (ir::merge_top_k): a plan can leave a vocabulary-parallel LM head's logits
// sharded and combine k pairs per block and row. The leading dimensions are tokens.
class TopK final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "top_k";
    static constexpr int64_t kMaxK = 1024;
    static constexpr int64_t kMaxVocabulary = int64_t{1} << 24;
    absl::string_view kind() const override { return kKind; }
    // One pass over x, each element compared against the row's k-th best so far.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    // Every dimension of x; the last is the vocabulary.
    std::vector<ShardableIndex> shardable_indices() const override;
    // Leading dimensions: token; the vocabulary: contracted (reduced away).
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    // One comparison per element read.
    double flops(const FunctionSpec& function) const override;
    int64_t k() const { return k_; }
    // The vocabulary: x's last dimension, and the index of the padding pair.
    int64_t vocab() const { return input_types()[0].dims.back().size; }
    // OK when `function`'s blocks line up as this operator's specs make them (the pairs' rows on
    // x's rows, their last two dimensions [k, 2] whole); else InvalidArgument naming the blocks.
    // The kernels check this before reading.
    absl::Status check_blocks_line_up(const FunctionSpec& function) const;

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    TopK(Attributes attributes, std::vector<TensorType> inputs, TensorType output, int64_t k);

    int64_t k_;
};

} // namespace einsummable::ir
