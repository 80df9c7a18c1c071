#include "runtime/cuda/graph_plan.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/ops/write_rows.h"
#include "compiler/ir/partial_block.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/physical/exec_graph_check.h"

namespace einsummable::runtime::cuda {
namespace {

using physical::Buffer;
using physical::ExecGraph;
using physical::ExecNode;
using physical::NodeKind;

// Staging ranges start on this boundary (cudaMemcpy is fastest from aligned host memory).
constexpr int64_t kStagingAlignment = 256;

// `bytes` bytes of buffer `id`'s memory from `offset` into it, holding `region`: in the
// resident arena for a resident buffer, else in the executable's arena.
MemoryRange buffer_range(const ExecGraph& graph, physical::BufferId id, int64_t offset,
                         int64_t bytes, const ir::Box& region, BufferPart part) {
    const Buffer& buffer = graph.buffers[id];
    return {.space = buffer.resident ? MemorySpace::resident : MemorySpace::arena,
            .device = buffer.device,
            .offset = buffer.offset + offset,
            .bytes = bytes,
            .buffer = id,
            .region = region,
            .part = part};
}

// A part of a buffer as a dense row-major block: its box, element size and first byte.
struct PartLayout {
    ir::Box box;
    int64_t element_bytes = 0;
    int64_t begin = 0;
};

PartLayout layout_of(const Buffer& buffer, BufferPart part) {
    if (part == BufferPart::stats) {
        return {ir::stats_box(buffer.box), static_cast<int64_t>(sizeof(float)),
                buffer.stats_offset()};
    }
    return {buffer.box, ir::dtype_size(buffer.dtype), 0};
}

MemoryRange whole(const ExecGraph& graph, physical::BufferId id) {
    const Buffer& buffer = graph.buffers[id];
    return buffer_range(graph, id, 0, buffer.bytes(), buffer.box, BufferPart::all);
}

// When `region` (its elements, or its statistics) is one contiguous run of the row-major
// block of that part of the buffer, the byte range it occupies inside the buffer.
std::optional<MemoryRange> contiguous_part(const ExecGraph& graph, physical::BufferId id,
                                           const ir::Box& region, BufferPart part) {
    const PartLayout layout = layout_of(graph.buffers[id], part);
    const ir::Box& outer = layout.box;
    const ir::Box inner = part == BufferPart::stats ? ir::stats_box(region) : region;
    const std::optional<int64_t> offset = physical::contiguous_offset(outer, inner);
    if (!offset.has_value()) {
        return std::nullopt;
    }
    return buffer_range(graph, id, layout.begin + *offset * layout.element_bytes,
                        inner.volume() * layout.element_bytes, region, part);
}

// Byte ranges of `region` inside `buffer`: exact when contiguous, otherwise the span from its
// first to its last byte (conservative, for the checks).
MemoryRange span_of(const ExecGraph& graph, physical::BufferId id, const ir::Box& region,
                    BufferPart part) {
    if (std::optional<MemoryRange> exact = contiguous_part(graph, id, region, part)) {
        return *exact;
    }
    const PartLayout layout = layout_of(graph.buffers[id], part);
    const ir::Box& outer = layout.box;
    const ir::Box inner = part == BufferPart::stats ? ir::stats_box(region) : region;
    int64_t first = 0;
    int64_t last = 0;
    for (int dim = 0; dim < outer.rank(); ++dim) {
        first = first * outer[dim].size() + (inner[dim].lower - outer[dim].lower);
        last = last * outer[dim].size() + (inner[dim].upper - 1 - outer[dim].lower);
    }
    return buffer_range(graph, id, layout.begin + first * layout.element_bytes,
                        (last - first + 1) * layout.element_bytes, region, part);
}

class Planner {
public:
    Planner(const ExecGraph& graph, const GraphPlanOptions& options)
        : graph_(graph), options_(options) {}

    GraphPlan run() {
        plan_.ops_of_node.resize(graph_.nodes.size());
        for (int node_idx = 0; node_idx < static_cast<int>(graph_.nodes.size()); ++node_idx) {
            add_node(node_idx);
        }
        return std::move(plan_);
    }

private:
    const Buffer& buffer(physical::BufferId id) const { return graph_.buffers[id]; }

