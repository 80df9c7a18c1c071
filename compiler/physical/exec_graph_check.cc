#include "compiler/physical/exec_graph_check.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/write_rows.h"
#include "compiler/support/status_macros.h"

namespace einsummable::physical {

using ir::Box;

std::string buffer_label(const ExecGraph& graph, BufferId id) {
    if (id < 0 || id >= static_cast<BufferId>(graph.buffers.size())) {
        return absl::StrCat("buffer b", id);
    }
    const Buffer& buffer = graph.buffers[id];
    return absl::StrCat("buffer b", id, " (", buffer.tensor, buffer.box.to_string(), " ",
                        ir::dtype_name(buffer.dtype), " on device ", buffer.device, ")");
}

std::string node_label(const ExecGraph& graph, int node_idx) {
    const ExecNode& node = graph.nodes[node_idx];
    std::string label = absl::StrCat("node ", node_idx, " (", node_kind_name(node.kind));
    if (node.kind == NodeKind::aggregate) {
        absl::StrAppend(&label, " ", ir::agg_op_name(node.agg));
    }
    if (node.kind == NodeKind::kernel) {
        absl::StrAppend(&label, " ", node.op != nullptr ? node.op->kind() : "?", "#",
                        node.function);
    }
    if (node.kind == NodeKind::send || node.kind == NodeKind::recv) {
        absl::StrAppend(&label, node.kind == NodeKind::send ? " to" : " from", " rank ", node.peer,
                        " tag ", node.tag);
    }
    absl::StrAppend(&label, ")");
    return label;
}

namespace {

absl::Status check_buffer(const ExecGraph& graph, BufferId id) {
    const Buffer& buffer = graph.buffers[id];
    if (buffer.device < 0 || buffer.device >= graph.devices) {
        return absl::InvalidArgumentError(absl::StrCat(buffer_label(graph, id), ": device ",
                                                       buffer.device, " outside the graph's ",
                                                       graph.devices, " devices"));
    }
    for (const ir::Interval& interval : buffer.box.dims()) {
        if (interval.size() < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat(buffer_label(graph, id), ": negative extent ", interval.to_string()));
        }
    }
    if (buffer.resident && !buffer.persistent) {
        return absl::InvalidArgumentError(
            absl::StrCat(buffer_label(graph, id), ": resident but not persistent"));
    }
    const std::vector<int64_t>& arenas = buffer.resident ? graph.resident_bytes : graph.arena_bytes;
    const int64_t arena = arenas.empty() ? 0 : arenas[buffer.device];
    const int64_t bytes = buffer.bytes();
    if (buffer.offset < 0 || bytes > arena - buffer.offset) {
        return absl::InvalidArgumentError(absl::StrCat(
            buffer_label(graph, id), ": bytes [", buffer.offset, ", ", buffer.offset + bytes,
            ") outside device ", buffer.device,
            buffer.resident ? "'s resident arena of " : "'s arena of ", arena, " bytes"));
    }
    return absl::OkStatus();
}

// A view (Buffer::parent): inside its parent as one contiguous run, at the offset that gives,
// on its device, in its dtype, without statistics, with its root's flags, and no cycle.
absl::Status check_view(const ExecGraph& graph, BufferId id) {
    const Buffer& view = graph.buffers[id];
    const BufferId parent_id = view.parent;
    auto fail = [&](absl::string_view message) {
        return absl::InvalidArgumentError(absl::StrCat(buffer_label(graph, id), ": ", message));
    };
    if (parent_id >= static_cast<BufferId>(graph.buffers.size()) || parent_id == id) {
        return fail(absl::StrCat("a view of buffer b", parent_id, ", which does not exist"));
    }
    BufferId root = id;
    for (size_t steps = 0; graph.buffers[root].is_view(); ++steps) {
        root = graph.buffers[root].parent;
        if (steps > graph.buffers.size() || root >= static_cast<BufferId>(graph.buffers.size())) {
            return fail("its chain of parents has a cycle or leaves the graph");
        }
    }
    const Buffer& parent = graph.buffers[parent_id];
    const std::string of = absl::StrCat("a view of ", buffer_label(graph, parent_id));
    if (parent.device != view.device || parent.dtype != view.dtype) {
        return fail(absl::StrCat(of, " on another device or in another dtype"));
    }
    if (view.stats) {
        return fail(absl::StrCat(of, " with statistics"));
    }
    const std::optional<int64_t> elements = contiguous_offset(parent.box, view.box);
    if (!elements) {
        return fail(absl::StrCat(of, " that is not one contiguous run inside it"));
    }
    const int64_t offset = parent.offset + *elements * ir::dtype_size(view.dtype);
    if (view.offset != offset) {
        return fail(absl::StrCat(of, " at offset ", view.offset, "; its position gives ", offset));
    }
    const Buffer& owner = graph.buffers[root];
    if (view.persistent != owner.persistent || view.resident != owner.resident) {
        return fail(absl::StrCat(of, " whose persistent or resident flag differs from b", root,
                                 "'s, which owns the memory"));
    }
    return absl::OkStatus();
}

// A view's root stays alive while any view of it is used: no other transient buffer whose
// arena bytes overlap the root's is used between the first and last node using the root or
// one of its views.
absl::Status check_views_alive(const ExecGraph& graph) {
    const int buffers = static_cast<int>(graph.buffers.size());
    std::vector<int> first(buffers, -1), last(buffers, -1);
    std::vector<bool> has_views(buffers, false);
    for (BufferId id = 0; id < buffers; ++id) {
        if (graph.buffers[id].is_view()) {
            has_views[graph.view_root(id)] = true;
        }
    }
    for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
        for (const std::vector<BufferId>* ids : {&graph.nodes[n].inputs, &graph.nodes[n].outputs}) {
            for (BufferId id : *ids) {
                const BufferId root = graph.view_root(id);
                first[root] = first[root] < 0 ? n : std::min(first[root], n);
                last[root] = std::max(last[root], n);
            }
        }
    }
    // Per device, the used transient roots by offset.
    std::vector<std::vector<BufferId>> roots(graph.devices);
    for (BufferId id = 0; id < buffers; ++id) {
        const Buffer& b = graph.buffers[id];
        if (!b.is_view() && !b.persistent && first[id] >= 0 && b.bytes() > 0) {
            roots[b.device].push_back(id);
        }
    }
    for (std::vector<BufferId>& on_device : roots) {
        std::sort(on_device.begin(), on_device.end(), [&](BufferId a, BufferId b) {
            return graph.buffers[a].offset < graph.buffers[b].offset;
        });
        for (size_t i = 0; i < on_device.size(); ++i) {
            const Buffer& a = graph.buffers[on_device[i]];
            for (size_t j = i + 1; j < on_device.size(); ++j) {
                const Buffer& b = graph.buffers[on_device[j]];
                if (b.offset >= a.offset + a.bytes()) {
                    break;
                }
                const BufferId x = on_device[i];
                const BufferId y = on_device[j];
                if ((has_views[x] || has_views[y]) && first[x] <= last[y] && first[y] <= last[x]) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        buffer_label(graph, has_views[x] ? x : y),
                        ", the parent of views, shares arena bytes with ",
                        buffer_label(graph, has_views[x] ? y : x), " while both are in use"));
                }
            }
        }
    }
    return absl::OkStatus();
}

