#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"
#include "einsummable/v1/graph.pb.h"

// The graph part of the wire contract (proto/einsummable/v1/graph.proto) and its conversion to
// the compiler's ir: parsing graph files, binding symbolic dimensions, and writing any ir graph
// back out. The format is described in docs/graph-format.md; for examples see
// tests/unit/proto/graph_def_test.cc and proto/examples/.
namespace einsummable::graphdef {

// Sizes of symbolic dimensions by symbol ("tokens" -> 64).
using Bindings = std::map<std::string, int64_t>;

// The longest name a GraphDef may give a tensor, operator, dimension, symbol, operator kind or
// attribute (docs/graph-format.md): a 20,000-character name would otherwise make an error
// message too long for gRPC's metadata.
inline constexpr size_t kMaxNameLength = 256;

// `name` quoted for an error message or a log line, which it must keep on one line: control
// characters (bytes below 0x20, 0x7f) escaped ("\n", "\x1b"), as are ' and \; past 64
// bytes, cut (at a UTF-8 character boundary) and followed by its length:
// 'abc', 'a\nb', 'xxxxxxxx...' (20000 characters).
std::string quote_name(absl::string_view name);

// InvalidArgument, starting with `what` ("input tensor name"), when `name` is longer than
// kMaxNameLength or contains a control character (naming the first, escaped: \x0a).
absl::Status check_name(absl::string_view what, absl::string_view name);

// check_name for every name the graph gives: inputs and their dimensions and symbols,
// operators, their kinds, attribute names, the tensors they read and write, saved tensors;
// string attribute values may not contain control characters either. to_description checks
// this first.
absl::Status check_names(const v1::GraphDef& graph_def);

// The graph as ir data, symbolic dimensions replaced by their sizes in `bindings`. Errors
// (InvalidArgument) name the tensor and dimension, or the operator and attribute: an
// unspecified or unknown dtype, a dimension without a size, an unbound symbol (naming the
// symbol), a non-positive size, an attribute without a value. Operator kinds, attribute types
// and shapes are checked by ir::Graph::build, not here.
absl::StatusOr<ir::GraphDescription> to_description(const v1::GraphDef& graph_def,
                                                    const Bindings& bindings = {});

// to_description, then ir::Graph::build: the validated, topologically ordered graph.
absl::StatusOr<ir::Graph> build_graph(const v1::GraphDef& graph_def, const Bindings& bindings = {});

// The inverse of build_graph for any ir graph: its inputs (all sizes fixed), its nodes in
// topological order with op->kind() and op->attributes(), and its saved tensors. Output names
// are written only where they differ from the default (a single output named after its node).
v1::GraphDef from_graph(const ir::Graph& graph);

// The symbols used by the graph's dimensions: what `bindings` must provide.
std::set<std::string> symbols(const v1::GraphDef& graph_def);

// Protocol Buffers text format. Errors are InvalidArgument "line L column C: message"
// (1-based, as editors count).
absl::StatusOr<v1::GraphDef> parse_text(absl::string_view text);
// Protocol Buffers JSON mapping (field names in proto or lowerCamelCase form). Errors are
// InvalidArgument with the JSON parser's message.
absl::StatusOr<v1::GraphDef> parse_json(absl::string_view json);
// JSON when `filename` ends in ".json" or the contents start with '{' (after white space),
// text format otherwise. Errors are prefixed with the file name.
absl::StatusOr<v1::GraphDef> parse_graph_file(absl::string_view contents,
                                              absl::string_view filename);

// Text format, as parse_text reads it.
std::string to_text(const v1::GraphDef& graph_def);
// JSON, indented, with the proto field names, as parse_json reads it. Fails only where the
// JSON printer does (a string that is not UTF-8).
absl::StatusOr<std::string> to_json(const v1::GraphDef& graph_def);

// The wire enum of an element type.
v1::DType to_wire_dtype(ir::DType dtype);

// One attribute value between the wire and the ir; the error names operator `op` and attribute
// `attr` when the value is unset.
absl::StatusOr<ir::AttrValue> to_ir_attr(const v1::AttrValue& value, const std::string& op,
                                         const std::string& attr);
v1::AttrValue to_proto_attr(const ir::AttrValue& value);

// The ir dtype of a wire dtype; InvalidArgument prefixed with `what` (e.g. "input tensor 'x'")
// for DTYPE_UNSPECIFIED and numbers the schema does not name.
absl::StatusOr<ir::DType> from_wire_dtype(v1::DType dtype, absl::string_view what);

} // namespace einsummable::graphdef