    // The deps every op of `node_idx` starts with: every op of every dep node.
    std::vector<int> node_deps(const ExecNode& node) const {
        std::vector<int> deps;
        for (int dep : node.deps) {
            const std::vector<int>& ops = plan_.ops_of_node[dep];
            deps.insert(deps.end(), ops.begin(), ops.end());
        }
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        return deps;
    }

    int add_op(int node_idx, GraphOp op) {
        op.exec_node = node_idx;
        std::sort(op.deps.begin(), op.deps.end());
        op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
        const int idx = static_cast<int>(plan_.ops.size());
        plan_.ops.push_back(std::move(op));
        plan_.ops_of_node[node_idx].push_back(idx);
        return idx;
    }

    // Orders `op` after the previous op of the same chain (copies leaving a device, scratch
    // users of a device) and makes it the chain's last.
    static void chain(std::map<int, int>& last_by_device, int device, GraphOp& op) {
        auto it = last_by_device.find(device);
        if (it != last_by_device.end()) {
            op.deps.push_back(it->second);
        }
    }

    void add_node(int node_idx) {
        const ExecNode& node = graph_.nodes[node_idx];
        const std::vector<int> deps = node_deps(node);
        switch (node.kind) {
        case NodeKind::kernel:
        case NodeKind::aggregate: {
            GraphOp op;
            op.kind = node.kind == NodeKind::kernel ? GraphOpKind::kernel : GraphOpKind::aggregate;
            op.device = node.device;
            op.deps = deps;
            for (physical::BufferId id : node.inputs) {
                op.reads.push_back(whole(graph_, id));
            }
            for (physical::BufferId id : node.outputs) {
                op.writes.push_back(whole(graph_, id));
            }
            const bool scratch = node.kind == NodeKind::kernel &&
                                 options_.uses_scratch[static_cast<size_t>(node_idx)];
            if (scratch) {
                chain(last_scratch_user_, node.device, op);
            }
            const int idx = add_op(node_idx, std::move(op));
            if (scratch) {
                last_scratch_user_[node.device] = idx;
            }
            return;
        }
        case NodeKind::copy:
            add_copy(node_idx, node, deps);
            return;
        case NodeKind::slice:
            add_regions(node_idx, node, deps, 0, buffer(node.outputs[0]).box);
            return;
        case NodeKind::concat:
            for (size_t input = 0; input < node.inputs.size(); ++input) {
                add_regions(node_idx, node, deps, static_cast<int>(input),
                            buffer(node.inputs[input]).box);
            }
            return;
        case NodeKind::send:
        case NodeKind::recv:
            add_message(node_idx, node, deps);
            return;
        }
    }

    // A range of the host staging memory of its own for `bytes` bytes.
    MemoryRange new_staging(int64_t bytes) {
        const MemoryRange staging{.space = MemorySpace::staging,
                                  .device = -1,
                                  .offset = plan_.staging_bytes,
                                  .bytes = bytes,
                                  .buffer = -1,
                                  .region = ir::Box()};
        plan_.staging_bytes +=
            (bytes + kStagingAlignment - 1) / kStagingAlignment * kStagingAlignment;
        return staging;
    }

