#include "runtime/cluster/exec_graph_wire.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/support/status_macros.h"
#include "proto/graph_def.h"

namespace einsummable::runtime::cluster {

using physical::Buffer;
using physical::BufferId;
using physical::ExecGraph;
using physical::ExecNode;
using physical::NodeKind;

namespace {

void box_to_wire(const ir::Box& box, v1::BoxDef* out) {
    for (const ir::Interval& interval : box.dims()) {
        v1::IntervalDef* dim = out->add_dims();
        dim->set_lower(interval.lower);
        dim->set_upper(interval.upper);
    }
}

ir::Box box_from_wire(const v1::BoxDef& def) {
    std::vector<ir::Interval> dims;
    for (const v1::IntervalDef& dim : def.dims()) {
        dims.push_back({dim.lower(), dim.upper()});
    }
    return ir::Box(std::move(dims));
}

v1::ExecNodeKind kind_to_wire(NodeKind kind) {
    switch (kind) {
    case NodeKind::slice:
        return v1::SLICE;
    case NodeKind::copy:
        return v1::COPY;
    case NodeKind::aggregate:
        return v1::AGGREGATE;
    case NodeKind::concat:
        return v1::CONCAT;
    case NodeKind::kernel:
        return v1::KERNEL;
    case NodeKind::send:
        return v1::SEND;
    case NodeKind::recv:
        return v1::RECV;
    }
    return v1::EXEC_NODE_KIND_UNSPECIFIED;
}

absl::StatusOr<NodeKind> kind_from_wire(v1::ExecNodeKind kind, int node) {
    switch (kind) {
    case v1::SLICE:
        return NodeKind::slice;
    case v1::COPY:
        return NodeKind::copy;
    case v1::AGGREGATE:
        return NodeKind::aggregate;
    case v1::CONCAT:
        return NodeKind::concat;
    case v1::KERNEL:
        return NodeKind::kernel;
    case v1::SEND:
        return NodeKind::send;
    case v1::RECV:
        return NodeKind::recv;
    default:
        return absl::InvalidArgumentError(
            absl::StrCat("node ", node, ": unknown kind ", static_cast<int>(kind)));
    }
}

void operator_to_wire(const ir::Operator& op, v1::OperatorTypeDef* out) {
    out->set_kind(std::string(op.kind()));
    for (const auto& [name, value] : op.attributes().values()) {
        (*out->mutable_attributes())[name] = graphdef::to_proto_attr(value);
    }
    for (size_t i = 0; i < op.input_types().size(); ++i) {
        const ir::TensorType& type = op.input_types()[i];
        v1::TensorDesc* input = out->add_inputs();
        input->set_name(absl::StrCat("input", i));
        input->set_dtype(graphdef::to_wire_dtype(type.dtype));
        for (const ir::Dim& dim : type.dims) {
            v1::Dimension* d = input->add_dims();
            d->set_name(dim.name);
            d->set_fixed(dim.size);
        }
    }
}

absl::StatusOr<ir::OperatorPtr> operator_from_wire(const v1::OperatorTypeDef& def, int index) {
    const std::string what = absl::StrCat("operator ", index, " (", def.kind(), ")");
    ir::Attributes attributes;
    for (const auto& [name, value] : def.attributes()) {
        EINSUMMABLE_ASSIGN_OR_RETURN(ir::AttrValue attr, graphdef::to_ir_attr(value, what, name));
        attributes.set(name, std::move(attr));
    }
    std::vector<ir::TensorType> inputs;
    for (const v1::TensorDesc& input : def.inputs()) {
        ir::TensorType type;
        EINSUMMABLE_ASSIGN_OR_RETURN(
            type.dtype,
            graphdef::from_wire_dtype(input.dtype(), absl::StrCat(what, " ", input.name())));
        for (const v1::Dimension& dim : input.dims()) {
            if (dim.size_case() != v1::Dimension::kFixed || dim.fixed() <= 0) {
                return absl::InvalidArgumentError(absl::StrCat(
                    what, " ", input.name(), ": dimension ", dim.name(), " has no fixed size"));
            }
            type.dims.push_back({dim.name(), dim.fixed()});
        }
        inputs.push_back(std::move(type));
    }
    absl::StatusOr<ir::OperatorPtr> op =
        ir::make_operator(def.kind(), attributes, std::move(inputs));
    if (!op.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", op.status().message()));
    }
    return op;
}

std::map<std::string, std::vector<BufferId>>
lists_from_wire(const google::protobuf::Map<std::string, v1::BufferList>& lists) {
    std::map<std::string, std::vector<BufferId>> out;
    for (const auto& [name, list] : lists) {
        out[name].assign(list.buffers().begin(), list.buffers().end());
    }
    return out;
}

absl::Status check_list_ids(const ExecGraph& graph,
                            const std::map<std::string, std::vector<BufferId>>& lists,
                            absl::string_view what) {
    for (const auto& [name, ids] : lists) {
        for (BufferId id : ids) {
            if (id < 0 || id >= static_cast<BufferId>(graph.buffers.size())) {
                return absl::InvalidArgumentError(
                    absl::StrCat(what, " ", name, ": buffer b", id, " does not exist"));
            }
        }
    }
    return absl::OkStatus();
}

} // namespace

v1::ExecGraphDef to_wire(const ExecGraph& graph) {
    v1::ExecGraphDef def;
    def.set_devices(graph.devices);
    for (const Buffer& buffer : graph.buffers) {
        v1::BufferDef* out = def.add_buffers();
        out->set_device(buffer.device);
        out->set_dtype(graphdef::to_wire_dtype(buffer.dtype));
        box_to_wire(buffer.box, out->mutable_box());
        out->set_tensor(buffer.tensor);
        out->set_persistent(buffer.persistent);
        out->set_offset(buffer.offset);
        out->set_resident(buffer.resident);
        out->set_stats(buffer.stats);
        out->set_parent(buffer.parent);
    }
    std::map<const ir::Operator*, int> operators;
    for (const ExecNode& node : graph.nodes) {
        v1::ExecNodeDef* out = def.add_nodes();
        out->set_kind(kind_to_wire(node.kind));
        out->set_device(node.device);
        out->mutable_inputs()->Add(node.inputs.begin(), node.inputs.end());
        out->mutable_outputs()->Add(node.outputs.begin(), node.outputs.end());
        out->set_agg(std::string(ir::agg_op_name(node.agg)));
        out->set_graph_node(node.graph_node);
        out->set_label(node.label);
        int op = -1;
        if (node.op != nullptr) {
            auto [it, added] = operators.try_emplace(node.op, def.operators_size());
            if (added) {
                operator_to_wire(*node.op, def.add_operators());
            }
            op = it->second;
        }
        out->set_op(op);
        out->set_function(node.function);
        for (const ir::Box& box : node.spec.inputs) {
            box_to_wire(box, out->mutable_spec()->add_inputs());
        }
        for (const ir::Box& box : node.spec.outputs) {
            box_to_wire(box, out->mutable_spec()->add_outputs());
        }
        out->set_peer(node.peer);
        out->set_peer_device(node.peer_device);
        out->set_tag(node.tag);
        out->mutable_deps()->Add(node.deps.begin(), node.deps.end());
    }
    def.mutable_arena_bytes()->Add(graph.arena_bytes.begin(), graph.arena_bytes.end());
    def.mutable_resident_bytes()->Add(graph.resident_bytes.begin(), graph.resident_bytes.end());
    for (const auto& [name, ids] : graph.input_blocks) {
        (*def.mutable_input_blocks())[name].mutable_buffers()->Add(ids.begin(), ids.end());
    }
    for (const auto& [name, ids] : graph.outputs) {
        (*def.mutable_outputs())[name].mutable_buffers()->Add(ids.begin(), ids.end());
    }
    def.set_batch_invariant(graph.batch_invariant);
    return def;
}

absl::StatusOr<std::unique_ptr<ReceivedGraph>> from_wire(const v1::ExecGraphDef& def) {
    auto received = std::make_unique<ReceivedGraph>();
    for (int i = 0; i < def.operators_size(); ++i) {
        EINSUMMABLE_ASSIGN_OR_RETURN(ir::OperatorPtr op, operator_from_wire(def.operators(i), i));
        received->operators.push_back(std::move(op));
    }
    ExecGraph& graph = received->graph;
    graph.devices = def.devices();
    for (int b = 0; b < def.buffers_size(); ++b) {
        const v1::BufferDef& in = def.buffers(b);
        Buffer buffer;
        buffer.device = in.device();
        EINSUMMABLE_ASSIGN_OR_RETURN(
            buffer.dtype, graphdef::from_wire_dtype(in.dtype(), absl::StrCat("buffer b", b)));
        buffer.box = box_from_wire(in.box());
        buffer.tensor = in.tensor();
        buffer.persistent = in.persistent();
        buffer.offset = in.offset();
        buffer.resident = in.resident();
        buffer.stats = in.stats();
        buffer.parent = in.parent();
        graph.buffers.push_back(std::move(buffer));
    }
    for (int n = 0; n < def.nodes_size(); ++n) {
        const v1::ExecNodeDef& in = def.nodes(n);
        ExecNode node;
        EINSUMMABLE_ASSIGN_OR_RETURN(node.kind, kind_from_wire(in.kind(), n));
        node.device = in.device();
        node.inputs.assign(in.inputs().begin(), in.inputs().end());
        node.outputs.assign(in.outputs().begin(), in.outputs().end());
        absl::StatusOr<ir::AggOp> agg = ir::parse_agg_op(in.agg());
        if (!agg.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat("node ", n, ": aggregation: ", agg.status().message()));
        }
        node.agg = *agg;
        node.graph_node = in.graph_node();
        node.label = in.label();
        if (in.op() >= def.operators_size() || in.op() < -1) {
            return absl::InvalidArgumentError(absl::StrCat("node ", n, ": operator ", in.op(),
                                                           " does not exist (the graph has ",
                                                           def.operators_size(), ")"));
        }
        node.op = in.op() >= 0 ? received->operators[in.op()].get() : nullptr;
        if (node.kind == NodeKind::kernel && node.op == nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat("node ", n, ": a kernel without operator"));
        }
        node.function = in.function();
        for (const v1::BoxDef& box : in.spec().inputs()) {
            node.spec.inputs.push_back(box_from_wire(box));
        }
        for (const v1::BoxDef& box : in.spec().outputs()) {
            node.spec.outputs.push_back(box_from_wire(box));
        }
        node.peer = in.peer();
        node.peer_device = in.peer_device();
        node.tag = in.tag();
        node.deps.assign(in.deps().begin(), in.deps().end());
        graph.nodes.push_back(std::move(node));
    }
    graph.arena_bytes.assign(def.arena_bytes().begin(), def.arena_bytes().end());
    graph.resident_bytes.assign(def.resident_bytes().begin(), def.resident_bytes().end());
    graph.input_blocks = lists_from_wire(def.input_blocks());
    graph.outputs = lists_from_wire(def.outputs());
    graph.batch_invariant = def.batch_invariant();
    EINSUMMABLE_RETURN_IF_ERROR(check_list_ids(graph, graph.input_blocks, "input"));
    EINSUMMABLE_RETURN_IF_ERROR(check_list_ids(graph, graph.outputs, "output"));
    EINSUMMABLE_RETURN_IF_ERROR(physical::check_exec_graph(graph, graph.devices));
    return received;
}

} // namespace einsummable::runtime::cluster
