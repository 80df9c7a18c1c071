#include "proto/graph_def.h"

#include <optional>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace einsummable::graphdef {

namespace {

std::string bound_symbols(const Bindings& bindings) {
    if (bindings.empty()) {
        return "none";
    }
    return absl::StrJoin(bindings, ", ", [](std::string* out, const auto& binding) {
        absl::StrAppend(out, binding.first, "=", binding.second);
    });
}

absl::StatusOr<ir::Dim> to_ir_dim(const v1::Dimension& dim, const std::string& tensor, int dim_idx,
                                  const Bindings& bindings) {
    ir::Dim out;
    // A symbolic dimension without a name is named after its symbol.
    out.name = dim.name().empty() && dim.has_symbol() ? dim.symbol() : dim.name();
    const std::string where =
        absl::StrCat("input tensor '", tensor, "' dimension ", dim_idx, " ('", out.name, "')");
    switch (dim.size_case()) {
    case v1::Dimension::kFixed:
        out.size = dim.fixed();
        if (out.size <= 0) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": size ", out.size, "; sizes must be positive"));
        }
        return out;
    case v1::Dimension::kSymbol: {
        const std::string& symbol = dim.symbol();
        if (symbol.empty()) {
            return absl::InvalidArgumentError(absl::StrCat(where, ": empty symbol"));
        }
        auto it = bindings.find(symbol);
        if (it == bindings.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": symbol '", symbol,
                             "' is not bound (bound: ", bound_symbols(bindings), ")"));
        }
        out.size = it->second;
        if (out.size <= 0) {
            return absl::InvalidArgumentError(absl::StrCat(where, ": symbol '", symbol,
                                                           "' is bound to ", out.size,
                                                           "; sizes must be positive"));
        }
        return out;
    }
    case v1::Dimension::SIZE_NOT_SET:
        break;
    }
    return absl::InvalidArgumentError(absl::StrCat(where, ": no size (set `fixed` or `symbol`)"));
}

} // namespace

absl::StatusOr<ir::AttrValue> to_ir_attr(const v1::AttrValue& value, const std::string& op,
                                         const std::string& attr) {
    switch (value.value_case()) {
    case v1::AttrValue::kBoolValue:
        return ir::AttrValue(value.bool_value());
    case v1::AttrValue::kIntValue:
        return ir::AttrValue(static_cast<int64_t>(value.int_value()));
    case v1::AttrValue::kDoubleValue:
        return ir::AttrValue(value.double_value());
    case v1::AttrValue::kStringValue:
        return ir::AttrValue(value.string_value());
    case v1::AttrValue::kIntList:
        return ir::AttrValue(std::vector<int64_t>(value.int_list().values().begin(),
                                                  value.int_list().values().end()));
    case v1::AttrValue::VALUE_NOT_SET:
        break;
    }
    return absl::InvalidArgumentError(absl::StrCat("operator '", op, "' attribute '", attr,
                                                   "': no value (set bool_value, int_value, "
                                                   "double_value, string_value or int_list)"));
}

v1::AttrValue to_proto_attr(const ir::AttrValue& value) {
    v1::AttrValue out;
    std::visit(
        [&out](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool>) {
                out.set_bool_value(v);
            } else if constexpr (std::is_same_v<T, int64_t>) {
                out.set_int_value(v);
            } else if constexpr (std::is_same_v<T, double>) {
                out.set_double_value(v);
            } else if constexpr (std::is_same_v<T, std::string>) {
                out.set_string_value(v);
            } else {
                static_assert(std::is_same_v<T, std::vector<int64_t>>);
                out.mutable_int_list()->mutable_values()->Add(v.begin(), v.end());
            }
        },
        value);
    return out;
}

namespace {

// Keeps the text format parser's first error, with 1-based line and column.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
public:
    void AddError(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
        if (error_.empty()) {
            error_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
        }
    }
    const std::string& error() const { return error_; }

private:
    std::string error_;
};

bool is_control(char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f;
}

std::optional<char> first_control(absl::string_view text) {
    for (char c : text) {
        if (is_control(c)) {
            return c;
        }
    }
    return std::nullopt;
}

// "\x0a".
std::string hex_code(char c) {
    return absl::StrCat("\\x", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
}

void append_escaped(std::string* out, char c) {
    switch (c) {
    case '\n':
        out->append("\\n");
        return;
    case '\t':
        out->append("\\t");
        return;
    case '\r':
        out->append("\\r");
        return;
    case '\'':
        out->append("\\'");
        return;
    case '\\':
        out->append("\\\\");
        return;
    default:
        break;
    }
    if (is_control(c)) {
        out->append(hex_code(c));
    } else {
        out->push_back(c);
    }
}

// check_name for every element of `names`, `what` followed by the element's index.
absl::Status check_names_in(absl::string_view what,
                            const google::protobuf::RepeatedPtrField<std::string>& names) {
    for (int idx = 0; idx < names.size(); ++idx) {
        if (absl::Status status = check_name(absl::StrCat(what, " ", idx), names[idx]);
            !status.ok()) {
            return status;
        }
    }
    return absl::OkStatus();
}

} // namespace

