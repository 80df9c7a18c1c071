#include "compiler/ir/ops/einsum.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/support/status_macros.h"
#include "compiler/support/utf8.h"

namespace einsummable::ir {

namespace {

bool is_index_letter(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

absl::Status check_term(absl::string_view term, absl::string_view what) {
    for (size_t pos = 0; pos < term.size(); ++pos) {
        if (!is_index_letter(term[pos])) {
            // The whole character, never one byte of it: half a UTF-8 character makes the whole
            // message undecodable, and clients then show it as mojibake. (Every byte before it is
            // an ASCII letter, so `pos` counts characters too.)
            const size_t length = std::max<size_t>(1, support::utf8_char_length(term.substr(pos)));
            return absl::InvalidArgumentError(
                absl::StrCat("equation: ", what, " term '", support::utf8_or_escaped(term),
                             "' has '", support::utf8_or_escaped(term.substr(pos, length)),
                             "' at position ", pos, "; indices are single letters a-z, A-Z"));
        }
        if (term.find(term[pos]) != pos) {
            return absl::InvalidArgumentError(
                absl::StrCat("equation: index '", std::string(1, term[pos]), "' repeats in ", what,
                             " term '", term, "'"));
        }
    }
    return absl::OkStatus();
}

std::string letter(char c) {
    return std::string(1, c);
}

} // namespace

absl::StatusOr<OperatorPtr> Einsum::make(const Attributes& attributes,
                                         std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"equation", "join", "agg", "constant"};
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known(kKnown));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string equation, attributes.get_string("equation"));
    std::vector<std::string> sides = absl::StrSplit(equation, "->");
    if (sides.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("equation '", support::utf8_or_escaped(equation),
                         "' must have the form 'inputs->output', e.g. 'ij,jk->ik'"));
    }
    std::vector<std::string> input_terms = absl::StrSplit(sides[0], ',');
    const std::string& output_term = sides[1];
    if (inputs.empty()) {
        return absl::InvalidArgumentError("einsum needs at least one input");
    }
    if (input_terms.size() != inputs.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("equation '", support::utf8_or_escaped(equation), "' has ",
                         input_terms.size(), " input terms for ", inputs.size(), " inputs"));
    }
    // Index extents from the inputs; every later use of an index must agree.
    std::string indices;
    std::vector<Dim> index_dims;
    std::vector<std::string> first_use;
    for (size_t input_idx = 0; input_idx < inputs.size(); ++input_idx) {
        const std::string& term = input_terms[input_idx];
        const TensorType& type = inputs[input_idx];
        const std::string what = absl::StrCat("input ", input_idx);
        EINSUMMABLE_RETURN_IF_ERROR(check_term(term, what));
        if (static_cast<int>(term.size()) != type.rank()) {
            return absl::InvalidArgumentError(
                absl::StrCat("input ", input_idx, " has rank ", type.rank(), " (", type.to_string(),
                             ") but its equation term '", term, "' has ", term.size(), " indices"));
        }
        if (type.dtype != inputs[0].dtype) {
            return absl::InvalidArgumentError(
                absl::StrCat("dtype mismatch: input ", input_idx, " is ", dtype_name(type.dtype),
                             ", input 0 is ", dtype_name(inputs[0].dtype)));
        }
        for (int dim = 0; dim < type.rank(); ++dim) {
            const size_t known = indices.find(term[dim]);
            if (known == std::string::npos) {
                indices.push_back(term[dim]);
                index_dims.push_back(type.dims[dim]);
                first_use.push_back(absl::StrCat("input ", input_idx, " dimension ", dim));
            } else if (index_dims[known].size != type.dims[dim].size) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "shape mismatch on index '", letter(term[dim]), "': input ", input_idx,
                    " dimension ", dim, " ('", type.dims[dim].name, "') has size ",
                    type.dims[dim].size, ", expected ", index_dims[known].size, " as at ",
                    first_use[known], " ('", index_dims[known].name, "')"));
            }
        }
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_term(output_term, "output"));
    TensorType output{inputs[0].dtype, {}};
    for (char c : output_term) {
        const size_t known = indices.find(c);
        if (known == std::string::npos) {
            return absl::InvalidArgumentError(
                absl::StrCat("equation: output index '", letter(c), "' appears in no input"));
        }
        output.dims.push_back(index_dims[known]);
    }

    const std::string default_join = inputs.size() == 1 ? "identity" : "mul";
    EINSUMMABLE_ASSIGN_OR_RETURN(const std::string join_name,
                                 attributes.get_string_or("join", default_join));
    EINSUMMABLE_ASSIGN_OR_RETURN(const double constant, attributes.get_double_or("constant", 0.0));
    EINSUMMABLE_ASSIGN_OR_RETURN(const std::string agg_name,
                                 attributes.get_string_or("agg", "sum"));
    EINSUMMABLE_ASSIGN_OR_RETURN(ScalarOp join, ScalarOp::parse(join_name, constant));
    if (inputs.size() <= 2 && join.arity() != static_cast<int>(inputs.size())) {
        return absl::InvalidArgumentError(absl::StrCat("join '", join_name, "' takes ",
                                                       join.arity(), " operand(s), the einsum has ",
                                                       inputs.size(), " inputs"));
    }
    if (inputs.size() > 2 && join.fn != ScalarFn::mul) {
        return absl::InvalidArgumentError(absl::StrCat("join '", join_name, "' cannot combine ",
                                                       inputs.size(), " inputs; only mul can"));
    }
    absl::StatusOr<AggOp> agg = parse_agg_op(agg_name);
    if (!agg.ok() || *agg == AggOp::none || combines_blocks(*agg)) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown aggregation '", agg_name, "' (expected sum, max or min)"));
    }
    Attributes normalised = {{"equation", equation},
                             {"join", std::string(join.name())},
                             {"agg", std::string(agg_op_name(*agg))}};
    if (attributes.has("constant")) {
        normalised.set("constant", constant);
    }
    return OperatorPtr(new Einsum(std::move(normalised), std::move(inputs), std::move(output),
                                  std::move(input_terms), output_term, join, *agg));
}

