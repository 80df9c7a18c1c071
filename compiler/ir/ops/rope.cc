#include "compiler/ir/ops/rope.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/embedding.h"
#include "compiler/ir/ops/sequence_ends.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

namespace {

// The d/2 frequencies of normalised rope attributes for a head dimension `head_dim`.
absl::StatusOr<std::vector<double>> rope_frequencies(const Attributes& attributes,
                                                     int64_t head_dim) {
    EINSUMMABLE_ASSIGN_OR_RETURN(double theta, attributes.get_double_or("theta", 10000.0));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string scaling, attributes.get_string_or("scaling", "none"));
    EINSUMMABLE_ASSIGN_OR_RETURN(double factor, attributes.get_double_or("scaling_factor", 1.0));
    EINSUMMABLE_ASSIGN_OR_RETURN(double low, attributes.get_double_or("low_freq_factor", 1.0));
    EINSUMMABLE_ASSIGN_OR_RETURN(double high, attributes.get_double_or("high_freq_factor", 4.0));
    EINSUMMABLE_ASSIGN_OR_RETURN(int64_t original,
                                 attributes.get_int_or("original_max_position", 8192));
    const double context = static_cast<double>(original);
    std::vector<double> frequencies(static_cast<size_t>(head_dim / 2));
    for (size_t i = 0; i < frequencies.size(); ++i) {
        double frequency =
            std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        if (scaling == "linear") {
            frequency /= factor;
        } else if (scaling == "llama3") {
            const double wavelength = 2.0 * std::numbers::pi / frequency;
            if (wavelength > context / low) {
                frequency /= factor;
            } else if (wavelength >= context / high) {
                const double smooth = (context / wavelength - low) / (high - low);
                frequency = (1.0 - smooth) * frequency / factor + smooth * frequency;
            }
        }
        frequencies[i] = frequency;
    }
    return frequencies;
}

} // namespace

absl::StatusOr<OperatorPtr> Rope::make(const Attributes& attributes,
                                       std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"theta",
                                                   "sequence_ends",
                                                   "scaling",
                                                   "scaling_factor",
                                                   "low_freq_factor",
                                                   "high_freq_factor",
                                                   "original_max_position"};
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known(kKnown));
    if (inputs.size() != 1 && inputs.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("rope takes 1 input (x) or 2 (x, positions), got ", inputs.size()));
    }
    const TensorType& x = inputs[0];
    if (x.rank() < 2) {
        return operand_error("input", 0, x, "rope needs [tokens, ..., d_head]");
    }
    if (is_integer(x.dtype)) {
        return operand_error(
            "input", 0, x,
            absl::StrCat("rope rotates floating-point values, not ", dtype_name(x.dtype)));
    }
    const bool positions = inputs.size() == 2;
    if (positions) {
        const TensorType& given = inputs[1];
        if (given.rank() != 1 || !is_integer(given.dtype)) {
            return operand_error("input", 1, given, "rope's positions are i32 or i64 [tokens]");
        }
        if (given.dims[0].size != x.dims[0].size) {
            return operand_error("input", 1, given,
                                 absl::StrCat("shape mismatch: ", given.dims[0].size,
                                              " positions for x's ", x.dims[0].size, " tokens"));
        }
        if (attributes.has("sequence_ends")) {
            return absl::InvalidArgumentError(
                "rope takes its positions from the positions input or from sequence_ends, not "
                "both");
        }
    }
    if (x.dims.back().size % 2 != 0) {
        return operand_error("input", 0, x,
                             absl::StrCat("rope needs an even head dimension, '",
                                          x.dims.back().name, "' is ", x.dims.back().size));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(double theta, attributes.get_double_or("theta", 10000.0));
    if (!(theta > 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat("rope theta must be > 0, got ", theta));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<int64_t> ends,
                                 sequence_ends_attribute(attributes, x.dims[0].size));
    Attributes normalised = {{"theta", theta}};
    if (!positions) {
        normalised.set("sequence_ends", ends);
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string scaling, attributes.get_string_or("scaling", "none"));
    if (scaling == "linear" || scaling == "llama3") {
        EINSUMMABLE_ASSIGN_OR_RETURN(double factor, attributes.get_double("scaling_factor"));
        if (!(factor > 0.0)) {
            return absl::InvalidArgumentError(
                absl::StrCat("rope scaling_factor must be > 0, got ", factor));
        }
        normalised.set("scaling", scaling);
        normalised.set("scaling_factor", factor);
        if (scaling == "llama3") {
            EINSUMMABLE_ASSIGN_OR_RETURN(double low, attributes.get_double("low_freq_factor"));
            EINSUMMABLE_ASSIGN_OR_RETURN(double high, attributes.get_double("high_freq_factor"));
            EINSUMMABLE_ASSIGN_OR_RETURN(int64_t original,
                                         attributes.get_int("original_max_position"));
            if (!(low > 0.0) || !(high > low) || original <= 0) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "rope llama3 scaling needs 0 < low_freq_factor < high_freq_factor and "
                    "original_max_position > 0; got ",
                    low, ", ", high, " and ", original));
            }
            normalised.set("low_freq_factor", low);
            normalised.set("high_freq_factor", high);
            normalised.set("original_max_position", original);
        } else {
            for (const char* unused :
                 {"low_freq_factor", "high_freq_factor", "original_max_position"}) {
                if (attributes.values().contains(unused)) {
                    return absl::InvalidArgumentError(
                        absl::StrCat("rope attribute '", unused, "' needs scaling \"llama3\""));
                }
            }
        }
    } else if (scaling != "none") {
        return absl::InvalidArgumentError(
            absl::StrCat("rope scaling '", scaling, "' is unknown (none, linear or llama3)"));
    } else {
        for (const char* unused :
             {"scaling_factor", "low_freq_factor", "high_freq_factor", "original_max_position"}) {
            if (attributes.values().contains(unused)) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "rope attribute '", unused, "' needs scaling \"linear\" or \"llama3\""));
            }
        }
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<double> frequencies,
                                 rope_frequencies(normalised, x.dims.back().size));
    return OperatorPtr(
        new Rope(std::move(normalised), std::move(inputs), std::move(frequencies), ends));
}