// Every error below names the node; `fail` adds the prefix.
class NodeChecker {
public:
    NodeChecker(const ExecGraph& graph, int node_idx)
        : graph_(graph), node_idx_(node_idx), node_(graph.nodes[node_idx]) {}

    absl::Status check() {
        if (node_.device < 0 || node_.device >= graph_.devices) {
            return fail(absl::StrCat("device ", node_.device, " outside the graph's ",
                                     graph_.devices, " devices"));
        }
        for (int dep : node_.deps) {
            if (dep < 0 || dep >= node_idx_) {
                return fail(
                    absl::StrCat("dependency on node ", dep, ", which is not an earlier node"));
            }
        }
        for (const std::vector<BufferId>* ids : {&node_.inputs, &node_.outputs}) {
            for (BufferId id : *ids) {
                if (id < 0 || id >= static_cast<BufferId>(graph_.buffers.size())) {
                    return fail(absl::StrCat("buffer b", id, " does not exist (the graph has ",
                                             graph_.buffers.size(), " buffers)"));
                }
            }
        }
        EINSUMMABLE_RETURN_IF_ERROR(check_kind());
        EINSUMMABLE_RETURN_IF_ERROR(check_stats());
        return check_no_overlap();
    }

private:
    absl::Status fail(absl::string_view message) const {
        return absl::InvalidArgumentError(
            absl::StrCat(node_label(graph_, node_idx_), ": ", message));
    }

    const Buffer& buffer(BufferId id) const { return graph_.buffers[id]; }

    absl::Status expect_counts(size_t min_inputs, size_t max_inputs) const {
        if (node_.inputs.size() < min_inputs || node_.inputs.size() > max_inputs ||
            node_.outputs.size() != 1) {
            return fail(absl::StrCat("has ", node_.inputs.size(), " inputs and ",
                                     node_.outputs.size(), " outputs"));
        }
        return absl::OkStatus();
    }