Einsum::Einsum(Attributes attributes, std::vector<TensorType> inputs, TensorType output,
               std::vector<std::string> input_terms, std::string output_term, ScalarOp join,
               AggOp agg)
    : Operator(std::move(attributes), std::move(inputs), {std::move(output)}),
      input_terms_(std::move(input_terms)), output_term_(std::move(output_term)), join_(join),
      agg_(agg) {
    for (size_t input_idx = 0; input_idx < input_terms_.size(); ++input_idx) {
        for (size_t dim = 0; dim < input_terms_[input_idx].size(); ++dim) {
            const char c = input_terms_[input_idx][dim];
            if (indices_.find(c) == std::string::npos) {
                indices_.push_back(c);
                index_sizes_.push_back(input_types()[input_idx].dims[dim].size);
            }
        }
    }
}

bool Einsum::has_reduction() const {
    for (char c : indices_) {
        if (output_term_.find(c) == std::string::npos) {
            return true;
        }
    }
    return false;
}

KernelClass Einsum::kernel_class() const {
    if (input_terms_.size() != 2 || join_.fn != ScalarFn::mul || agg_ != AggOp::sum) {
        return KernelClass::elementwise;
    }
    for (char c : input_terms_[0]) {
        if (output_term_.find(c) == std::string::npos &&
            input_terms_[1].find(c) != std::string::npos) {
            return KernelClass::gemm;
        }
    }
    return KernelClass::elementwise;
}

std::vector<ShardableIndex> Einsum::shardable_indices() const {
    std::vector<ShardableIndex> out;
    for (size_t idx = 0; idx < indices_.size(); ++idx) {
        out.push_back(ShardableIndex::any(letter(indices_[idx]), index_sizes_[idx]));
    }
    return out;
}

std::vector<IndexRole> Einsum::index_roles(const OperandRoles& operands) const {
    auto is_weight = [&](size_t input) {
        return input < operands.weights.size() && operands.weights[input];
    };
    bool reads_weight = false;
    for (size_t input = 0; input < input_terms_.size(); ++input) {
        reads_weight = reads_weight || is_weight(input);
    }
    std::vector<IndexRole> roles;
    for (char c : indices_) {
        if (output_term_.find(c) == std::string::npos) {
            roles.push_back(IndexRole::contracted);
            continue;
        }
        std::optional<IndexRole> known; // from the first input whose producer declared one
        bool in_weight = false;
        for (size_t input = 0; input < input_terms_.size(); ++input) {
            const size_t dim = input_terms_[input].find(c);
            if (dim == std::string::npos) {
                continue;
            }
            in_weight = in_weight || is_weight(input);
            if (!known && input < operands.dims.size() && dim < operands.dims[input].size()) {
                known = operands.dims[input][dim];
            }
        }
        if (known) {
            roles.push_back(*known);
        } else {
            roles.push_back(reads_weight && !in_weight ? IndexRole::token : IndexRole::feature);
        }
    }
    return roles;
}

SpecLayout Einsum::layout() const {
    auto bind = [&](const std::string& term) {
        std::vector<DimBinding> bindings;
        for (char c : term) {
            bindings.push_back({static_cast<int>(indices_.find(c)), 1});
        }
        return bindings;
    };
    SpecLayout spec_layout;
    for (const std::string& term : input_terms_) {
        spec_layout.inputs.push_back(bind(term));
    }
    spec_layout.outputs.push_back(bind(output_term_));
    spec_layout.aggregations.push_back(has_reduction() ? agg_ : AggOp::none);
    return spec_layout;
}

