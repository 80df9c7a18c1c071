#include "compiler/physical/resident_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace einsummable::physical {
namespace {

constexpr int64_t kAlignment = 64;

int64_t align_up(int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

} // namespace

ir::Tiling ResidentTensor::tiling() const {
    ir::Tiling boxes;
    for (const ResidentBlock& block : blocks) {
        boxes.push_back(block.box);
    }
    std::sort(boxes.begin(), boxes.end());
    boxes.erase(std::unique(boxes.begin(), boxes.end()), boxes.end());
    return boxes;
}

std::string ResidentLayout::to_string() const {
    std::string out = absl::StrCat("resident layout, ", devices, " devices, arenas");
    for (int64_t bytes : arena_bytes) {
        absl::StrAppend(&out, " ", bytes);
    }
    absl::StrAppend(&out, "\n");
    for (const auto& [name, tensor] : tensors) {
        absl::StrAppend(&out, "'", name, "' ", tensor.type.to_string(), "\n");
        for (const ResidentBlock& block : tensor.blocks) {
            absl::StrAppend(&out, "  ", block.box.to_string(), " @", block.device, " +",
                            block.offset, "\n");
        }
    }
    return out;
}

std::string ResidentLayout::fingerprint() const {
    // 64-bit FNV-1a: stable across processes and builds, unlike absl::Hash.
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : to_string()) {
        hash ^= c;
        hash *= 0x100000001b3ull;
    }
    return absl::StrFormat("%016x", hash);
}

int64_t ResidentLayout::total_bytes() const {
    int64_t total = 0;
    for (int64_t bytes : arena_bytes) {
        total += bytes;
    }
    return total;
}

std::set<std::string> residable_inputs(const ir::Graph& graph, const std::set<std::string>& names) {
    std::set<std::string> residable;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        if (names.count(tensor.name) && !tensor.saved) {
            residable.insert(tensor.name);
        }
    }
    return residable;
}

std::map<ir::TensorId, const ResidentTensor*>
pinned_inputs(const ir::Graph& graph, const ResidentLayout* layout, int devices) {
    std::map<ir::TensorId, const ResidentTensor*> pinned;
    if (layout == nullptr || layout->devices != devices) {
        return pinned;
    }
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        auto it = layout->tensors.find(tensor.name);
        if (it != layout->tensors.end() && !tensor.saved && it->second.type == tensor.type) {
            pinned.emplace(id, &it->second);
        }
    }
    return pinned;
}

std::map<ir::TensorId, ir::Tiling> pinned_tilings(const ir::Graph& graph,
                                                  const ResidentLayout* layout, int devices) {
    std::map<ir::TensorId, ir::Tiling> tilings;
    for (const auto& [id, tensor] : pinned_inputs(graph, layout, devices)) {
        tilings.emplace(id, tensor->tiling());
    }
    return tilings;
}

ResidentLayout pack_resident_layout(int devices, std::map<std::string, ResidentTensor> tensors) {
    ResidentLayout layout;
    layout.devices = devices;
    layout.arena_bytes.assign(devices, 0);
    for (auto& [name, tensor] : tensors) {
        std::sort(tensor.blocks.begin(), tensor.blocks.end(),
                  [](const ResidentBlock& a, const ResidentBlock& b) {
                      return std::tie(a.device, a.box) < std::tie(b.device, b.box);
                  });
        tensor.blocks.erase(std::unique(tensor.blocks.begin(), tensor.blocks.end(),
                                        [](const ResidentBlock& a, const ResidentBlock& b) {
                                            return a.device == b.device && a.box == b.box;
                                        }),
                            tensor.blocks.end());
        const int64_t element_bytes = ir::dtype_size(tensor.type.dtype);
        for (ResidentBlock& block : tensor.blocks) {
            block.offset = layout.arena_bytes[block.device];
            layout.arena_bytes[block.device] += align_up(block.box.volume() * element_bytes);
        }
    }
    layout.tensors = std::move(tensors);
    return layout;
}

ResidentLayout define_resident_layout(const ir::Graph& graph, const PhysicalPlan& plan,
                                      const std::set<std::string>& names) {
    const std::set<std::string> residable = residable_inputs(graph, names);
    std::map<std::string, ResidentTensor> tensors;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        if (residable.count(tensor.name)) {
            tensors[tensor.name].type = tensor.type;
        }
    }
    for (const OperatorPlacement& op : plan.operators) {
        const ir::GraphNode& node = graph.node(op.node);
        for (size_t i = 0; i < node.inputs.size(); ++i) {
            auto it = tensors.find(graph.tensor(node.inputs[i]).name);
            if (it == tensors.end()) {
                continue;
            }
            for (size_t k = 0; k < op.spec.functions.size(); ++k) {
                it->second.blocks.push_back({op.devices[k], op.spec.functions[k].inputs[i], 0});
            }
        }
    }
    return pack_resident_layout(plan.devices, std::move(tensors));
}

} // namespace einsummable::physical
