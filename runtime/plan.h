#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/logical/time_objective.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/support/cancellation.h"
#include "runtime/backend.h"
#include "runtime/resident_weights.h"

namespace einsummable::runtime {

struct CompileOptions {
    int devices = 1;
    logical::Planner planner = logical::Planner::dp;
    uint64_t seed = 0; // the random planner's and the synthesis search's seed
    exprog::SynthesisMode schedule = exprog::SynthesisMode::optimized;
    // The machine the exchange programs are synthesised for; default_topology(devices) when
    // unset.
    std::optional<exprog::Topology> topology;
    int synthesis_iterations = 600; // exprog::SynthesisOptions::iterations
    // What the dp planner minimises (logical::Objective; the other planners give their own
    // plan whatever it is): bytes — the paper's cost in bytes (logical::optimize); time — the
    // dynamic programme over predicted time on the topology (logical::optimize_by_time), the
    // default; search — whole-plan simulated time (pipeline::optimize_for_time: a local search
    // from the time programme's, the bytes', greedy's and the baselines' plans, never slower
    // than the fastest; much slower to compile). restore() reads it only to name the objective
    // of a record that names none: the record holds the decisions.
    logical::Objective objective = logical::Objective::time;
    // Set by another thread to stop the compile: compile() then returns Cancelled ("compile
    // cancelled during <stage>") within one step of the compiler's loops (docs/planner.md,
    // "Cancellation"), the backend's prepare() included (the CPU backend polls it as it zeroes
    // its arenas). Null = never.
    // Shared so that the canceller may outlive or predate the compile; the plan keeps a copy of
    // the options, so it is released with the plan. Never changes the plan a compile gives, and
    // is part of no plan key or record; restore() ignores it (it runs no search).
    std::shared_ptr<const support::Cancellation> cancellation;
    // Resident inputs (runtime/resident_weights.h; docs/runtime.md "Resident inputs"). With
    // `resident` set, the graph inputs its layout holds (same type, same device count:
    // physical::pinned_inputs) are read in place, and the planner pays the repartition of
    // reading one in another tiling. Without it, the inputs named in `resident_inputs` (those
    // that are not saved) get the layout this compile's plan reads them in, in new resident
    // memory that resident() returns for later plans to share. Neither: every input is the
    // plan's own. The layout changes the plan: its fingerprint belongs in the plan key, and
    // restore() must be given the options the compile had.
    std::set<std::string> resident_inputs;
    std::shared_ptr<ResidentWeights> resident;
    // With `resident` set: this is the compile that defined its layout, made again (after a
    // restart, or once evicted): the plan is made free, as the first one was, and must lay the
    // inputs out exactly as `resident` does (FailedPrecondition otherwise); it then reads them in
    // place.
    bool resident_defines = false;
    // Activation sets: executables of the plan's one ExecGraph, each with its own arenas and
    // loaded inputs, sharing the resident memory, so that this many callers run at once
    // (acquire()). With device_memory_bytes set, lowered to as many as the memory left beside
    // the resident weights holds (at least 1; Plan::instances() says how many). 0: sized to
    // that memory, 1 to kMaxAutoInstances, or kInstancesWithoutCapacity without a capacity.
    // Below 0 is taken as 1. Changes no decision of the plan.
    int instances = 1;
    // Device memory (docs/runtime.md "Device memory"): the bytes each device may hold for this
    // plan — its resident weights (ResidentLayout::arena_bytes) plus one instance's arenas
    // (ExecGraph::arena_bytes, which hold the plan's own copies of inputs). 0 = unlimited. A
    // compile whose plan does not fit plans again with `weights` unreplicated
    // (logical::PlannerOptions::unreplicated) unless its weights are pinned (`resident`, whose
    // layout is fixed); ResourceExhausted, naming the device, the bytes it needs (weights and
    // activations apart) and the capacity, when that does not fit either. restore() checks
    // the recorded plan the same way. A plan that fits is the plan compiled without a capacity.
    int64_t device_memory_bytes = 0;
    // The graph inputs that are weights (the daemon: the model's), for the memory check: their
    // bytes are counted as weights, and they are what a plan that does not fit stops
    // replicating. Their union with resident_inputs and the inputs `resident` holds; where
    // that names no graph input, every graph input is kept unreplicated when planning again.
    // Changes a plan only when it does not fit.
    std::set<std::string> weights;
    // Batch-invariant planning (logical::PlannerOptions::batch_invariant): no operator
    // aggregates partial results, so the plan adds nothing to a request's rows that depends on
    // what it is batched with; and its kernels compute an element the same in blocks of any
    // size (physical::ExecGraph::batch_invariant: the CPU backend's contractions and attention
    // leave the gemm library, whose results may not, for kernels::cpu::BatchInvariantScope's
    // fixed order;
    // tests/unit/runtime/batch_invariant_plan_test.cc). The daemon sets it for models that
    // declare a batch dimension; part of the plan key there. restore() must be given the
    // options the compile had: it refuses a record that aggregates.
    bool batch_invariant = false;
    // Micro-batches (pipeline::Options::micro_batches; logical/micro_batches.h): their relative
    // sizes. Unset: by objective (the time and search objectives' plans take some where that
    // simulates faster); set, these for any plan (empty or one weight: none). A record holds
    // the plan's, so restore() ignores it. The daemon leaves it unset.
    std::optional<std::vector<int>> micro_batches;
    // Exchange programs already synthesised (physical/synthesis_cache.h), shared with other
    // compiles: the daemon holds one across models and shapes. A hit is what synthesis would
    // give, so it changes no plan and is part of no key. Null: one per compile.
    std::shared_ptr<physical::SynthesisCache> exchange_cache;
};

// Instances (CompileOptions::instances = 0) when a capacity is known: at most this many, as the
// devices' spare memory holds; more activation sets on one plan's devices add little throughput
// (they share the devices' compute) and keep memory from other plans. Without a capacity: 2.
inline constexpr int kMaxAutoInstances = 4;
inline constexpr int kInstancesWithoutCapacity = 2;

// What one plan needs of one device (Plan::memory_need): `weights` = the resident arena it reads
// plus its own copies of weights, `activations` = the rest of one instance's arenas.
using DeviceNeed = pipeline::DeviceNeed;

// dgx-a100 for up to 8 devices; beyond, a switch of `devices` GPUs with dgx-a100's numbers
// ("switch-<devices>").
using pipeline::default_topology;

// The largest relative error (ir::max_relative_error) of a saved output of `dtype` against the
// double-precision reference that the runtime accepts: kernels compute in f32 and tensors are
// stored in their dtype between kernels, so f16 and bf16 outputs carry several roundings.
// f32 (and f64): 1e-5; f16: 1e-2; bf16: 5e-2 (measured margins in docs/runtime.md).
double output_tolerance(ir::DType dtype);

// A graph compiled for a backend (docs/design.md "The pipeline"): what the compile pipeline
// (compiler/pipeline/pipeline.h) gives — the logical plan, the exchange programs, the ExecGraph —
// and the backend's executables of it, allocated once. Load every input, then execute() any
// number of times, offloading saved outputs in between.
//
// Inputs and outputs are whole tensors, row-major. load()/offload() take f32 values (converted
// to and from the tensor's dtype); the _bytes variants take the dtype's own little-endian bytes.
// A resident input is written to the resident memory, for every plan that shares it.
//
// A plan has options.instances activation sets. acquire() lends one to a caller for a whole
// request (load, execute, offload) while other callers run on the others; the plan's own
// load/execute/offload use instance 0, each call waiting for it, so a single caller can ignore
// instances.
class Plan {
public:
    class Lease;