    void add_message(int node_idx, const ExecNode& node, const std::vector<int>& deps) {
        const bool send = node.kind == NodeKind::send;
        const std::vector<physical::BufferId>& data = send ? node.inputs : node.outputs;
        GraphOp op;
        op.kind = send ? GraphOpKind::send : GraphOpKind::recv;
        op.device = node.device;
        op.deps = deps;
        op.peer = node.peer;
        op.peer_device = node.peer_device;
        op.tag = node.tag;
        if (options_.message_path == MessagePath::device) {
            if (!data.empty() && send) {
                op.src = whole(graph_, data[0]);
                op.reads.push_back(op.src);
            } else if (!data.empty()) {
                op.dst = whole(graph_, data[0]);
                op.writes.push_back(op.dst);
            }
            const int gpu = options_.gpu_of_device[static_cast<size_t>(node.device)];
            chain(last_message_, gpu, op);
            last_message_[gpu] = add_op(node_idx, std::move(op));
            return;
        }
        if (data.empty()) {
            add_op(node_idx, std::move(op)); // a token
            return;
        }
        const MemoryRange block = whole(graph_, data[0]);
        const MemoryRange staging = new_staging(block.bytes);
        if (send) {
            // Out to the host (a copy leaving the device, in node order), then sent from there.
            GraphOp out;
            out.kind = GraphOpKind::to_host;
            out.device = node.device;
            out.deps = deps;
            out.src = block;
            out.dst = staging;
            out.reads.push_back(block);
            out.writes.push_back(staging);
            chain(last_send_, node.device, out);
            const int out_idx = add_op(node_idx, std::move(out));
            last_send_[node.device] = out_idx;
            op.deps.assign(1, out_idx);
            op.src = staging;
            op.reads.push_back(staging);
            add_op(node_idx, std::move(op));
            return;
        }
        op.dst = staging;
        op.writes.push_back(staging);
        const int recv_idx = add_op(node_idx, std::move(op));
        GraphOp in;
        in.kind = GraphOpKind::from_host;
        in.device = node.device;
        in.deps.push_back(recv_idx);
        in.src = staging;
        in.dst = block;
        in.reads.push_back(staging);
        in.writes.push_back(block);
        add_op(node_idx, std::move(in));
    }

    void add_copy(int node_idx, const ExecNode& node, const std::vector<int>& deps) {
        const Buffer& from = buffer(node.inputs[0]);
        const Buffer& to = buffer(node.outputs[0]);
        GraphOp op;
        op.device = node.device;
        op.deps = deps;
        op.src = whole(graph_, node.inputs[0]);
        op.dst = whole(graph_, node.outputs[0]);
        op.reads = {op.src};
        op.writes = {op.dst};
        if (from.bytes() == 0) {
            op.kind = GraphOpKind::empty;
            add_op(node_idx, std::move(op));
            return;
        }
        const int src_gpu = options_.gpu_of_device[static_cast<size_t>(from.device)];
        const int dst_gpu = options_.gpu_of_device[static_cast<size_t>(to.device)];
        const bool direct = src_gpu == dst_gpu || (options_.peer_access[src_gpu][dst_gpu] &&
                                                   options_.peer_access[dst_gpu][src_gpu]);
        if (direct) {
            op.kind = GraphOpKind::memcpy;
            chain(last_send_, from.device, op);
            last_send_[from.device] = add_op(node_idx, std::move(op));
            return;
        }
        // Through pinned host memory: the source GPU copies out, the destination GPU copies in.
        const MemoryRange staging = new_staging(from.bytes());
        GraphOp out = op;
        out.kind = GraphOpKind::to_host;
        out.device = from.device;
        out.dst = staging;
        out.writes = {staging};
        chain(last_send_, from.device, out);
        const int out_idx = add_op(node_idx, std::move(out));
        last_send_[from.device] = out_idx;
        op.kind = GraphOpKind::from_host;
        op.src = staging;
        op.reads = {staging};
        op.deps = {out_idx};
        add_op(node_idx, std::move(op));
    }

    // Copies `region` from node.inputs[input] into node.outputs[0] on the node's device, and
    // its statistics when the output carries them (a slice or concat of partial results).
    void add_regions(int node_idx, const ExecNode& node, const std::vector<int>& deps, int input,
                     const ir::Box& region) {
        add_region(node_idx, node, deps, input, region, BufferPart::elements);
        if (buffer(node.outputs[0]).stats) {
            add_region(node_idx, node, deps, input, region, BufferPart::stats);
        }
    }

    void add_region(int node_idx, const ExecNode& node, const std::vector<int>& deps, int input,
                    const ir::Box& region, BufferPart part) {
        GraphOp op;
        op.device = node.device;
        op.deps = deps;
        op.input = input;
        op.region = region;
        op.stats = part == BufferPart::stats;
        const physical::BufferId from_id = node.inputs[static_cast<size_t>(input)];
        const physical::BufferId to_id = node.outputs[0];
        op.reads = {span_of(graph_, from_id, region, part)};
        op.writes = {span_of(graph_, to_id, region, part)};
        const std::optional<MemoryRange> src = contiguous_part(graph_, from_id, region, part);
        const std::optional<MemoryRange> dst = contiguous_part(graph_, to_id, region, part);
        const int64_t volume = op.stats ? ir::stats_box(region).volume() : region.volume();
        if (volume == 0) {
            op.kind = GraphOpKind::empty;
        } else if (src && dst) {
            op.kind = GraphOpKind::memcpy;
            op.src = *src;
            op.dst = *dst;
        } else {
            op.kind = GraphOpKind::region_copy;
        }
        add_op(node_idx, std::move(op));
    }