Rope::Rope(Attributes attributes, std::vector<TensorType> inputs, std::vector<double> frequencies,
           std::vector<int64_t> sequence_ends)
    : Operator(std::move(attributes), inputs, {inputs[0]}), frequencies_(std::move(frequencies)),
      sequence_ends_(std::move(sequence_ends)) {}

std::vector<ShardableIndex> Rope::shardable_indices() const {
    const TensorType& x = input_types()[0];
    return indices_for_dims(x, dim_range(0, x.rank() - 1));
}

std::vector<IndexRole> Rope::index_roles(const OperandRoles& /*operands*/) const {
    std::vector<IndexRole> roles(shardable_indices().size(), IndexRole::head);
    if (!roles.empty()) {
        roles[0] = IndexRole::token;
    }
    return roles;
}

SpecLayout Rope::layout() const {
    const TensorType& x = input_types()[0];
    const std::vector<DimBinding> bindings = bind_dims(x, dim_range(0, x.rank() - 1));
    if (has_positions()) {
        return {{bindings, {DimBinding{0}}}, {bindings}, {AggOp::none}};
    }
    return {{bindings}, {bindings}, {AggOp::none}};
}

absl::Status Rope::check_input_values(int input, absl::Span<const std::byte> bytes) const {
    if (input != 1 || !has_positions()) {
        return absl::OkStatus();
    }
    if (std::optional<IdOutOfRange> bad =
            find_id_out_of_range(input_types()[1].dtype, bytes, kMaxPosition)) {
        return absl::InvalidArgumentError(absl::StrCat("token ", bad->position, " has position ",
                                                       bad->id, ", outside [0, ", kMaxPosition,
                                                       ")"));
    }
    return absl::OkStatus();
}

double Rope::flops(const FunctionSpec& function) const {
    return 3.0 * static_cast<double>(function.inputs[0].volume());
}

std::vector<HostTensor> Rope::compute(absl::Span<const HostTensor> inputs,
                                      const FunctionSpec& function) const {
    const Box& block = inputs[0].box();
    HostTensor output(function.outputs[0]);
    const int64_t head_dim = block[block.rank() - 1].size();
    const int64_t half = head_dim / 2;
    int64_t rows_per_token = 1; // vectors of d_head values per token in this block
    for (int dim = 1; dim + 1 < block.rank(); ++dim) {
        rows_per_token *= block[dim].size();
    }
    const std::vector<double>& frequency = frequencies_;
    for (int64_t token = block[0].lower; token < block[0].upper; ++token) {
        const double position =
            has_positions() ? inputs[1].data()[token - block[0].lower]
                            : static_cast<double>(token - sequence_start(sequence_ends_, token));
        for (int64_t row = 0; row < rows_per_token; ++row) {
            const int64_t offset = ((token - block[0].lower) * rows_per_token + row) * head_dim;
            const double* x = inputs[0].data() + offset;
            double* y = output.data() + offset;
            for (int64_t i = 0; i < half; ++i) {
                const double angle = position * frequency[i];
                const double c = std::cos(angle);
                const double s = std::sin(angle);
                y[i] = x[i] * c - x[i + half] * s;
                y[i + half] = x[i] * s + x[i + half] * c;
            }
        }
    }
    return {std::move(output)};
}

} // namespace einsummable::ir