    // Compiles `graph` (validated) for `backend`, which the caller chooses (the daemon's
    // --backend, the CLI's flag) and which must have at least options.devices devices:
    // pipeline::compile for the machine the backend and options describe, then the backend's
    // executables. Cancelled when options.cancellation is set before or during the call.
    static absl::StatusOr<std::unique_ptr<Plan>>
    compile(ir::Graph graph, const CompileOptions& options, std::shared_ptr<Backend> backend);

    // Rebuilds a plan from the record() of a plan compiled from this graph with these options
    // (compiler/physical/plan_record.h), without running the optimiser or the synthesis: every
    // recorded decision is checked against the graph. InvalidArgument naming the operator,
    // tensor or record line when the record does not fit (corrupt, or stale: another graph,
    // device count, planner, schedule, topology or format); otherwise as compile().
    static absl::StatusOr<std::unique_ptr<Plan>> restore(ir::Graph graph,
                                                         const CompileOptions& options,
                                                         absl::string_view record,
                                                         std::shared_ptr<Backend> backend);
    // This plan's decisions as text, for restore(): each operator's intervals, each exchange
    // program with its membership and times.
    std::string record() const;

    // Lends an instance (the lowest-numbered free one), waiting while none is free. Waiters are
    // served first come, first served: a freed instance is handed to the longest waiting caller
    // that can take it, and only that caller is woken (no other waiter runs, and a caller that
    // arrives meanwhile cannot take it first).
    Lease acquire();
    // As acquire(), but a stop requested on `stop` while the caller waits wakes it, and it
    // leaves the queue: nullopt. Nothing else wakes it before its turn.
    std::optional<Lease> acquire(std::stop_token stop);
    // A free instance if there is one (and no caller waits for it), without waiting.
    std::optional<Lease> try_acquire();
    // Callers waiting for an instance now (acquire, or the plan's own calls on instance 0).
    int waiting() const;
    // Times a waiting caller woke: when an instance was handed to it, for a stop, or
    // spuriously. Each waiter wakes once (tests count the wake-ups).
    int64_t waiter_wakeups() const;