    absl::Status expect_on_device(BufferId id) const {
        if (buffer(id).device != node_.device) {
            return fail(absl::StrCat(buffer_label(graph_, id), " is not on the node's device ",
                                     node_.device));
        }
        return absl::OkStatus();
    }

    absl::Status expect_same_dtype(BufferId input, BufferId output) const {
        if (buffer(input).dtype != buffer(output).dtype) {
            return fail(absl::StrCat(buffer_label(graph_, input), " and ",
                                     buffer_label(graph_, output), " differ in dtype"));
        }
        return absl::OkStatus();
    }

    // Inputs and outputs of kinds that read and write on the node's device in one dtype.
    absl::Status expect_local(bool inputs_local) const {
        const BufferId output = node_.outputs[0];
        EINSUMMABLE_RETURN_IF_ERROR(expect_on_device(output));
        for (BufferId input : node_.inputs) {
            if (inputs_local) {
                EINSUMMABLE_RETURN_IF_ERROR(expect_on_device(input));
            }
            EINSUMMABLE_RETURN_IF_ERROR(expect_same_dtype(input, output));
        }
        return absl::OkStatus();
    }

    absl::Status check_kind() const {
        switch (node_.kind) {
        case NodeKind::slice:
            return check_slice();
        case NodeKind::copy:
            return check_copy();
        case NodeKind::aggregate:
            return check_aggregate();
        case NodeKind::concat:
            return check_concat();
        case NodeKind::kernel:
            return check_kernel();
        case NodeKind::send:
        case NodeKind::recv:
            return check_message();
        }
        return fail("unknown node kind");
    }

    // A send reads at most one buffer on its device and writes none; a recv writes at most one,
    // not resident, and reads none (none: a token). Both name a peer rank, its device and a tag.
    absl::Status check_message() const {
        const bool send = node_.kind == NodeKind::send;
        const std::vector<BufferId>& data = send ? node_.inputs : node_.outputs;
        const std::vector<BufferId>& none = send ? node_.outputs : node_.inputs;
        if (data.size() > 1 || !none.empty()) {
            return fail(absl::StrCat("has ", node_.inputs.size(), " inputs and ",
                                     node_.outputs.size(), " outputs"));
        }
        if (node_.peer < 0 || node_.peer_device < 0 || node_.tag < 0) {
            return fail(absl::StrCat("peer rank ", node_.peer, ", peer device ", node_.peer_device,
                                     " and tag ", node_.tag, ": all must be at least 0"));
        }
        if (!data.empty()) {
            EINSUMMABLE_RETURN_IF_ERROR(expect_on_device(data[0]));
        }
        return absl::OkStatus();
    }

    absl::Status check_slice() const {
        EINSUMMABLE_RETURN_IF_ERROR(expect_counts(1, 1));
        EINSUMMABLE_RETURN_IF_ERROR(expect_local(true));
        const Box& in = buffer(node_.inputs[0]).box;
        const Box& out = buffer(node_.outputs[0]).box;
        if (in.rank() != out.rank() || !in.contains(out)) {
            return fail(absl::StrCat("slice ", out.to_string(), " is not inside ",
                                     buffer_label(graph_, node_.inputs[0])));
        }
        return absl::OkStatus();
    }

    absl::Status check_copy() const {
        EINSUMMABLE_RETURN_IF_ERROR(expect_counts(1, 1));
        EINSUMMABLE_RETURN_IF_ERROR(expect_local(false));
        if (buffer(node_.inputs[0]).box.shape() != buffer(node_.outputs[0]).box.shape()) {
            return fail(absl::StrCat(buffer_label(graph_, node_.inputs[0]), " and ",
                                     buffer_label(graph_, node_.outputs[0]), " differ in shape"));
        }
        return absl::OkStatus();
    }

    absl::Status check_aggregate() const {
        EINSUMMABLE_RETURN_IF_ERROR(expect_counts(1, SIZE_MAX));
        EINSUMMABLE_RETURN_IF_ERROR(expect_local(true));
        if (node_.agg == ir::AggOp::none && node_.inputs.size() > 1) {
            return fail("aggregation `none` cannot combine several inputs");
        }
        const Box& out = buffer(node_.outputs[0]).box;
        for (BufferId input : node_.inputs) {
            if (buffer(input).box.shape() != out.shape()) {
                return fail(absl::StrCat(buffer_label(graph_, input), " differs in shape from ",
                                         buffer_label(graph_, node_.outputs[0])));
            }
        }
        return absl::OkStatus();
    }

