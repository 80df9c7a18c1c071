#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir/attributes.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/index_role.h"
#include "compiler/ir/interval_request.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/partial_block.h"
#include "compiler/ir/tensor_type.h"
#include "compiler/support/kernel_class.h"

namespace einsummable::ir {

using support::KernelClass;

// How one dimension of an operand follows the shardable indices: either it is never split
// (index == kWhole), or its interval is the chosen interval of `index` multiplied by `scale`
// (GQA's heads_q follows heads_kv with scale g; split_heads' h·d follows heads with scale d).
struct DimBinding {
    static constexpr int kWhole = -1;
    int index = kWhole;
    int64_t scale = 1;
};

// For every input and output, one binding per dimension, plus the ⊕ of every output. From it
// the base class builds product specs (every combination of intervals is one function spec).
struct SpecLayout {
    std::vector<std::vector<DimBinding>> inputs;
    std::vector<std::vector<DimBinding>> outputs;
    std::vector<AggOp> aggregations;
};

// An abstract operator (docs/design.md "Join-agg specs"): types, shardable indices, join-agg
// specs, FLOPs and a reference implementation on blocks. One subclass per operator, one file each,
// with its kind as a constant (`static constexpr absl::string_view kKind`, which kind() returns)
// and listed once in operator_registry.cc; kernels register by the class (kernels/
// kernel_registry.h). For the property every operator must satisfy, see
// tests/unit/ir/spec_property_test.cc; for the files a new operator touches, docs/operators.md
// "Adding an operator".
class Operator {
public:
    virtual ~Operator() = default;
    Operator(const Operator&) = delete;
    Operator& operator=(const Operator&) = delete;

    virtual absl::string_view kind() const = 0;
    // The attributes that, with kind() and the input types, recreate this operator.
    const Attributes& attributes() const { return attributes_; }
    const std::vector<TensorType>& input_types() const { return input_types_; }
    const std::vector<TensorType>& output_types() const { return output_types_; }
    int num_inputs() const { return static_cast<int>(input_types_.size()); }
    int num_outputs() const { return static_cast<int>(output_types_.size()); }

    virtual std::vector<ShardableIndex> shardable_indices() const = 0;
    // What each shardable index is (index_role.h), in index order, given what the graph knows
    // of the operands. An operator declares what its semantics say (attention: queries token,
    // kv heads head, keys context); an einsum, which cannot tell tokens from its letters, takes
    // its kept indices' roles from its operands' dimensions (graph_index_roles). The default
    // declares every index a feature.
    virtual std::vector<IndexRole> index_roles(const OperandRoles& operands) const;
    // The role of each dimension of each output, given the indices' `roles`: the role of the
    // index the dimension follows in layout() (heads_q follows heads_kv: head), feature where
    // it follows none (d_head, a normalised dimension).
    std::vector<std::vector<IndexRole>> output_roles(const std::vector<IndexRole>& roles) const;

    // The join-agg spec for one interval list per shardable index: one function spec per
    // combination of intervals, prod(|intervals|) of them, in row-major order of the
    // combinations — less the combinations that do no work where an operator leaves them out
    // (attention's key blocks wholly above the causal diagonal or in another sequence). Every
    // output box still appears. Errors name the index when the request does not partition it
    // or cuts where it may not be cut.
    absl::StatusOr<JoinAggSpec> spec(const IntervalRequest& request) const;
    // The spec with a single function spec covering every tensor whole.
    JoinAggSpec whole_spec() const;
    // The request the planner takes for `request`, a valid one with near-equal or balanced cuts
    // (ir::make_request): by default itself. Attention, asked for its keys whole, cuts them
    // where its queries are cut when every query block then meets only its own key block (the
    // blocks hold whole sequences): the same functions, each reading only the keys it needs.
    virtual IntervalRequest refine_request(IntervalRequest request) const { return request; }