    // On instance 0. InvalidArgument naming the tensor when it is not a graph input or the
    // size is wrong.
    absl::Status load(absl::string_view name, absl::Span<const float> values);
    absl::Status load_bytes(absl::string_view name, absl::Span<const std::byte> bytes);
    // FailedPrecondition naming the first input never loaded.
    absl::Status execute();
    // NotFound naming the tensor when it is not saved; FailedPrecondition before any execute().
    absl::StatusOr<std::vector<float>> offload(absl::string_view name);
    absl::StatusOr<std::vector<std::byte>> offload_bytes(absl::string_view name);

    // The logical plan, the exchange programs with simulated times, predicted bytes per device
    // pair and peak memory per device.
    std::string explain() const;

    const ir::Graph& graph() const { return graph_; }
    const CompileOptions& options() const { return options_; }
    // What the pipeline compiled (restore(): what it rebuilt from the record).
    const pipeline::CompiledPlan& compiled() const { return compiled_; }
    const logical::LogicalPlan& logical_plan() const { return compiled_.logical; }
    const physical::PhysicalPlan& physical_plan() const { return compiled_.physical; }
    const physical::ExecGraph& exec_graph() const { return compiled_.exec; }
    const Backend& backend() const { return *backend_; }
    // Bytes the backend copied between devices, [src][dst], over all executes of every
    // instance so far.
    std::vector<std::vector<int64_t>> bytes_moved() const;
    // Peak bytes per device of the static memory plan (one instance's arenas).
    const std::vector<int64_t>& peak_bytes() const { return compiled_.exec.arena_bytes; }
    // Bytes per device the plan holds of its own: the arenas of every instance (the resident
    // memory is the model's, counted once by its owner).
    std::vector<int64_t> allocated_bytes() const;
    int instances() const { return static_cast<int>(instances_.size()); }
    // Per device: what this plan needs with one instance (weights apart from activations).
    const std::vector<DeviceNeed>& memory_need() const { return compiled_.need; }
    // Whether a compile planned again with its weights unreplicated for the plan to fit in
    // options().device_memory_bytes (false for restore(), which follows its record).
    bool weights_unreplicated() const { return compiled_.weights_unreplicated; }
    // The resident inputs this plan reads in place (null: none), shared with the other plans
    // compiled against them; after a compile that defined the layout, the new ones.
    const std::shared_ptr<ResidentWeights>& resident() const { return resident_; }
    // Whether `name` is one of them for this plan.
    bool is_resident(absl::string_view name) const;
    // The resident inputs this plan updates in place (docs/runtime.md "Resident state"): each
    // run writes them, so the next run of any plan sharing resident() reads what it wrote. They
    // start zeroed and need no load(); load() sets them. Runs of such a plan hold the resident
    // memory exclusively.
    const std::set<std::string>& states() const { return states_; }
    int64_t executions() const;

private:
    struct Instance {
        std::unique_ptr<Executable> executable;
        std::set<std::string> loaded; // inputs of the plan's own loaded into it
        int64_t executions = 0;
        int64_t weights_generation = -1;
        bool busy = false;
    };