    const ExecGraph& graph_;
    const GraphPlanOptions& options_;
    GraphPlan plan_;
    std::map<int, int> last_send_;         // device -> its last copy out
    std::map<int, int> last_scratch_user_; // device -> its last kernel using scratch
    std::map<int, int> last_message_;      // GPU -> its last message (device path)
};

// Which ops each op reaches (itself included), as bitsets over ops.
class Reachability {
public:
    explicit Reachability(const GraphPlan& plan)
        : words_((plan.ops.size() + 63) / 64), bits_(plan.ops.size() * words_, 0) {
        std::vector<std::vector<int>> successors(plan.ops.size());
        for (size_t op = 0; op < plan.ops.size(); ++op) {
            set(op, op);
            for (int dep : plan.ops[op].deps) {
                successors[static_cast<size_t>(dep)].push_back(static_cast<int>(op));
            }
        }
        // Deps are earlier ops, so walking backwards closes every successor before its deps.
        for (size_t op = plan.ops.size(); op-- > 0;) {
            for (int next : successors[op]) {
                for (size_t word = 0; word < words_; ++word) {
                    bits_[op * words_ + word] |= bits_[static_cast<size_t>(next) * words_ + word];
                }
            }
        }
    }

    bool reaches(int from, int to) const {
        const auto target = static_cast<size_t>(to);
        return (bits_[static_cast<size_t>(from) * words_ + target / 64] >> (target % 64)) & 1u;
    }

private:
    void set(size_t from, size_t to) { bits_[from * words_ + to / 64] |= uint64_t{1} << (to % 64); }

