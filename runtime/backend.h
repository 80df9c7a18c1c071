#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/support/cancellation.h"
#include "compiler/support/status_macros.h"

namespace einsummable::runtime {

// Device memory that outlives any one executable: one resident arena per device, holding a
// model's resident inputs (compiler/physical/resident_layout.h), which the executables of all
// its plans read in place (Buffer::resident). Zeroed when allocated. Thread-safe only as its
// owner makes it (runtime/resident_weights.h serialises writes against runs).
class ResidentMemory {
public:
    virtual ~ResidentMemory() = default;
    // Host bytes into device `device`'s arena at `offset`; InvalidArgument when outside it.
    virtual absl::Status write(int device, int64_t offset, absl::Span<const std::byte> data) = 0;
    // The arena's bytes at `offset` out to the host; InvalidArgument when outside it.
    virtual absl::Status read(int device, int64_t offset, absl::Span<std::byte> data) const = 0;
    // Bytes allocated per device.
    virtual std::vector<int64_t> allocated_bytes() const = 0;
};

// One ExecGraph made ready to run on a backend: its arenas allocated once (the memory plan's
// arena_bytes per device), so every run() reuses the same memory; resident buffers are read
// from the ResidentMemory it was prepared with, which it keeps alive. The ExecGraph must outlive
// it. Not safe to call concurrently (callers serialise runs of one executable; separate
// executables of one graph may run at once).
class Executable {
public:
    virtual ~Executable() = default;

    // Host bytes (the buffer's dtype, row-major, exactly buffer.bytes()) into a buffer.
    virtual absl::Status write_buffer(physical::BufferId buffer,
                                      absl::Span<const std::byte> data) = 0;
    // A buffer's bytes out to the host (data.size() == buffer.bytes()).
    virtual absl::Status read_buffer(physical::BufferId buffer, absl::Span<std::byte> data) = 0;
    // Runs every node once, respecting deps. A failing kernel fails the run with its status
    // (naming the node); the executable stays usable unless the failure was unrecoverable
    // (Backend::unrecoverable_error), after which every run fails.
    virtual absl::Status run() = 0;

    // Bytes copied between devices, [src][dst] over the graph's devices, summed over all runs
    // so far.
    virtual std::vector<std::vector<int64_t>> bytes_moved() const = 0;
    // Bytes allocated per device of the graph (its own arenas, not the resident memory).
    virtual std::vector<int64_t> allocated_bytes() const = 0;
};

// What runs a backend's kernels, for the daemon's start-up log, Explain and GetServerInfo.
struct KernelsInfo {
    // One line (the CPU backend: "oneDNN 2.6.3 sgemm, avx512_core kernels (CPU: avx512_core;
    // library ISA avx512_core_amx)"); empty where a backend has nothing to say.
    std::string description;
    // Why the kernels run slower than this machine allows (the CPU backend: the gemm library's
    // kernels are below the CPU's instruction sets), for a start-up warning; empty when not.
    std::string warning;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0; // "cpu", "cuda"
    virtual int devices() const = 0;
    virtual KernelsInfo kernels() const { return {}; }
    // The attention splits its kernels run, which Plan::compile plans with
    // (logical::PlannerOptions::attention_splits): every one by default.
    virtual logical::AttentionSplits attention_splits() const {
        return logical::AttentionSplits::any;
    }
    // OK while the backend can run. Once a failure has left it unable to run anything more in
    // this process — the CUDA backend: a sticky CUDA error such as an illegal address, which
    // poisons the CUDA context for good (docs/cuda.md "Errors") — that failure, from then on:
    // every later prepare, run, write and read fails. Callers check it after a failed call;
    // the daemon then stops serving and exits non-zero for its supervisor to restart it
    // (docs/server.md "Unrecoverable device errors"). Thread-safe.
    virtual absl::Status unrecoverable_error() const { return absl::OkStatus(); }
    // A rank's backend whose messages between ranks are matched by the order they are issued,
    // not by their tags (the CUDA backend over NCCL, docs/cluster.md): the parts of different
    // split graphs must not run at once, so the cluster backend runs one at a time. Others
    // (tags): the runs of different plans and instances overlap.
    virtual bool split_runs_take_turns() const { return false; }
    // InvalidArgument when the graph needs more devices than the backend has, or when it has
    // resident buffers (ExecGraph::resident_bytes) and `resident` is null or smaller on some
    // device.
    virtual absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const physical::ExecGraph& graph, std::shared_ptr<ResidentMemory> resident) = 0;
    absl::StatusOr<std::unique_ptr<Executable>> prepare(const physical::ExecGraph& graph) {
        return prepare(graph, nullptr);
    }
    // prepare() that stops when `cancellation` (null: never) is set before or while it runs:
    // Cancelled ("compile cancelled during the backend's preparation ..."), nothing kept. A
    // backend whose preparation takes long (the CPU backend zeroes every arena) polls it as it
    // goes; by default it is polled once, before preparing.
    virtual absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const physical::ExecGraph& graph, std::shared_ptr<ResidentMemory> resident,
            const support::Cancellation* cancellation) {
        EINSUMMABLE_RETURN_IF_ERROR(
            support::check_cancelled(cancellation, "the backend's preparation"));
        return prepare(graph, std::move(resident));
    }
    // Resident arenas of bytes[d] bytes on device d (zeroed); ResourceExhausted naming the
    // device when one does not fit, InvalidArgument when bytes has more entries than devices.
    virtual absl::StatusOr<std::shared_ptr<ResidentMemory>>
    allocate_resident(const std::vector<int64_t>& bytes) = 0;
};

} // namespace einsummable::runtime
