#include "tests/unit/physical/exec_interpreter.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace einsummable::physical::testing {

absl::StatusOr<std::map<std::string, ir::HostTensor>>
interpret(const ExecGraph& graph, const std::map<std::string, ir::HostTensor>& inputs) {
    std::vector<ir::HostTensor> values(graph.buffers.size());
    std::vector<bool> written(graph.buffers.size(), false);
    for (const auto& [name, blocks] : graph.input_blocks) {
        auto it = inputs.find(name);
        if (it == inputs.end()) {
            return absl::InvalidArgumentError(absl::StrCat("input '", name, "' missing"));
        }
        for (BufferId id : blocks) {
            values[id] = it->second.slice(graph.buffers[id].box);
            written[id] = true;
        }
    }
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
        const ExecNode& node = graph.nodes[n];
        std::vector<ir::HostTensor> in;
        for (BufferId id : node.inputs) {
            if (!written[id]) {
                return absl::InternalError(
                    absl::StrCat("node ", n, " reads b", id, " before anything wrote it"));
            }
            if (graph.buffers[id].device != node.device && node.kind != NodeKind::copy) {
                return absl::InternalError(absl::StrCat("node ", n, " on device ", node.device,
                                                        " reads b", id, " on another device"));
            }
            in.push_back(values[id]);
        }
        const ir::Box& out_box = graph.buffers[node.outputs[0]].box;
        std::vector<ir::HostTensor> out;
        switch (node.kind) {
        case NodeKind::slice:
            out.push_back(in[0].slice(out_box));
            break;
        case NodeKind::copy:
            if (in[0].box() != out_box) {
                return absl::InternalError(absl::StrCat("copy node ", n, " changes the box"));
            }
            out.push_back(in[0]);
            break;
        case NodeKind::aggregate: {
            ir::HostTensor sum = in[0];
            for (size_t k = 1; k < in.size(); ++k) {
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
            for (const ir::HostTensor& part : in) {
                whole.write(part);
                covered += part.size();
            }
            if (covered != whole.size()) {
                return absl::InternalError(absl::StrCat("concat node ", n, " leaves a gap"));
            }
            out.push_back(std::move(whole));
            break;
        }
        case NodeKind::kernel: {
            absl::StatusOr<std::vector<ir::HostTensor>> result = node.op->reference(in, node.spec);
            if (!result.ok()) {
                return result.status();
            }
            out = *std::move(result);
            break;
        }
        }
        for (size_t o = 0; o < node.outputs.size(); ++o) {
            values[node.outputs[o]] = std::move(out[o]);
            written[node.outputs[o]] = true;
        }
    }
    std::map<std::string, ir::HostTensor> outputs;
    for (const auto& [name, id] : graph.outputs) {
        outputs.emplace(name, values[id]);
    }
    return outputs;
}

} // namespace einsummable::physical::testing
