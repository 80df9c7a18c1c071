#pragma once

// Resident inputs for the CUDA tests (cuda_graph_plan_test, cuda_plan_test), made by hand from
// compiled ExecGraphs: the blocks of some input tensors (a model's weights) moved into resident
// arenas that several graphs share, as the compiler lays them out (compiler/physical/
// resident_layout.h) — every (tensor, device, box) any of the graphs reads, packed per device,
// 64-byte aligned. Being independent of the compiler's own layout code, these test what the
// backend does with Buffer::resident, whatever produced it.

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dense_block.h"
#include "compiler/physical/exec_graph.h"
#include "runtime/backend.h"

namespace einsummable::runtime::testing {

struct SharedResidentLayout {
    // (tensor, device, box) -> bytes into that device's resident arena.
    std::map<std::tuple<std::string, int, ir::Box>, int64_t> offsets;
    std::vector<int64_t> arena_bytes; // per device
};

// Every input block of `tensors` that any of `graphs` reads, packed in key order.
inline SharedResidentLayout share_inputs(const std::vector<const physical::ExecGraph*>& graphs,
                                         const std::set<std::string>& tensors, int devices) {
    std::map<std::tuple<std::string, int, ir::Box>, int64_t> bytes;
    for (const physical::ExecGraph* graph : graphs) {
        for (const auto& [name, blocks] : graph->input_blocks) {
            if (tensors.count(name) == 0) {
                continue;
            }
            for (physical::BufferId id : blocks) {
                const physical::Buffer& buffer = graph->buffers[id];
                bytes.emplace(std::make_tuple(name, buffer.device, buffer.box), buffer.bytes());
            }
        }
    }
    SharedResidentLayout layout;
    layout.arena_bytes.assign(static_cast<size_t>(devices), 0);
    for (const auto& [key, block_bytes] : bytes) {
        int64_t& arena = layout.arena_bytes[static_cast<size_t>(std::get<1>(key))];
        layout.offsets.emplace(key, arena);
        arena += (block_bytes + 63) / 64 * 64;
    }
    return layout;
}

// `graph` reading the layout's tensors in place: their input blocks become resident buffers at
// the layout's offsets and leave input_blocks (they are loaded once, into the resident memory).
inline physical::ExecGraph with_resident_inputs(physical::ExecGraph graph,
                                                const SharedResidentLayout& layout) {
    for (auto it = graph.input_blocks.begin(); it != graph.input_blocks.end();) {
        bool moved = false;
        for (physical::BufferId id : it->second) {
            physical::Buffer& buffer = graph.buffers[id];
            auto found = layout.offsets.find(std::make_tuple(it->first, buffer.device, buffer.box));
            if (found != layout.offsets.end()) {
                buffer.resident = true;
                buffer.persistent = true;
                buffer.offset = found->second;
                moved = true;
            }
        }
        it = moved ? graph.input_blocks.erase(it) : std::next(it);
    }
    graph.resident_bytes = layout.arena_bytes;
    graph.place_views(); // views of the moved blocks move with them
    return graph;
}

inline std::vector<std::byte> block_of(const std::vector<float>& whole, const ir::Box& whole_box,
                                       const ir::Box& box) {
    std::vector<std::byte> bytes(static_cast<size_t>(box.volume()) * sizeof(float));
    ir::copy_region(reinterpret_cast<const std::byte*>(whole.data()), whole_box, bytes.data(), box,
                    box, sizeof(float));
    return bytes;
}

// Each block of the layout, cut from the whole tensors (f32, the GPU tests' dtype) in `values`
// (whole boxes in `boxes`), written into `memory`.
inline absl::Status write_resident(ResidentMemory& memory, const SharedResidentLayout& layout,
                                   const std::map<std::string, std::vector<float>>& values,
                                   const std::map<std::string, ir::Box>& boxes) {
    for (const auto& [key, offset] : layout.offsets) {
        const auto& [name, device, box] = key;
        const std::vector<std::byte> bytes = block_of(values.at(name), boxes.at(name), box);
        if (absl::Status status = memory.write(device, offset, bytes); !status.ok()) {
            return status;
        }
    }
    return absl::OkStatus();
}

// Every input block of `graph` (those still in input_blocks), cut from `values`.
inline absl::Status write_inputs(Executable& executable, const physical::ExecGraph& graph,
                                 const std::map<std::string, std::vector<float>>& values,
                                 const std::map<std::string, ir::Box>& boxes) {
    for (const auto& [name, blocks] : graph.input_blocks) {
        for (physical::BufferId id : blocks) {
            const std::vector<std::byte> bytes =
                block_of(values.at(name), boxes.at(name), graph.buffers[id].box);
            if (absl::Status status = executable.write_buffer(id, bytes); !status.ok()) {
                return absl::Status(status.code(), absl::StrCat(name, ": ", status.message()));
            }
        }
    }
    return absl::OkStatus();
}

} // namespace einsummable::runtime::testing