double Einsum::flops(const FunctionSpec& function) const {
    // Extent of every index from the operand blocks that carry it.
    double points = 1.0;
    for (char c : indices_) {
        for (size_t input_idx = 0; input_idx < input_terms_.size(); ++input_idx) {
            const size_t dim = input_terms_[input_idx].find(c);
            if (dim != std::string::npos) {
                points *= static_cast<double>(function.inputs[input_idx][dim].size());
                break;
            }
        }
    }
    const double join_ops = std::max<double>(1.0, static_cast<double>(input_terms_.size()) - 1.0);
    return points * (join_ops + (has_reduction() ? 1.0 : 0.0));
}

std::vector<HostTensor> Einsum::compute(absl::Span<const HostTensor> inputs,
                                        const FunctionSpec& function) const {
    // Loop order: output indices outermost, reduced indices innermost.
    std::string order = output_term_;
    for (char c : indices_) {
        if (order.find(c) == std::string::npos) {
            order.push_back(c);
        }
    }
    const int num_loops = static_cast<int>(order.size());
    const int num_operands = static_cast<int>(inputs.size()) + 1; // inputs, then the output
    HostTensor output(function.outputs[0]);

    std::vector<int64_t> extents(num_loops, 1);
    // strides[operand][loop]: how far that operand's offset moves when the loop advances.
    std::vector<std::vector<int64_t>> strides(num_operands, std::vector<int64_t>(num_loops, 0));
    auto fill_strides = [&](int operand, const std::string& term, const Box& box) {
        int64_t stride = 1;
        for (int dim = box.rank() - 1; dim >= 0; --dim) {
            const int loop = static_cast<int>(order.find(term[dim]));
            strides[operand][loop] = stride;
            extents[loop] = box[dim].size();
            stride *= box[dim].size();
        }
    };
    for (size_t input_idx = 0; input_idx < inputs.size(); ++input_idx) {
        fill_strides(static_cast<int>(input_idx), input_terms_[input_idx], inputs[input_idx].box());
    }
    fill_strides(num_operands - 1, output_term_, output.box());
    for (int64_t extent : extents) {
        if (extent == 0) {
            return {std::move(output)};
        }
    }

    const bool reduces = has_reduction();
    if (reduces) {
        const double identity = agg_ == AggOp::sum   ? 0.0
                                : agg_ == AggOp::max ? -std::numeric_limits<double>::infinity()
                                                     : std::numeric_limits<double>::infinity();
        std::fill(output.data(), output.data() + output.size(), identity);
    }
    std::vector<int64_t> counter(num_loops, 0);
    std::vector<int64_t> offsets(num_operands, 0);
    double* out = output.data();
    while (true) {
        double value;
        if (inputs.size() == 1) {
            value = join_.apply(inputs[0].data()[offsets[0]]);
        } else {
            value = inputs[0].data()[offsets[0]];
            for (size_t input_idx = 1; input_idx < inputs.size(); ++input_idx) {
                value = join_.apply(value, inputs[input_idx].data()[offsets[input_idx]]);
            }
        }
        double& target = out[offsets[num_operands - 1]];
        target = reduces ? aggregate(agg_, target, value) : value;

        int loop = num_loops - 1;
        for (; loop >= 0; --loop) {
            for (int operand = 0; operand < num_operands; ++operand) {
                offsets[operand] += strides[operand][loop];
            }
            if (++counter[loop] < extents[loop]) {
                break;
            }
            for (int operand = 0; operand < num_operands; ++operand) {
                offsets[operand] -= strides[operand][loop] * extents[loop];
            }
            counter[loop] = 0;
        }
        if (loop < 0) {
            break;
        }
    }
    return {std::move(output)};
}

absl::StatusOr<OperatorPtr> make_matmul(const TensorType& lhs, const TensorType& rhs) {
    return Einsum::make({{"equation", std::string("ij,jk->ik")}}, {lhs, rhs});
}

namespace {

std::string identity_term(int rank) {
    std::string term;
    for (int dim = 0; dim < rank; ++dim) {
        term.push_back(static_cast<char>('a' + dim));
    }
    return term;
}

} // namespace

absl::StatusOr<OperatorPtr> make_unary(const TensorType& input, absl::string_view fn,
                                       double constant) {
    const std::string term = identity_term(input.rank());
    return Einsum::make({{"equation", absl::StrCat(term, "->", term)},
                         {"join", std::string(fn)},
                         {"constant", constant}},
                        {input});
}

absl::StatusOr<OperatorPtr> make_binary(const TensorType& lhs, const TensorType& rhs,
                                        absl::string_view fn) {
    const std::string term = identity_term(lhs.rank());
    return Einsum::make(
        {{"equation", absl::StrCat(term, ",", term, "->", term)}, {"join", std::string(fn)}},
        {lhs, rhs});
}

} // namespace einsummable::ir
