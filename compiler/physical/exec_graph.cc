#include "compiler/physical/exec_graph.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace einsummable::physical {

absl::string_view node_kind_name(NodeKind kind) {
    switch (kind) {
    case NodeKind::slice:
        return "slice";
    case NodeKind::copy:
        return "copy";
    case NodeKind::aggregate:
        return "aggregate";
    case NodeKind::concat:
        return "concat";
    case NodeKind::kernel:
        return "kernel";
    case NodeKind::send:
        return "send";
    case NodeKind::recv:
        return "recv";
    }
    return "?";
}

std::optional<int64_t> contiguous_offset(const ir::Box& whole, const ir::Box& region) {
    if (whole.rank() != region.rank() || !whole.contains(region)) {
        return std::nullopt;
    }
    const int rank = whole.rank();
    int first_wide = rank; // the first dimension where the region has more than one element
    for (int dim = 0; dim < rank; ++dim) {
        if (region[dim].size() != 1) {
            first_wide = dim;
            break;
        }
    }
    for (int dim = first_wide + 1; dim < rank; ++dim) {
        if (region[dim] != whole[dim]) {
            return std::nullopt;
        }
    }
    int64_t offset = 0;
    for (int dim = 0; dim < rank; ++dim) {
        offset = offset * whole[dim].size() + (region[dim].lower - whole[dim].lower);
    }
    return offset;
}

BufferId ExecGraph::view_root(BufferId id) const {
    // Bounded, so that a cycle of parents (which check_exec_graph refuses) cannot hang.
    for (size_t steps = 0; buffers[id].is_view() && steps < buffers.size(); ++steps) {
        id = buffers[id].parent;
    }
    return id;
}

void ExecGraph::place_views() {
    std::vector<bool> placed(buffers.size(), false);
    // Places `id` after its parent; chains are short (a chunk inside a cell inside a block).
    auto place = [&](auto& self, BufferId id, size_t depth) -> void {
        Buffer& view = buffers[id];
        if (placed[id] || !view.is_view() || depth > buffers.size()) {
            return;
        }
        self(self, view.parent, depth + 1);
        const Buffer& parent = buffers[view.parent];
        const int64_t elements = contiguous_offset(parent.box, view.box).value_or(0);
        view.offset = parent.offset + elements * ir::dtype_size(view.dtype);
        view.persistent = parent.persistent;
        view.resident = parent.resident;
        placed[id] = true;
    };
    for (BufferId id = 0; id < static_cast<BufferId>(buffers.size()); ++id) {
        place(place, id, 0);
    }
}

std::vector<std::vector<int64_t>> ExecGraph::copy_bytes() const {
    std::vector<std::vector<int64_t>> bytes(devices, std::vector<int64_t>(devices, 0));
    for (const ExecNode& node : nodes) {
        if (node.kind == NodeKind::copy) {
            bytes[buffers[node.inputs[0]].device][node.device] += buffers[node.outputs[0]].bytes();
        }
    }
    return bytes;
}

namespace {

std::string buffer_list(const std::vector<BufferId>& ids) {
    return absl::StrJoin(ids, ", ",
                         [](std::string* out, BufferId id) { absl::StrAppend(out, "b", id); });
}

} // namespace

ir::Box saved_output_box(const ExecGraph& graph, const std::vector<BufferId>& blocks) {
    std::vector<ir::Interval> dims = graph.buffers[blocks.front()].box.dims();
    for (BufferId id : blocks) {
        const ir::Box& box = graph.buffers[id].box;
        for (int d = 0; d < box.rank(); ++d) {
            dims[d].lower = std::min(dims[d].lower, box[d].lower);
            dims[d].upper = std::max(dims[d].upper, box[d].upper);
        }
    }
    return ir::Box(std::move(dims));
}

std::string ExecGraph::to_string() const {
    std::string out = absl::StrCat("devices ", devices, "\n");
    for (int d = 0; d < devices; ++d) {
        absl::StrAppend(&out, "arena ", d, ": ", arena_bytes.empty() ? 0 : arena_bytes[d],
                        " bytes\n");
    }
    for (size_t d = 0; d < resident_bytes.size(); ++d) {
        absl::StrAppend(&out, "resident arena ", d, ": ", resident_bytes[d], " bytes\n");
    }
    for (const auto& [name, blocks] : input_blocks) {
        absl::StrAppend(&out, "input ", name, ": ", buffer_list(blocks), "\n");
    }
    for (const auto& [name, blocks] : outputs) {
        absl::StrAppend(&out, "output ", name, ": ", buffer_list(blocks), "\n");
    }
    for (size_t b = 0; b < buffers.size(); ++b) {
        const Buffer& buffer = buffers[b];
        absl::StrAppend(&out, "b", b, " = ", buffer.tensor, buffer.box.to_string(), " ",
                        ir::dtype_name(buffer.dtype), " @", buffer.device, " +", buffer.offset,
                        " (", buffer.bytes(), " B", buffer.stats ? ", lse" : "",
                        buffer.resident     ? ", resident"
                        : buffer.persistent ? ", persistent"
                                            : "",
                        buffer.is_view() ? absl::StrCat(", view of b", buffer.parent) : "", ")\n");
    }
    for (size_t n = 0; n < nodes.size(); ++n) {
        const ExecNode& node = nodes[n];
        absl::StrAppend(&out, "n", n, " @", node.device, " ", node_kind_name(node.kind));
        if (node.kind == NodeKind::aggregate) {
            absl::StrAppend(&out, "(", ir::agg_op_name(node.agg), ")");
        }
        if (node.kind == NodeKind::kernel) {
            absl::StrAppend(&out, " ", node.label);
        }
        absl::StrAppend(&out, " ", buffer_list(node.inputs), " -> ", buffer_list(node.outputs));
        if (node.kind == NodeKind::send || node.kind == NodeKind::recv) {
            absl::StrAppend(&out, node.kind == NodeKind::send ? " to" : " from", " rank ",
                            node.peer, " device ", node.peer_device, " tag ", node.tag);
        }
        if (!node.deps.empty()) {
            absl::StrAppend(&out, " after ", absl::StrJoin(node.deps, ","));
        }
        absl::StrAppend(&out, "\n");
    }
    return out;
}

} // namespace einsummable::physical