std::string quote_name(absl::string_view name) {
    constexpr size_t kShown = 64;
    size_t shown = name.size();
    if (name.size() > kShown) {
        shown = kShown;
        // Back off to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
        while (shown > 0 && (static_cast<unsigned char>(name[shown]) & 0xc0) == 0x80) {
            --shown;
        }
    }
    std::string out = "'";
    for (char c : name.substr(0, shown)) {
        append_escaped(&out, c);
    }
    if (shown < name.size()) {
        absl::StrAppend(&out, "...' (", name.size(), " characters)");
    } else {
        out.push_back('\'');
    }
    return out;
}

absl::Status check_name(absl::string_view what, absl::string_view name) {
    if (name.size() > kMaxNameLength) {
        return absl::InvalidArgumentError(absl::StrCat(what, " ", quote_name(name),
                                                       " is too long: names have at most ",
                                                       kMaxNameLength, " characters"));
    }
    if (const std::optional<char> c = first_control(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " ", quote_name(name), " contains control character ", hex_code(*c)));
    }
    return absl::OkStatus();
}

absl::Status check_names(const v1::GraphDef& graph_def) {
    for (const v1::TensorDesc& input : graph_def.inputs()) {
        if (absl::Status status = check_name("input tensor name", input.name()); !status.ok()) {
            return status;
        }
        for (int dim_idx = 0; dim_idx < input.dims_size(); ++dim_idx) {
            const v1::Dimension& dim = input.dims(dim_idx);
            const std::string where =
                absl::StrCat("input tensor ", quote_name(input.name()), " dimension ", dim_idx);
            if (absl::Status status = check_name(absl::StrCat(where, " name"), dim.name());
                !status.ok()) {
                return status;
            }
            if (absl::Status status = check_name(absl::StrCat(where, " symbol"), dim.symbol());
                !status.ok()) {
                return status;
            }
        }
    }
    for (int op_idx = 0; op_idx < graph_def.operators_size(); ++op_idx) {
        const v1::OperatorDef& op = graph_def.operators(op_idx);
        if (absl::Status status = check_name(absl::StrCat("operator ", op_idx, " name"), op.name());
            !status.ok()) {
            return status;
        }
        const std::string where = absl::StrCat("operator ", quote_name(op.name()));
        if (absl::Status status = check_name(absl::StrCat(where, " kind"), op.kind());
            !status.ok()) {
            return status;
        }
        for (const auto& [attr_name, value] : op.attributes()) {
            if (absl::Status status = check_name(absl::StrCat(where, " attribute name"), attr_name);
                !status.ok()) {
                return status;
            }
            if (const std::optional<char> c = first_control(value.string_value())) {
                return absl::InvalidArgumentError(
                    absl::StrCat(where, " attribute ", quote_name(attr_name),
                                 ": the string contains control character ", hex_code(*c)));
            }
        }
        if (absl::Status status = check_names_in(absl::StrCat(where, " input"), op.inputs());
            !status.ok()) {
            return status;
        }
        if (absl::Status status = check_names_in(absl::StrCat(where, " output"), op.outputs());
            !status.ok()) {
            return status;
        }
    }
    return check_names_in("saved tensor", graph_def.saved());
}

absl::StatusOr<ir::DType> from_wire_dtype(v1::DType dtype, absl::string_view what) {
    switch (dtype) {
    case v1::F16:
        return ir::DType::f16;
    case v1::BF16:
        return ir::DType::bf16;
    case v1::F32:
        return ir::DType::f32;
    case v1::F64:
        return ir::DType::f64;
    case v1::I32:
        return ir::DType::i32;
    case v1::I64:
        return ir::DType::i64;
    case v1::DTYPE_UNSPECIFIED:
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": dtype is unspecified (set F16, BF16, F32, F64, I32 or I64)"));
    default:
        // Proto3 enums are open: a number the schema does not name parses and lands here.
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": unknown dtype ", static_cast<int>(dtype),
                         " (expected F16, BF16, F32, F64, I32 or I64)"));
    }
}

v1::DType to_wire_dtype(ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return v1::F16;
    case ir::DType::bf16:
        return v1::BF16;
    case ir::DType::f32:
        return v1::F32;
    case ir::DType::f64:
        return v1::F64;
    case ir::DType::i32:
        return v1::I32;
    case ir::DType::i64:
        return v1::I64;
    }
    return v1::DTYPE_UNSPECIFIED;
}

