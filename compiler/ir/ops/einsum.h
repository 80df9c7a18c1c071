#pragma once

#include <string>
#include <vector>

#include "compiler/ir/operator.h"
#include "compiler/ir/scalar_op.h"

namespace einsummable::ir {

// EinDecomp's extended einsum: `equation` such as "ij,jk->ik" names an index per dimension;
// every point of the joined index space applies `join` to the operands' elements, and points
// that differ only in indices absent from the output are combined with `agg`. Covers matmul
// ("ij,jk->ik", mul, sum), batched matmul, element-wise unary and binary ops with broadcasting
// ("ij,j->ij"), reductions ("ij->i" with identity and sum/max) and transposes ("ij->ji").
// Every index is shardable at any position; splitting a reduced index makes output boxes repeat
// and `agg` is their ⊕.
//
// Attributes: equation (string), join (scalar op name; default mul, or identity for one input),
// agg (sum|max|min; default sum), constant (for scale, add_scalar, pow_scalar, leaky_relu).
class Einsum final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "einsum";
    absl::string_view kind() const override { return kKind; }
    std::vector<ShardableIndex> shardable_indices() const override;
    // An index absent from the output is contracted. A kept index takes the role its operands'
    // dimensions carry (the first input whose producer declared one): an element-wise op keeps
    // its input's tokens and features. Where none is known (graph inputs), an index of a weight
    // is a feature (a weight's columns), and an index in no weight of an einsum that reads one
    // is a token (the activation's rows against weights: x of x·w1); any other is a feature
    // (a product of activations without weights, e.g. a matrix chain, has no tokens).
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    double flops(const FunctionSpec& function) const override;
    // gemm for a contraction (two inputs multiplied, an index summed away that both inputs
    // carry: what the kernels hand to a GEMM library), elementwise for everything else
    // (element-wise ops, broadcasts, outer products, reductions of one input, transposes).
    KernelClass kernel_class() const override;

    const std::vector<std::string>& input_terms() const { return input_terms_; }
    const std::string& output_term() const { return output_term_; }
    const ScalarOp& join() const { return join_; }
    AggOp agg() const { return agg_; }
    // Indices in shardable order: first appearance across the inputs, then the output.
    const std::string& indices() const { return indices_; }
    bool has_reduction() const;

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    Einsum(Attributes attributes, std::vector<TensorType> inputs, TensorType output,
           std::vector<std::string> input_terms, std::string output_term, ScalarOp join, AggOp agg);

    std::vector<std::string> input_terms_;
    std::string output_term_;
    ScalarOp join_;
    AggOp agg_;
    std::string indices_;
    std::vector<int64_t> index_sizes_;
};

// Convenience constructors for the common einsums; each builds the attributes and calls make().
absl::StatusOr<OperatorPtr> make_matmul(const TensorType& lhs, const TensorType& rhs);
absl::StatusOr<OperatorPtr> make_unary(const TensorType& input, absl::string_view fn,
                                       double constant = 0.0);
// Element-wise binary op between two tensors of the same type.
absl::StatusOr<OperatorPtr> make_binary(const TensorType& lhs, const TensorType& rhs,
                                        absl::string_view fn);

} // namespace einsummable::ir
