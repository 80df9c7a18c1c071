#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dense_block.h"
#include "compiler/ir/dtype.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/support/status_macros.h"
#include "runtime/backend.h"

namespace einsummable::runtime {

// Fetching a saved output (docs/runtime.md "Saved outputs"): its blocks stay on the devices that
// computed them (physical::ExecGraph::outputs); each is read from its device into its part of
// the host tensor. Works on every backend through Executable::read_buffer.

// The byte offset of `block` inside the row-major tensor `whole` when the block's elements are
// one contiguous range there (every dimension but its outermost non-unit one spans the whole
// extent); -1 when they are strided.
inline int64_t contiguous_offset(const ir::Box& block, const ir::Box& whole,
                                 int64_t element_bytes) {
    int dim = block.rank() - 1;
    while (dim > 0 && block[dim].lower == whole[dim].lower &&
           block[dim].upper == whole[dim].upper) {
        --dim;
    }
    for (int outer = 0; outer < dim; ++outer) {
        if (block[outer].size() != 1) {
            return -1;
        }
    }
    int64_t index = 0;
    for (int d = 0; d < block.rank(); ++d) {
        index = index * whole[d].size() + (block[d].lower - whole[d].lower);
    }
    return index * element_bytes;
}

// One block (a buffer of the graph, without statistics) read into its part of `data`, the bytes
// of the row-major tensor `whole` in the buffer's dtype: straight into place when its elements
// are contiguous there, else through a staging block scattered row by row.
inline absl::Status read_block_into(Executable& executable, const physical::ExecGraph& graph,
                                    physical::BufferId id, const ir::Box& whole,
                                    absl::Span<std::byte> data) {
    const physical::Buffer& buffer = graph.buffers[id];
    if (buffer.stats || buffer.resident || !whole.contains(buffer.box)) {
        return absl::InternalError(absl::StrCat("saved output block ",
                                                physical::buffer_label(graph, id),
                                                " is not a complete block of its tensor"));
    }
    const int64_t element_bytes = ir::dtype_size(buffer.dtype);
    const int64_t offset = contiguous_offset(buffer.box, whole, element_bytes);
    if (offset >= 0) {
        return executable.read_buffer(id, data.subspan(offset, buffer.bytes()));
    }
    std::vector<std::byte> staging(buffer.bytes());
    EINSUMMABLE_RETURN_IF_ERROR(executable.read_buffer(id, absl::MakeSpan(staging)));
    ir::copy_region(staging.data(), buffer.box, data.data(), whole, buffer.box, element_bytes);
    return absl::OkStatus();
}

// The saved output `name` of `graph`, whole, row-major in its dtype: every block read from the
// device holding it into its part. NotFound when `name` is no saved output.
inline absl::StatusOr<std::vector<std::byte>> read_saved_output(Executable& executable,
                                                                const physical::ExecGraph& graph,
                                                                absl::string_view name) {
    auto it = graph.outputs.find(std::string(name));
    if (it == graph.outputs.end() || it->second.empty()) {
        return absl::NotFoundError(absl::StrCat("'", name, "' is not a saved output"));
    }
    const ir::Box whole = physical::saved_output_box(graph, it->second);
    const ir::DType dtype = graph.buffers[it->second.front()].dtype;
    std::vector<std::byte> bytes(whole.volume() * ir::dtype_size(dtype));
    for (physical::BufferId id : it->second) {
        EINSUMMABLE_RETURN_IF_ERROR(
            read_block_into(executable, graph, id, whole, absl::MakeSpan(bytes)));
    }
    return bytes;
}

} // namespace einsummable::runtime
