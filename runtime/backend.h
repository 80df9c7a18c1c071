#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/physical/exec_graph.h"

namespace einsummable::runtime {

// One ExecGraph made ready to run on a backend: its arenas allocated once (the memory plan's
// arena_bytes per device), so every run() reuses the same memory. The ExecGraph must outlive
// it. Not safe to call concurrently (callers serialise runs of one executable).
class Executable {
public:
    virtual ~Executable() = default;

    // Host bytes (the buffer's dtype, row-major, exactly buffer.bytes()) into a buffer.
    virtual absl::Status write_buffer(physical::BufferId buffer,
                                      absl::Span<const std::byte> data) = 0;
    // A buffer's bytes out to the host (data.size() == buffer.bytes()).
    virtual absl::Status read_buffer(physical::BufferId buffer, absl::Span<std::byte> data) = 0;
    // Runs every node once, respecting deps. A failing kernel fails the run with its status
    // (naming the node); the executable stays usable.
    virtual absl::Status run() = 0;

    // Bytes copied between devices, [src][dst] over the graph's devices, summed over all runs
    // so far.
    virtual std::vector<std::vector<int64_t>> bytes_moved() const = 0;
    // Bytes allocated per device of the graph (the arenas).
    virtual std::vector<int64_t> allocated_bytes() const = 0;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0; // "cpu", "cuda"
    virtual int devices() const = 0;
    // InvalidArgument when the graph needs more devices than the backend has.
    virtual absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const physical::ExecGraph& graph) = 0;
};

} // namespace einsummable::runtime