absl::StatusOr<ir::GraphDescription> to_description(const v1::GraphDef& graph_def,
                                                    const Bindings& bindings) {
    if (absl::Status status = check_names(graph_def); !status.ok()) {
        return status;
    }
    ir::GraphDescription description;
    for (const v1::TensorDesc& input : graph_def.inputs()) {
        ir::TensorDescription tensor;
        tensor.name = input.name();
        absl::StatusOr<ir::DType> dtype =
            from_wire_dtype(input.dtype(), absl::StrCat("input tensor '", input.name(), "'"));
        if (!dtype.ok()) {
            return dtype.status();
        }
        tensor.dtype = *dtype;
        for (int dim_idx = 0; dim_idx < input.dims_size(); ++dim_idx) {
            absl::StatusOr<ir::Dim> dim =
                to_ir_dim(input.dims(dim_idx), input.name(), dim_idx, bindings);
            if (!dim.ok()) {
                return dim.status();
            }
            tensor.dims.push_back(*std::move(dim));
        }
        description.inputs.push_back(std::move(tensor));
    }
    for (const v1::OperatorDef& op : graph_def.operators()) {
        ir::NodeDescription node;
        node.name = op.name();
        node.kind = op.kind();
        for (const auto& [attr_name, value] : op.attributes()) {
            absl::StatusOr<ir::AttrValue> attr = to_ir_attr(value, op.name(), attr_name);
            if (!attr.ok()) {
                return attr.status();
            }
            node.attributes.set(attr_name, *std::move(attr));
        }
        node.inputs.assign(op.inputs().begin(), op.inputs().end());
        node.outputs.assign(op.outputs().begin(), op.outputs().end());
        description.nodes.push_back(std::move(node));
    }
    description.saved.assign(graph_def.saved().begin(), graph_def.saved().end());
    return description;
}

absl::StatusOr<ir::Graph> build_graph(const v1::GraphDef& graph_def, const Bindings& bindings) {
    absl::StatusOr<ir::GraphDescription> description = to_description(graph_def, bindings);
    if (!description.ok()) {
        return description.status();
    }
    return ir::Graph::build(*description);
}

v1::GraphDef from_graph(const ir::Graph& graph) {
    v1::GraphDef out;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        v1::TensorDesc* input = out.add_inputs();
        input->set_name(tensor.name);
        input->set_dtype(to_wire_dtype(tensor.type.dtype));
        for (const ir::Dim& dim : tensor.type.dims) {
            v1::Dimension* proto_dim = input->add_dims();
            proto_dim->set_name(dim.name);
            proto_dim->set_fixed(dim.size);
        }
    }
    for (const ir::GraphNode& node : graph.nodes()) {
        v1::OperatorDef* op = out.add_operators();
        op->set_name(node.name);
        op->set_kind(std::string(node.op->kind()));
        for (const auto& [attr_name, value] : node.op->attributes().values()) {
            (*op->mutable_attributes())[attr_name] = to_proto_attr(value);
        }
        for (ir::TensorId id : node.inputs) {
            op->add_inputs(graph.tensor(id).name);
        }
        const bool default_outputs =
            node.outputs.size() == 1 && graph.tensor(node.outputs[0]).name == node.name;
        if (!default_outputs) {
            for (ir::TensorId id : node.outputs) {
                op->add_outputs(graph.tensor(id).name);
            }
        }
    }
    for (ir::TensorId id : graph.saved()) {
        out.add_saved(graph.tensor(id).name);
    }
    return out;
}

std::set<std::string> symbols(const v1::GraphDef& graph_def) {
    std::set<std::string> out;
    for (const v1::TensorDesc& input : graph_def.inputs()) {
        for (const v1::Dimension& dim : input.dims()) {
            if (dim.has_symbol()) {
                out.insert(dim.symbol());
            }
        }
    }
    return out;
}

absl::StatusOr<v1::GraphDef> parse_text(absl::string_view text) {
    v1::GraphDef graph_def;
    FirstErrorCollector errors;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(std::string(text), &graph_def)) {
        return absl::InvalidArgumentError(
            errors.error().empty() ? "text format: cannot parse the graph" : errors.error());
    }
    return graph_def;
}

absl::StatusOr<v1::GraphDef> parse_json(absl::string_view json) {
    v1::GraphDef graph_def;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false; // a misspelt field is an error, not silently dropped
    const auto status = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(json.data(), json.size()), &graph_def, options);
    if (!status.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("JSON: ", std::string(status.message().data(), status.message().size())));
    }
    return graph_def;
}

absl::StatusOr<v1::GraphDef> parse_graph_file(absl::string_view contents,
                                              absl::string_view filename) {
    const bool is_json = absl::EndsWithIgnoreCase(filename, ".json") ||
                         absl::StartsWith(absl::StripLeadingAsciiWhitespace(contents), "{");
    absl::StatusOr<v1::GraphDef> graph_def = is_json ? parse_json(contents) : parse_text(contents);
    if (!graph_def.ok()) {
        return absl::Status(graph_def.status().code(),
                            absl::StrCat(filename, ": ", graph_def.status().message()));
    }
    return graph_def;
}

std::string to_text(const v1::GraphDef& graph_def) {
    std::string out;
    google::protobuf::TextFormat::PrintToString(graph_def, &out);
    return out;
}

absl::StatusOr<std::string> to_json(const v1::GraphDef& graph_def) {
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    std::string out;
    const auto status = google::protobuf::util::MessageToJsonString(graph_def, &out, options);
    if (!status.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("JSON: ", std::string(status.message().data(), status.message().size())));
    }
    return out;
}

} // namespace einsummable::graphdef
