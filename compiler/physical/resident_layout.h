#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/box.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/tensor_type.h"
#include "compiler/physical/physical_plan.h"

namespace einsummable::physical {

// Graph inputs that stay in device memory across plans (docs/physical.md, "Resident inputs"):
// the daemon keeps a model's weights once, in one layout, and every plan of the model reads
// those blocks in place. The layout is data: which blocks of each tensor live on which device,
// at which offset of that device's resident arena (memory the plans share, not any plan's own
// arena). Nothing here allocates.

struct ResidentBlock {
    int device = 0;
    ir::Box box;        // absolute positions inside the whole tensor
    int64_t offset = 0; // bytes into the device's resident arena, 64-byte aligned

    friend bool operator==(const ResidentBlock&, const ResidentBlock&) = default;
};

struct ResidentTensor {
    ir::TensorType type;
    // Distinct (device, box) pairs, sorted by device then box. A box may sit on several
    // devices (a replicated weight) and a device may hold several boxes.
    std::vector<ResidentBlock> blocks;

    // The distinct boxes, canonical (sorted): the tiling the planner sees.
    ir::Tiling tiling() const;
    friend bool operator==(const ResidentTensor&, const ResidentTensor&) = default;
};

struct ResidentLayout {
    int devices = 0;
    std::map<std::string, ResidentTensor> tensors; // by graph tensor name
    std::vector<int64_t> arena_bytes;              // per device: the resident arena's size

    // One line per block; stable (the plan key's fingerprint is taken of it).
    std::string to_string() const;
    // 16 hex digits of a hash of to_string(), for plan keys.
    std::string fingerprint() const;
    int64_t total_bytes() const;
    friend bool operator==(const ResidentLayout&, const ResidentLayout&) = default;
};

// The layout as text that parse_resident_layout_record reads back (the daemon keeps it beside
// its plan files, so a restart finds the same layout):
//   einsummable-resident-layout 1
//   devices 4
//   tensor "w1" f32 2 "d_model" 16 "d_ff" 40     name, dtype, rank, then each dimension
//   block 0 [0,16)x[0,10)                        device and box, in the tensor's block order
//   end
// Offsets and arena sizes are not written: they follow from the blocks (pack_resident_layout).
std::string resident_layout_record(const ResidentLayout& layout);
// InvalidArgument naming the line when the text is not such a record, or a block lies outside
// its tensor or on a device the layout does not have.
absl::StatusOr<ResidentLayout> parse_resident_layout_record(absl::string_view text);

// Which graph inputs a plan of `graph` on `devices` devices reads in place from `layout`: the
// tensors the layout holds whose type is the graph's and which are not saved, when the layout
// is for `devices` devices (otherwise none: a plan for another device count keeps its own
// copies). By tensor id.
std::map<ir::TensorId, const ResidentTensor*>
pinned_inputs(const ir::Graph& graph, const ResidentLayout* layout, int devices);

// The planner's view of the same inputs (logical::PlannerOptions::pinned): their tilings.
std::map<ir::TensorId, ir::Tiling> pinned_tilings(const ir::Graph& graph,
                                                  const ResidentLayout* layout, int devices);

// The graph inputs of `names` that may become resident: inputs of the graph that are not
// saved (a saved input is returned from its own block), in name order.
std::set<std::string> residable_inputs(const ir::Graph& graph, const std::set<std::string>& names);

// Resident states (docs/runtime.md "Resident state"): resident inputs that an operator updates in
// place (ir::in_place_input), so that after a run they hold its output. Of `resident`
// (the names of the inputs a plan reads or lays out resident), those read in an in-place slot.
// InvalidArgument naming the state when anything else reads it (another operator, or the same
// one in another slot) or it is saved: its value would depend on the order of the reads and
// the write.
absl::StatusOr<std::set<std::string>> resident_states(const ir::Graph& graph,
                                                      const std::set<std::string>& resident);

// Offsets for blocks given as (tensor, device, box): packed per device in tensor-name, then
// (device, box) order, each 64-byte aligned; the arenas' sizes follow. The blocks of each
// tensor are made distinct and sorted.
ResidentLayout pack_resident_layout(int devices, std::map<std::string, ResidentTensor> tensors);

// The layout a plan that reads none of `names` in place defines for them: every (device, block)
// its operators' function specs read of each residable input of `names` (residable_inputs),
// which is exactly what lower() gives the plan as input blocks, packed. A tensor no operator
// reads gets no blocks.
ResidentLayout define_resident_layout(const ir::Graph& graph, const PhysicalPlan& plan,
                                      const std::set<std::string>& names);

} // namespace einsummable::physical