    absl::Status check_concat() const {
        EINSUMMABLE_RETURN_IF_ERROR(expect_counts(1, SIZE_MAX));
        EINSUMMABLE_RETURN_IF_ERROR(expect_local(true));
        const Box& out = buffer(node_.outputs[0]).box;
        std::vector<Box> parts;
        for (BufferId input : node_.inputs) {
            parts.push_back(buffer(input).box);
            if (parts.back().rank() != out.rank()) {
                return fail(absl::StrCat(buffer_label(graph_, input), " differs in rank from ",
                                         buffer_label(graph_, node_.outputs[0])));
            }
        }
        if (absl::Status status = ir::check_tiles(parts, out); !status.ok()) {
            return fail(absl::StrCat("inputs do not tile the output: ", status.message()));
        }
        return absl::OkStatus();
    }

    absl::Status check_kernel() const {
        if (node_.op == nullptr) {
            return fail("no operator");
        }
        if (node_.spec.inputs.size() != node_.inputs.size() ||
            node_.spec.outputs.size() != node_.outputs.size()) {
            return fail(absl::StrCat("function spec has ", node_.spec.inputs.size(), " inputs and ",
                                     node_.spec.outputs.size(), " outputs; the node has ",
                                     node_.inputs.size(), " and ", node_.outputs.size()));
        }
        const std::pair<const std::vector<BufferId>*, const std::vector<Box>*> sides[] = {
            {&node_.inputs, &node_.spec.inputs}, {&node_.outputs, &node_.spec.outputs}};
        for (const auto& [ids, boxes] : sides) {
            for (size_t i = 0; i < ids->size(); ++i) {
                const BufferId id = (*ids)[i];
                EINSUMMABLE_RETURN_IF_ERROR(expect_on_device(id));
                if (buffer(id).box.shape() != (*boxes)[i].shape()) {
                    return fail(absl::StrCat(buffer_label(graph_, id),
                                             " differs in shape from the spec's block ",
                                             (*boxes)[i].to_string()));
                }
            }
        }
        return absl::OkStatus();
    }

    // Statistics (Buffer::stats): a kernel or a log_sum_exp or arg_max aggregate makes them,
    // slices, copies and concats carry them (a slice may drop them), nothing else has them.
    absl::Status check_stats() const {
        if (node_.kind == NodeKind::send || node_.kind == NodeKind::recv) {
            return absl::OkStatus(); // a message carries its buffer whole, statistics included
        }
        auto stats = [&](BufferId id) { return buffer(id).stats; };
        const bool out = stats(node_.outputs[0]);
        auto mismatch = [&](BufferId input, absl::string_view want) {
            return fail(absl::StrCat(buffer_label(graph_, input), want, " statistics", " (output ",
                                     buffer_label(graph_, node_.outputs[0]),
                                     out ? " has them)" : " has none)"));
        };
        switch (node_.kind) {
        case NodeKind::slice:
            if (out && !stats(node_.inputs[0])) {
                return mismatch(node_.inputs[0], " has no");
            }
            break;
        case NodeKind::copy:
        case NodeKind::concat:
            for (BufferId input : node_.inputs) {
                if (stats(input) != out) {
                    return mismatch(input, out ? " has no" : " has");
                }
            }
            break;
        case NodeKind::aggregate:
            for (BufferId input : node_.inputs) {
                if (stats(input) != ir::carries_stats(node_.agg)) {
                    return mismatch(input, ir::carries_stats(node_.agg) ? " has no" : " has");
                }
            }
            if (out && !ir::carries_stats(node_.agg)) {
                return fail(
                    absl::StrCat("aggregation ", ir::agg_op_name(node_.agg), " writes statistics"));
            }
            break;
        case NodeKind::kernel:
            for (BufferId input : node_.inputs) {
                if (stats(input)) {
                    return mismatch(input, " has");
                }
            }
            break;
        case NodeKind::send:
        case NodeKind::recv:
            break;
        }
        for (BufferId id : node_.outputs) {
            if (buffer(id).stats && buffer(id).persistent) {
                return fail(
                    absl::StrCat(buffer_label(graph_, id), " is persistent with statistics"));
            }
        }
        return absl::OkStatus();
    }

