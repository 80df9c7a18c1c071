#include "runtime/cpu/node_ops.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "compiler/ir/dense_block.h"
#include "compiler/ir/partial_block.h"
#include "compiler/support/status_macros.h"
#include "kernels/cpu/kernels.h"

namespace einsummable::runtime::cpu {

using physical::Buffer;
using physical::ExecGraph;
using physical::ExecNode;
using physical::NodeKind;

namespace {

// Per worker thread: f32 staging for buffers stored in other dtypes. Only grows, so steady-state
// runs allocate nothing.
float* scratch(int64_t elements) {
    thread_local std::vector<float> storage;
    if (static_cast<int64_t>(storage.size()) < elements) {
        storage.resize(elements);
    }
    return storage.data();
}

class Views {
public:
    Views(const ExecGraph& graph, absl::Span<std::byte* const> arenas,
          absl::Span<std::byte* const> resident)
        : graph_(graph), arenas_(arenas), resident_(resident) {}

    const Buffer& buffer(physical::BufferId id) const { return graph_.buffers[id]; }
    std::byte* bytes(physical::BufferId id) const {
        const Buffer& b = buffer(id);
        return (b.resident ? resident_ : arenas_)[b.device] + b.offset;
    }
    // The buffer itself can be handed to an f32 kernel: f32 and float-aligned.
    bool direct_f32(physical::BufferId id) const {
        return buffer(id).dtype == ir::DType::f32 &&
               reinterpret_cast<uintptr_t>(bytes(id)) % alignof(float) == 0;
    }

private:
    const ExecGraph& graph_;
    absl::Span<std::byte* const> arenas_;
    absl::Span<std::byte* const> resident_;
};

void load_f32(ir::DType dtype, const std::byte* src, float* dst, int64_t n) {
    if (dtype == ir::DType::f32) {
        std::memcpy(dst, src, n * sizeof(float));
    } else {
        ir::to_f32(dtype, src, dst, n);
    }
}

void store_f32(ir::DType dtype, const float* src, std::byte* dst, int64_t n) {
    if (dtype == ir::DType::f32) {
        std::memcpy(dst, src, n * sizeof(float));
    } else {
        ir::from_f32(dtype, src, dst, n);
    }
}

// The log-sum-exp statistics of a buffer that carries them (Buffer::stats): f32, 4-aligned.
float* stats_of(const Views& views, physical::BufferId id) {
    return reinterpret_cast<float*>(views.bytes(id) + views.buffer(id).stats_offset());
}

// Copies the statistics of `region` from `in` to `out` (both carry them).
void copy_stats(const Views& views, physical::BufferId in, physical::BufferId out,
                const ir::Box& region) {
    ir::copy_region(reinterpret_cast<const std::byte*>(stats_of(views, in)),
                    ir::stats_box(views.buffer(in).box),
                    reinterpret_cast<std::byte*>(stats_of(views, out)),
                    ir::stats_box(views.buffer(out).box), ir::stats_box(region), sizeof(float));
}

void run_slice(const Views& views, const ExecNode& node) {
    const Buffer& in = views.buffer(node.inputs[0]);
    const Buffer& out = views.buffer(node.outputs[0]);
    ir::copy_region(views.bytes(node.inputs[0]), in.box, views.bytes(node.outputs[0]), out.box,
                    out.box, ir::dtype_size(out.dtype));
    if (out.stats) { // else a partial result's statistics are dropped
        copy_stats(views, node.inputs[0], node.outputs[0], out.box);
    }
}

void run_copy(const Views& views, const ExecNode& node) {
    std::memcpy(views.bytes(node.outputs[0]), views.bytes(node.inputs[0]),
                views.buffer(node.outputs[0]).bytes());
}

void run_concat(const Views& views, const ExecNode& node) {
    const Buffer& out = views.buffer(node.outputs[0]);
    std::byte* dst = views.bytes(node.outputs[0]);
    for (physical::BufferId input : node.inputs) {
        const Buffer& in = views.buffer(input);
        ir::copy_region(views.bytes(input), in.box, dst, out.box, in.box,
                        ir::dtype_size(out.dtype));
        if (out.stats) {
            copy_stats(views, input, node.outputs[0], in.box);
        }
    }
}

// An aggregate's parts (of n elements each) loaded as f32 into one scratch block, followed by
// room for the result.
struct StagedParts {
    absl::InlinedVector<const float*, 8> parts;
    float* result = nullptr;
};

StagedParts stage_parts(const Views& views, const ExecNode& node, int64_t n) {
    const size_t count = node.inputs.size();
    float* staging = scratch(n * static_cast<int64_t>(count + 1));
    StagedParts staged;
    for (size_t i = 0; i < count; ++i) {
        float* part = staging + static_cast<int64_t>(i) * n;
        load_f32(views.buffer(node.inputs[i]).dtype, views.bytes(node.inputs[i]), part, n);
        staged.parts.push_back(part);
    }
    staged.result = staging + static_cast<int64_t>(count) * n;
    return staged;
}

// Partial results with statistics — attention split along its keys (log_sum_exp), argmax along
// its vocabulary (arg_max): values staged in f32 where stored otherwise, statistics read and
// written in place.
void run_stats_aggregate(const Views& views, const ExecNode& node) {
    const Buffer& out = views.buffer(node.outputs[0]);
    const int64_t n = out.elements();
    const int64_t vectors = ir::stats_count(out.box);
    const int64_t width = vectors > 0 ? n / vectors : 0;
    const StagedParts staged = stage_parts(views, node, n);
    absl::InlinedVector<const float*, 8> lse;
    for (physical::BufferId input : node.inputs) {
        lse.push_back(stats_of(views, input));
    }
    float* out_stats = out.stats ? stats_of(views, node.outputs[0]) : nullptr;
    if (node.agg == ir::AggOp::arg_max) {
        kernels::cpu::aggregate_arg_max_f32(staged.parts, lse, staged.result, out_stats, vectors);
    } else {
        kernels::cpu::aggregate_log_sum_exp_f32(staged.parts, lse, staged.result, out_stats,
                                                vectors, width);
    }
    store_f32(out.dtype, staged.result, views.bytes(node.outputs[0]), n);
}

// Partial results of top_k split along its vocabulary: rows of k (value, index) pairs, the
// block's last two dimensions [k, 2], staged in f32 and merged row by row.
void run_top_k_aggregate(const Views& views, const ExecNode& node) {
    const Buffer& out = views.buffer(node.outputs[0]);
    const int64_t n = out.elements();
    const int rank = out.box.rank();
    const int64_t k = rank >= 2 ? out.box[rank - 2].size() : 0;
    const StagedParts staged = stage_parts(views, node, n);
    kernels::cpu::aggregate_top_k_f32(staged.parts, staged.result, k > 0 ? n / (2 * k) : 0, k);
    store_f32(out.dtype, staged.result, views.bytes(node.outputs[0]), n);
}

void run_aggregate(const Views& views, const ExecNode& node) {
    const Buffer& out = views.buffer(node.outputs[0]);
    const int64_t n = out.elements();
    if (n == 0) {
        return;
    }
    if (node.inputs.size() == 1) {
        // A single part is the result whatever the aggregation (its statistics, which follow
        // the elements, are kept only when the output carries them).
        std::memcpy(views.bytes(node.outputs[0]), views.bytes(node.inputs[0]), out.bytes());
        return;
    }
    if (ir::carries_stats(node.agg)) {
        run_stats_aggregate(views, node);
        return;
    }
    if (node.agg == ir::AggOp::top_k) {
        run_top_k_aggregate(views, node);
        return;
    }
    bool direct = views.direct_f32(node.outputs[0]);
    for (physical::BufferId input : node.inputs) {
        direct = direct && views.direct_f32(input);
    }
    if (direct) {
        absl::InlinedVector<const float*, 8> parts;
        for (physical::BufferId input : node.inputs) {
            parts.push_back(reinterpret_cast<const float*>(views.bytes(input)));
        }
        kernels::cpu::aggregate_f32(node.agg, parts,
                                    reinterpret_cast<float*>(views.bytes(node.outputs[0])), n);
        return;
    }
    const StagedParts staged = stage_parts(views, node, n);
    kernels::cpu::aggregate_f32(node.agg, staged.parts, staged.result, n);
    store_f32(out.dtype, staged.result, views.bytes(node.outputs[0]), n);
}

absl::Status run_kernel(const Views& views, const ExecNode& node) {
    // Staging for every buffer that cannot be passed directly, carved from one scratch block
    // (sized first: growing it later would move the earlier pointers).
    int64_t staged = 0;
    for (const std::vector<physical::BufferId>* ids : {&node.inputs, &node.outputs}) {
        for (physical::BufferId id : *ids) {
            if (!views.direct_f32(id)) {
                staged += views.buffer(id).elements();
            }
        }
    }
    float* next = staged > 0 ? scratch(staged) : nullptr;
    absl::InlinedVector<const float*, 8> inputs;
    for (physical::BufferId id : node.inputs) {
        if (views.direct_f32(id)) {
            inputs.push_back(reinterpret_cast<const float*>(views.bytes(id)));
        } else {
            const Buffer& in = views.buffer(id);
            load_f32(in.dtype, views.bytes(id), next, in.elements());
            inputs.push_back(next);
            next += in.elements();
        }
    }
    absl::InlinedVector<float*, 4> outputs;
    for (physical::BufferId id : node.outputs) {
        if (views.direct_f32(id)) {
            outputs.push_back(reinterpret_cast<float*>(views.bytes(id)));
        } else {
            outputs.push_back(next);
            next += views.buffer(id).elements();
        }
    }
    // An output with statistics makes the node's outputs partial results (attention over a
    // block of keys, argmax over a block of the vocabulary).
    bool partial = false;
    absl::InlinedVector<float*, 4> stats;
    for (physical::BufferId id : node.outputs) {
        partial = partial || views.buffer(id).stats;
        stats.push_back(views.buffer(id).stats ? stats_of(views, id) : nullptr);
    }
    EINSUMMABLE_RETURN_IF_ERROR(
        partial ? kernels::cpu::partial_f32(*node.op, node.spec, inputs, outputs, stats)
                : kernels::cpu::run_f32(*node.op, node.spec, inputs, outputs));
    for (size_t o = 0; o < node.outputs.size(); ++o) {
        const physical::BufferId id = node.outputs[o];
        if (!views.direct_f32(id)) {
            const Buffer& out = views.buffer(id);
            store_f32(out.dtype, outputs[o], views.bytes(id), out.elements());
        }
    }
    return absl::OkStatus();
}

} // namespace

absl::Status execute_node(const ExecGraph& graph, const ExecNode& node,
                          absl::Span<std::byte* const> arenas,
                          absl::Span<std::byte* const> resident) {
    const Views views(graph, arenas, resident);
    switch (node.kind) {
    case NodeKind::slice:
        run_slice(views, node);
        return absl::OkStatus();
    case NodeKind::copy:
        run_copy(views, node);
        return absl::OkStatus();
    case NodeKind::aggregate:
        run_aggregate(views, node);
        return absl::OkStatus();
    case NodeKind::concat:
        run_concat(views, node);
        return absl::OkStatus();
    case NodeKind::kernel: {
        const kernels::cpu::BatchInvariantScope invariant(graph.batch_invariant);
        return run_kernel(views, node);
    }
    case NodeKind::send:
    case NodeKind::recv:
        // Messages are started by the executable, which owns the transport.
        return absl::InternalError("a send or recv reached execute_node");
    }
    return absl::InternalError("unknown node kind");
}

} // namespace einsummable::runtime::cpu