    // Floating-point operations of one function spec.
    virtual double flops(const FunctionSpec& function) const = 0;
    // Bytes of input `input` that `function`'s kernel reads, for the kernel-time model
    // (logical::function_seconds, the whole-plan simulation): its whole block by default. An
    // operator that reads only part of a block says so (embedding reads the table rows its ids
    // select, not the vocabulary block).
    virtual double input_bytes_read(const FunctionSpec& function, int input) const;
    // The kind of kernel that runs it (compiler/support/kernel_class.h), whose efficiencies the
    // device model applies to its FLOPs and bytes (exprog::kernel_seconds). Every operator of
    // compiler/ir/ops/ declares its own; the default, other, takes the device's shared ones.
    virtual KernelClass kernel_class() const { return KernelClass::other; }

    // Runs the concrete operator on input blocks whose boxes are function.inputs and returns
    // one block per output, with boxes function.outputs.
    absl::StatusOr<std::vector<HostTensor>> reference(absl::Span<const HostTensor> inputs,
                                                      const FunctionSpec& function) const;

    // For an operator with an output aggregated with statistics (ir::carries_stats): one
    // function's partial results (partial_block.h), one per output (others carry none). The
    // same checks as reference(); Unimplemented for other operators.
    absl::StatusOr<std::vector<PartialBlock>> reference_partial(absl::Span<const HostTensor> inputs,
                                                                const FunctionSpec& function) const;

    // Checks the values of input `input` — its whole tensor's bytes, in its dtype — for what
    // the operator cannot compute on (embedding: an id outside the table), before a request
    // runs; the error names the position and the value. The default accepts any values.
    virtual absl::Status check_input_values(int input, absl::Span<const std::byte> bytes) const;

    // "einsum(equation=ij,jk->ik join=mul agg=sum)".
    std::string describe() const;

protected:
    Operator(Attributes attributes, std::vector<TensorType> input_types,
             std::vector<TensorType> output_types);

    // How operands follow the shardable indices; used by the default build_spec.
    virtual SpecLayout layout() const = 0;
    // Builds the spec for a validated request. The default is the product over layout().
    virtual JoinAggSpec build_spec(const IntervalRequest& request) const;
    // OK iff `function` is one that build_spec produces for some request: every bound dimension
    // carries the same interval of its index (times its scale) in every operand, and unbound
    // dimensions are whole. The default checks against layout().
    virtual absl::Status check_function(const FunctionSpec& function) const;
    // reference() after its checks: blocks match function.inputs, function passed
    // check_function.
    virtual std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                            const FunctionSpec& function) const = 0;
    // reference_partial() after its checks. The default is Unimplemented.
    virtual absl::StatusOr<std::vector<PartialBlock>>
    compute_partials(absl::Span<const HostTensor> inputs, const FunctionSpec& function) const;

private:
    // reference()'s checks of the blocks and the function spec.
    absl::Status check_blocks(absl::Span<const HostTensor> inputs,
                              const FunctionSpec& function) const;

    Attributes attributes_;
    std::vector<TensorType> input_types_;
    std::vector<TensorType> output_types_;
};

using OperatorPtr = std::unique_ptr<Operator>;

// Helpers shared by the operator files.

// A shardable index at any position for each listed dimension of `type`, named after the
// dimension ("tokens"; "dim3" when unnamed; suffixed "#k" when a name repeats).
std::vector<ShardableIndex> indices_for_dims(const TensorType& type, absl::Span<const int> dims);
// Binding of `type`'s dimensions: dims[k] follows index first_index + k, the rest are whole.
std::vector<DimBinding> bind_dims(const TensorType& type, absl::Span<const int> dims,
                                  int first_index = 0);
// The dimension numbers [begin, end).
std::vector<int> dim_range(int begin, int end);
// Bindings that leave every dimension of `type` whole.
std::vector<DimBinding> whole_dims(const TensorType& type);
// Prefixes an error message with the operand it concerns, for factories:
// "input 1 (f32[...]): <message>".
absl::Status operand_error(absl::string_view role, int operand_idx, const TensorType& type,
                           absl::string_view message);

} // namespace einsummable::ir
