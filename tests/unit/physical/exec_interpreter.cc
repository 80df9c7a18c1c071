#include "tests/unit/physical/exec_interpreter.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace einsummable::physical::testing {

absl::StatusOr<std::map<std::string, ir::HostTensor>>
interpret(const ExecGraph& graph, const std::map<std::string, ir::HostTensor>& inputs) {
    std::vector<ir::HostTensor> values(graph.buffers.size());
    // Statistics (log-sum-exp, arg-max) of the buffers that carry them, over ir::stats_box(box).
    std::vector<ir::HostTensor> stats(graph.buffers.size());
    // Elements written into each buffer, directly or through its views (Buffer::parent): a
    // view's value lives in its root's tensor.
    std::vector<int64_t> written_elements(graph.buffers.size(), 0);
    auto root_of = [&](BufferId id) { return graph.view_root(id); };
    auto value_of = [&](BufferId id) {
        const BufferId root = root_of(id);
        return root == id ? values[id] : values[root].slice(graph.buffers[id].box);
    };
    auto store = [&](BufferId id, ir::HostTensor value) {
        const BufferId root = root_of(id);
        if (root == id) {
            values[id] = std::move(value);
        } else {
            if (values[root].box() != graph.buffers[root].box) {
                values[root] = ir::HostTensor(graph.buffers[root].box);
            }
            values[root].write(value);
        }
        for (BufferId at = id;; at = graph.buffers[at].parent) {
            written_elements[at] += graph.buffers[id].elements();
            if (!graph.buffers[at].is_view()) {
                break;
            }
        }
    };
    // Written in full: itself, or a buffer it is a view inside.
    auto written = [&](BufferId id) {
        for (BufferId at = id;; at = graph.buffers[at].parent) {
            if (written_elements[at] >= graph.buffers[at].elements()) {
                return true;
            }
            if (!graph.buffers[at].is_view()) {
                return false;
            }
        }
    };
    for (const auto& [name, blocks] : graph.input_blocks) {
        auto it = inputs.find(name);
        if (it == inputs.end()) {
            return absl::InvalidArgumentError(absl::StrCat("input '", name, "' missing"));
        }
        for (BufferId id : blocks) {
            store(id, it->second.slice(graph.buffers[id].box));
        }
    }
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
        const ExecNode& node = graph.nodes[n];
        std::vector<ir::HostTensor> in;
        for (BufferId id : node.inputs) {
            if (!written(id)) {
                return absl::InternalError(
                    absl::StrCat("node ", n, " reads b", id, " before anything wrote it"));
            }
            if (graph.buffers[id].device != node.device && node.kind != NodeKind::copy) {
                return absl::InternalError(absl::StrCat("node ", n, " on device ", node.device,
                                                        " reads b", id, " on another device"));
            }
            in.push_back(value_of(id));
        }
        const ir::Box& out_box = graph.buffers[node.outputs[0]].box;
        const bool out_stats = graph.buffers[node.outputs[0]].stats;
        std::vector<ir::HostTensor> out;
        std::vector<ir::HostTensor> out_lse(node.outputs.size());
        switch (node.kind) {
        case NodeKind::slice:
            out.push_back(in[0].slice(out_box));
            if (out_stats) {
                out_lse[0] = stats[node.inputs[0]].slice(ir::stats_box(out_box));
            }
            break;
        case NodeKind::copy:
            if (in[0].box() != out_box) {
                return absl::InternalError(absl::StrCat("copy node ", n, " changes the box"));
            }
            out.push_back(in[0]);
            out_lse[0] = stats[node.inputs[0]];
            break;
        case NodeKind::aggregate: {
            if (ir::carries_stats(node.agg)) {
                ir::PartialBlock combined{in[0], stats[node.inputs[0]].values()};
                for (size_t k = 1; k < in.size(); ++k) {
                    absl::StatusOr<ir::PartialBlock> next = ir::combine_partials(
                        node.agg, combined, {in[k], stats[node.inputs[k]].values()});
                    if (!next.ok()) {
                        return next.status();
                    }
                    combined = *std::move(next);
                }
                out.push_back(std::move(combined.values));
                if (out_stats) {
                    out_lse[0] = ir::HostTensor(ir::stats_box(out_box), combined.stats);
                }
                break;
            }
            ir::HostTensor sum = in[0];
            for (size_t k = 1; k < in.size(); ++k) {
                if (node.agg == ir::AggOp::top_k) {
                    absl::StatusOr<ir::HostTensor> merged = ir::merge_top_k(sum, in[k]);
                    if (!merged.ok()) {
                        return merged.status();
                    }
                    sum = *std::move(merged);
                    continue;
                }
                if (in[k].box() != out_box) {
                    return absl::InternalError(absl::StrCat("aggregate node ", n, " mixes boxes"));
                }
                for (int64_t e = 0; e < sum.size(); ++e) {
                    sum.data()[e] = ir::aggregate(node.agg, sum.data()[e], in[k].data()[e]);
                }
            }
            out.push_back(std::move(sum));
            break;
        }
        case NodeKind::concat: {
            ir::HostTensor whole(out_box);
            int64_t covered = 0;
            if (out_stats) {
                out_lse[0] = ir::HostTensor(ir::stats_box(out_box));
            }
            for (size_t k = 0; k < in.size(); ++k) {
                whole.write(in[k]);
                covered += in[k].size();
                if (out_stats) {
                    out_lse[0].write(stats[node.inputs[k]]);
                }
            }
            if (covered != whole.size()) {
                return absl::InternalError(absl::StrCat("concat node ", n, " leaves a gap"));
            }
            out.push_back(std::move(whole));
            break;
        }
        case NodeKind::kernel: {
            if (out_stats) { // a partial result over a block of keys
                absl::StatusOr<std::vector<ir::PartialBlock>> partial =
                    node.op->reference_partial(in, node.spec);
                if (!partial.ok()) {
                    return partial.status();
                }
                for (ir::PartialBlock& block : *partial) {
                    out_lse[out.size()] =
                        ir::HostTensor(ir::stats_box(block.values.box()), block.stats);
                    out.push_back(std::move(block.values));
                }
                break;
            }
            absl::StatusOr<std::vector<ir::HostTensor>> result = node.op->reference(in, node.spec);
            if (!result.ok()) {
                return result.status();
            }
            out = *std::move(result);
            break;
        }
        }
        for (size_t o = 0; o < node.outputs.size(); ++o) {
            store(node.outputs[o], std::move(out[o]));
            stats[node.outputs[o]] = std::move(out_lse[o]);
        }
    }
    std::map<std::string, ir::HostTensor> outputs;
    for (const auto& [name, blocks] : graph.outputs) {
        // Each block where the device that holds it left it, written into the whole tensor.
        ir::HostTensor whole(saved_output_box(graph, blocks));
        for (BufferId id : blocks) {
            whole.write(value_of(id));
        }
        outputs.emplace(name, std::move(whole));
    }
    return outputs;
}

} // namespace einsummable::physical::testing