    Plan() = default;
    // What compile() and restore() share before the pipeline: the checks of the options, graph
    // and backend (in that order), and the plan that holds them.
    static absl::StatusOr<std::unique_ptr<Plan>>
    start(ir::Graph graph, const CompileOptions& options, std::shared_ptr<Backend> backend);
    // The resident memory (a layout this plan defines) and the backend's executables of
    // compiled_; the backend's preparation stops when `cancellation` (null: never) is set.
    absl::Status allocate(const support::Cancellation* cancellation);
    const ir::GraphTensor* tensor(absl::string_view name) const;
    // A caller waiting for an instance (acquire_instance: `wanted`; acquire: any). release()
    // sets `granted` under mutex_, takes it off waiters_ and wakes its `wake` alone.
    struct Waiter {
        int wanted = -1; // an instance's index, or -1 for any
        int granted = -1;
        std::condition_variable wake;
    };
    // Takes a free instance `waiter` wants, or waits in waiters_ until one is handed over: its
    // index; -1 when a stop is requested on `stop` (null: never) first, having left the queue
    // (the stop's callback must notify waiter.wake under mutex_). Called with `lock` held on
    // mutex_.
    int take_or_wait(std::unique_lock<std::mutex>& lock, Waiter& waiter,
                     const std::stop_token* stop);
    // A free instance `wanted` takes (-1: the lowest-numbered free one), marked busy; -1 if none.
    int take_free(int wanted);
    Lease acquire_instance(int index);
    void release(int index);
    absl::Status load_into(Instance& instance, absl::string_view name,
                           absl::Span<const std::byte> bytes);
    absl::Status execute_on(Instance& instance);
    absl::StatusOr<std::vector<std::byte>> offload_from(Instance& instance, absl::string_view name);
    std::vector<float> to_values(absl::string_view name, const std::vector<std::byte>& bytes) const;

    ir::Graph graph_;
    CompileOptions options_;
    // Its defined_layout, when it has one, is moved into resident_ by allocate().
    pipeline::CompiledPlan compiled_;
    std::shared_ptr<Backend> backend_;
    std::shared_ptr<ResidentWeights> resident_; // its resident_names are read from it
    std::set<std::string> states_;              // of resident_names: updated in place

    // The instances; an instance's fields are its holder's while busy (a lease), the flags
    // and counters are guarded by mutex_. An instance is free only while no waiter can take it.
    std::vector<Instance> instances_;
    mutable std::mutex mutex_;
    // Guarded by mutex_: callers waiting for an instance, in arrival order (each on its own
    // stack). A condition variable shared by every waiter, notified on every release, woke all
    // of them for one instance: with 32 requests waiting on one plan they ran 31 useless
    // wake-ups per execution on the cores that run it (bench/README.md, "serving").
    std::list<Waiter*> waiters_;
    int64_t waiter_wakeups_ = 0; // guarded by mutex_
};

// One instance of a plan, held by one caller until the lease goes. The same calls as the plan's,
// on this instance; not to be shared between threads.
class Plan::Lease {
public:
    Lease(Lease&& other) noexcept : plan_(other.plan_), index_(other.index_) {
        other.plan_ = nullptr;
    }
    Lease& operator=(Lease&&) = delete;
    ~Lease();

    int instance() const { return index_; }
    absl::Status load(absl::string_view name, absl::Span<const float> values);
    absl::Status load_bytes(absl::string_view name, absl::Span<const std::byte> bytes);
    absl::Status execute();
    absl::StatusOr<std::vector<float>> offload(absl::string_view name);
    absl::StatusOr<std::vector<std::byte>> offload_bytes(absl::string_view name);
    // The daemon's record of which weights' generation this instance holds (its own copies of
    // weights that are not resident); -1 at first.
    int64_t weights_generation() const;
    void set_weights_generation(int64_t generation);

private:
    friend class Plan;
    Lease(Plan* plan, int index) : plan_(plan), index_(index) {}
    Plan* plan_;
    int index_;
};

} // namespace einsummable::runtime