    size_t words_;
    std::vector<uint64_t> bits_;
};

bool overlap(const MemoryRange& a, const MemoryRange& b) {
    if (a.buffer >= 0 && a.buffer == b.buffer) {
        // Two regions of one buffer: exact, whether or not they are contiguous. A buffer's
        // elements and its statistics are disjoint bytes; either meets the whole buffer.
        const bool stats = a.part == BufferPart::stats || b.part == BufferPart::stats;
        if (stats && (a.part == BufferPart::elements || b.part == BufferPart::elements)) {
            return false;
        }
        std::optional<ir::Box> common =
            stats ? ir::stats_box(a.region).intersect(ir::stats_box(b.region))
                  : a.region.intersect(b.region);
        return common.has_value() && common->volume() > 0;
    }
    // Different buffers (or staging): byte spans in one memory space, exact for whole buffers
    // and a bound for strided regions, which lie inside their buffer's bytes.
    return a.space == b.space && a.device == b.device && a.bytes > 0 && b.bytes > 0 &&
           a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

std::string op_label(const ExecGraph& graph, const GraphPlan& plan, int op) {
    return absl::StrCat(
        "op ", op, " (", graph_op_kind_name(plan.ops[static_cast<size_t>(op)].kind), " of ",
        physical::node_label(graph, plan.ops[static_cast<size_t>(op)].exec_node), ")");
}

bool leaves_device(const GraphOp& op) {
    return (op.kind == GraphOpKind::memcpy || op.kind == GraphOpKind::to_host) &&
           op.src.device != op.dst.device;
}

} // namespace

const char* graph_op_kind_name(GraphOpKind kind) {
    switch (kind) {
    case GraphOpKind::kernel:
        return "kernel";
    case GraphOpKind::aggregate:
        return "aggregate";
    case GraphOpKind::memcpy:
        return "memcpy";
    case GraphOpKind::to_host:
        return "to_host";
    case GraphOpKind::from_host:
        return "from_host";
    case GraphOpKind::region_copy:
        return "region_copy";
    case GraphOpKind::send:
        return "send";
    case GraphOpKind::recv:
        return "recv";
    case GraphOpKind::empty:
        return "empty";
    }
    return "?";
}

std::string GraphPlan::summary() const {
    std::map<std::string, int> counts;
    for (const GraphOp& op : ops) {
        ++counts[graph_op_kind_name(op.kind)];
    }
    std::vector<std::string> parts;
    for (const auto& [kind, count] : counts) {
        parts.push_back(absl::StrCat(count, " ", kind));
    }
    return absl::StrJoin(parts, ", ");
}

absl::StatusOr<GraphPlan> plan_graph(const ExecGraph& graph, const GraphPlanOptions& options) {
    if (options.gpu_of_device.size() < static_cast<size_t>(graph.devices)) {
        return absl::InvalidArgumentError(
            absl::StrCat("the graph uses ", graph.devices, " devices; only ",
                         options.gpu_of_device.size(), " are mapped to GPUs"));
    }
    for (size_t device = 0; device < options.gpu_of_device.size(); ++device) {
        const int gpu = options.gpu_of_device[device];
        if (gpu < 0 || static_cast<size_t>(gpu) >= options.peer_access.size() ||
            options.peer_access[static_cast<size_t>(gpu)].size() < options.peer_access.size()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "device ", device, " maps to GPU ", gpu, ", which the peer-access table (",
                options.peer_access.size(), " GPUs) does not cover"));
        }
    }
    if (options.message_path == MessagePath::device) {
        std::map<int, int> last_tag; // GPU -> the tag of its last message
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const ExecNode& node = graph.nodes[n];
            if (node.kind != NodeKind::send && node.kind != NodeKind::recv) {
                continue;
            }
            const int gpu = options.gpu_of_device[static_cast<size_t>(node.device)];
            auto it = last_tag.find(gpu);
            if (it != last_tag.end() && it->second >= node.tag) {
                return absl::InvalidArgumentError(absl::StrCat(
                    physical::node_label(graph, static_cast<int>(n)), " comes after tag ",
                    it->second, " on GPU ", gpu,
                    ": messages between ranks must come in tag order (split_by_rank's do)"));
            }
            last_tag[gpu] = node.tag;
        }
    }
    if (options.uses_scratch.size() != graph.nodes.size()) {
        return absl::InvalidArgumentError(absl::StrCat("uses_scratch has ",
                                                       options.uses_scratch.size(), " entries for ",
                                                       graph.nodes.size(), " nodes"));
    }
    return Planner(graph, options).run();
}

