#pragma once

#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Row lookup: table [vocab, d] (a floating-point dtype), ids [tokens] (i32 or i64) →
// out [tokens, d] with out[t] = table[ids[t]], the table's dtype; the output's dimensions are
// named after ids' dimension 0 and the table's dimension 1. No attributes.
//
// As a join followed by an aggregation: the join pairs every token with every table row, keeps
// table[v] where ids[t] = v and zero elsewhere, and sums over v. So all three indices — tokens,
// d and vocab — are shardable anywhere: a function given the vocabulary rows [a, b) gathers the
// ids that fall in its range and writes zeros for the others, and the partial outputs of the
// vocabulary blocks add up to the lookup (the vocab-parallel embedding of Megatron), which
// lets a plan keep a large table sharded across devices instead of copying it whole.
//
// An id outside [0, vocab) is an error, never a read outside the table: check_input_values
// names the position and the id before a request runs, and the kernels refuse such an id too.
// The reference (compute) writes zeros for an id it could not look up.
class Embedding final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "embedding";
    // ids is i32 or i64; make checks the table itself.
    static constexpr bool kTakesIntegers = true;
    absl::string_view kind() const override { return kKind; }
    // A gather of rows: memory-bound.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    // (tokens, d, vocab).
    std::vector<ShardableIndex> shardable_indices() const override;
    // tokens: token; d: feature; vocab: contracted (summed over, absent from the output).
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    double flops(const FunctionSpec& function) const override;
    // The table: at most one row per token of the block (min(rows, tokens) · d), not the
    // vocabulary block, which a kernel-time model reading whole blocks would charge for a gather.
    double input_bytes_read(const FunctionSpec& function, int input) const override;
    // For ids (input 1): every id in [0, vocab); the error names the first position outside.
    absl::Status check_input_values(int input, absl::Span<const std::byte> bytes) const override;

    int64_t vocab() const { return input_types()[0].dims[0].size; }

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    Embedding(std::vector<TensorType> inputs, TensorType output);
};

// The first id of `ids` (the bytes of an i32 or i64 tensor) outside [0, vocab): its position
// and value; nullopt when all are inside. Shared by the operator's check and the kernels.
struct IdOutOfRange {
    int64_t position = 0;
    int64_t id = 0;
};
std::optional<IdOutOfRange> find_id_out_of_range(DType dtype, absl::Span<const std::byte> ids,
                                                 int64_t vocab);
// "position 7 holds id 70000, outside the table's 32000 rows [0, 32000)".
std::string describe_id_out_of_range(const IdOutOfRange& bad, int64_t vocab);

} // namespace einsummable::ir