    // A node's outputs may share no arena byte with its inputs or other outputs: the kernels
    // assume they do not alias. The one exception is an update in place of a resident state
    // (ir::in_place_input): a kernel whose output 0 is that input's own resident
    // buffer, the only way a node writes a resident buffer.
    absl::Status check_no_overlap() const {
        const int in_place = node_.kind == NodeKind::kernel && node_.op != nullptr
                                 ? ir::in_place_input(*node_.op)
                                 : -1;
        auto updated_in_place = [&](size_t o, size_t i) {
            return o == 0 && static_cast<int>(i) == in_place &&
                   node_.outputs[o] == node_.inputs[i] && buffer(node_.inputs[i]).resident &&
                   !buffer(node_.inputs[i]).is_view();
        };
        auto overlap = [&](BufferId a, BufferId b) {
            const Buffer& x = buffer(a);
            const Buffer& y = buffer(b);
            return x.device == y.device && x.resident == y.resident && x.bytes() > 0 &&
                   y.bytes() > 0 && x.offset < y.offset + y.bytes() &&
                   y.offset < x.offset + x.bytes();
        };
        for (size_t o = 0; o < node_.outputs.size(); ++o) {
            const BufferId output = node_.outputs[o];
            const bool in_place_output = in_place >= 0 &&
                                         in_place < static_cast<int>(node_.inputs.size()) &&
                                         updated_in_place(o, static_cast<size_t>(in_place));
            if (buffer(output).resident && !in_place_output) {
                return fail(absl::StrCat("writes resident ", buffer_label(graph_, output),
                                         "; resident buffers are only read, or updated in place "
                                         "by the operator's in-place input"));
            }
            for (size_t i = 0; i < node_.inputs.size(); ++i) {
                const BufferId input = node_.inputs[i];
                if (updated_in_place(o, i)) {
                    continue;
                }
                if (overlap(output, input)) {
                    return fail(absl::StrCat(buffer_label(graph_, output), " overlaps input ",
                                             buffer_label(graph_, input), " in the arena"));
                }
            }
            for (size_t other = o + 1; other < node_.outputs.size(); ++other) {
                if (overlap(output, node_.outputs[other])) {
                    return fail(absl::StrCat(buffer_label(graph_, output), " overlaps output ",
                                             buffer_label(graph_, node_.outputs[other]),
                                             " in the arena"));
                }
            }
        }
        return absl::OkStatus();
    }

    const ExecGraph& graph_;
    const int node_idx_;
    const ExecNode& node_;
};

} // namespace

absl::Status check_exec_graph(const ExecGraph& graph, int backend_devices) {
    if (graph.devices < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("the graph has ", graph.devices, " devices; it needs at least one"));
    }
    if (graph.devices > backend_devices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the graph needs ", graph.devices, " devices; the cpu backend has ", backend_devices));
    }
    if (!graph.arena_bytes.empty() &&
        graph.arena_bytes.size() != static_cast<size_t>(graph.devices)) {
        return absl::InvalidArgumentError(absl::StrCat("the graph has ", graph.devices,
                                                       " devices but ", graph.arena_bytes.size(),
                                                       " arena sizes"));
    }
    for (size_t d = 0; d < graph.arena_bytes.size(); ++d) {
        if (graph.arena_bytes[d] < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("device ", d, "'s arena has ", graph.arena_bytes[d], " bytes"));
        }
    }
    if (!graph.resident_bytes.empty() &&
        graph.resident_bytes.size() != static_cast<size_t>(graph.devices)) {
        return absl::InvalidArgumentError(absl::StrCat("the graph has ", graph.devices,
                                                       " devices but ", graph.resident_bytes.size(),
                                                       " resident arena sizes"));
    }
    for (size_t d = 0; d < graph.resident_bytes.size(); ++d) {
        if (graph.resident_bytes[d] < 0) {
            return absl::InvalidArgumentError(absl::StrCat("device ", d, "'s resident arena has ",
                                                           graph.resident_bytes[d], " bytes"));
        }
    }
    for (BufferId id = 0; id < static_cast<BufferId>(graph.buffers.size()); ++id) {
        EINSUMMABLE_RETURN_IF_ERROR(check_buffer(graph, id));
    }
    for (BufferId id = 0; id < static_cast<BufferId>(graph.buffers.size()); ++id) {
        if (graph.buffers[id].is_view()) {
            EINSUMMABLE_RETURN_IF_ERROR(check_view(graph, id));
        }
    }
    for (int node_idx = 0; node_idx < static_cast<int>(graph.nodes.size()); ++node_idx) {
        EINSUMMABLE_RETURN_IF_ERROR(NodeChecker(graph, node_idx).check());
    }
    return check_views_alive(graph);
}

} // namespace einsummable::physical