absl::Status check_graph_plan(const ExecGraph& graph, const GraphPlanOptions& options,
                              const GraphPlan& plan) {
    auto fail = [&](const std::string& message) { return absl::FailedPreconditionError(message); };
    if (plan.ops_of_node.size() != graph.nodes.size()) {
        return fail("the plan does not cover every node");
    }
    const int num_ops = static_cast<int>(plan.ops.size());
    for (int idx = 0; idx < num_ops; ++idx) {
        const GraphOp& op = plan.ops[static_cast<size_t>(idx)];
        for (int dep : op.deps) {
            if (dep < 0 || dep >= idx) {
                return fail(absl::StrCat(op_label(graph, plan, idx), " depends on op ", dep,
                                         ", which is not earlier"));
            }
        }
        const ExecNode& node = graph.nodes[static_cast<size_t>(op.exec_node)];
        const int expected_device =
            op.kind == GraphOpKind::to_host ? graph.buffers[node.inputs[0]].device : node.device;
        if (op.device != expected_device) {
            return fail(absl::StrCat(op_label(graph, plan, idx), " runs on device ", op.device,
                                     ", expected ", expected_device));
        }
        if (std::find(plan.ops_of_node[op.exec_node].begin(), plan.ops_of_node[op.exec_node].end(),
                      idx) == plan.ops_of_node[op.exec_node].end()) {
            return fail(absl::StrCat(op_label(graph, plan, idx), " is not listed for its node"));
        }
        // Resident memory is read by other plans at the same time; only the update in place of
        // a resident state writes it (docs/runtime.md "Resident state": runs of such a plan
        // hold the memory alone).
        const bool state_update = node.kind == physical::NodeKind::kernel && node.op != nullptr &&
                                  ir::in_place_input(*node.op) == 0 && !node.outputs.empty() &&
                                  node.outputs[0] == node.inputs[0] &&
                                  graph.buffers[node.outputs[0]].resident;
        for (const MemoryRange& write : op.writes) {
            if (write.space == MemorySpace::resident && !state_update) {
                return fail(
                    absl::StrCat(op_label(graph, plan, idx), " writes device ", write.device,
                                 "'s resident memory, which other plans read at the same time"));
            }
        }
    }
    const Reachability reach(plan);
    for (size_t node_idx = 0; node_idx < graph.nodes.size(); ++node_idx) {
        if (plan.ops_of_node[node_idx].empty()) {
            return fail(absl::StrCat(physical::node_label(graph, static_cast<int>(node_idx)),
                                     " has no op"));
        }
        for (int dep : graph.nodes[node_idx].deps) {
            for (int from : plan.ops_of_node[static_cast<size_t>(dep)]) {
                for (int to : plan.ops_of_node[node_idx]) {
                    if (!reach.reaches(from, to)) {
                        return fail(absl::StrCat(op_label(graph, plan, to), " does not wait for ",
                                                 op_label(graph, plan, from)));
                    }
                }
            }
        }
    }
    // Conflicting accesses: one writes what the other reads or writes.
    for (int a = 0; a < num_ops; ++a) {
        const GraphOp& first = plan.ops[static_cast<size_t>(a)];
        for (int b = a + 1; b < num_ops; ++b) {
            const GraphOp& second = plan.ops[static_cast<size_t>(b)];
            bool conflict = false;
            for (const MemoryRange& write : first.writes) {
                for (const MemoryRange& other : second.reads) {
                    conflict = conflict || overlap(write, other);
                }
                for (const MemoryRange& other : second.writes) {
                    conflict = conflict || overlap(write, other);
                }
            }
            for (const MemoryRange& write : second.writes) {
                for (const MemoryRange& other : first.reads) {
                    conflict = conflict || overlap(write, other);
                }
            }
            if (conflict && !reach.reaches(a, b) && !reach.reaches(b, a)) {
                return fail(absl::StrCat(op_label(graph, plan, a), " and ",
                                         op_label(graph, plan, b),
                                         " touch the same bytes and are not ordered"));
            }
        }
    }
    // Per device: copies leaving it in node order; its scratch users one after another. Per
    // GPU on the device path: its messages one after another, in tag order.
    std::map<int, int> last_send;
    std::map<int, int> last_scratch;
    std::map<int, int> last_message;
    for (int idx = 0; idx < num_ops; ++idx) {
        const GraphOp& op = plan.ops[static_cast<size_t>(idx)];
        std::map<int, int>* chain = nullptr;
        int device = 0;
        if ((op.kind == GraphOpKind::send || op.kind == GraphOpKind::recv) &&
            options.message_path == MessagePath::device) {
            chain = &last_message;
            device = options.gpu_of_device[static_cast<size_t>(op.device)];
            auto it = last_message.find(device);
            if (it != last_message.end() &&
                plan.ops[static_cast<size_t>(it->second)].tag >= op.tag) {
                return fail(absl::StrCat(
                    op_label(graph, plan, idx), " (tag ", op.tag, ") follows tag ",
                    plan.ops[static_cast<size_t>(it->second)].tag, " on GPU ", device));
            }
        } else if (leaves_device(op)) {
            chain = &last_send;
            device = op.src.device;
        } else if (op.kind == GraphOpKind::kernel &&
                   options.uses_scratch[static_cast<size_t>(op.exec_node)]) {
            chain = &last_scratch;
            device = op.device;
        }
        if (chain == nullptr) {
            continue;
        }
        auto it = chain->find(device);
        if (it != chain->end() && !reach.reaches(it->second, idx)) {
            return fail(absl::StrCat(
                op_label(graph, plan, idx), " may run before ", op_label(graph, plan, it->second),
                chain == &last_message ? " on GPU " : " on device ", device,
                chain == &last_send      ? " (copies out of a device keep "
                                           "the exchange's order)"
                : chain == &last_scratch ? " (they share the device's scratch)"
                                         : " (one GPU's messages run one at a time, in tag "
                                           "order)"));
        }
        (*chain)[device] = idx;
    }
    return absl::OkStatus();
}

} // namespace einsummable::runtime::cuda
