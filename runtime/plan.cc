#include "runtime/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/dense_block.h"
#include "compiler/ir/internal_error.h"
#include "compiler/logical/optimizer.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/plan_record.h"

namespace einsummable::runtime {

exprog::Topology default_topology(int devices) {
    absl::StatusOr<exprog::Topology> a100 = exprog::builtin_topology("dgx-a100");
    EINSUMMABLE_CHECK(a100.ok(), "the built-in dgx-a100 topology must parse");
    if (devices <= a100->num_gpus()) {
        return *std::move(a100);
    }
    absl::StatusOr<exprog::Topology> wide = exprog::Topology::make_switch(
        absl::StrCat("switch-", devices), devices, a100->link_bandwidth(), a100->hbm_bandwidth(),
        a100->latency_s());
    EINSUMMABLE_CHECK(wide.ok(), "a switch with dgx-a100's numbers must be valid");
    absl::StatusOr<exprog::Topology> with_device = wide->with_device(a100->device());
    EINSUMMABLE_CHECK(with_device.ok(), "dgx-a100's device model must be valid");
    return *std::move(with_device);
}

double output_tolerance(ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return 1e-2;
    case ir::DType::bf16:
        return 5e-2;
    case ir::DType::f32:
    case ir::DType::f64:
        return 1e-5;
    }
    return 1e-5;
}

namespace {

// The machine the options synthesise for.
exprog::Topology topology_of(const CompileOptions& options) {
    return options.topology ? *options.topology : default_topology(options.devices);
}

} // namespace

absl::StatusOr<std::unique_ptr<Plan>> Plan::start(ir::Graph graph, const CompileOptions& options,
                                                  std::shared_ptr<Backend> backend) {
    if (options.devices < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("devices must be at least 1 (got ", options.devices, ")"));
    }
    if (options.synthesis_iterations < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "synthesis_iterations must be non-negative (got ", options.synthesis_iterations, ")"));
    }
    if (absl::Status status = graph.validate(); !status.ok()) {
        return status;
    }
    if (!backend) {
        return absl::InvalidArgumentError("no backend to run the plan on");
    }
    if (backend->devices() < options.devices) {
        return absl::InvalidArgumentError(absl::StrCat("the plan needs ", options.devices,
                                                       " devices; the ", backend->name(),
                                                       " backend has ", backend->devices()));
    }
    std::unique_ptr<Plan> plan(new Plan());
    plan->graph_ = std::move(graph);
    plan->options_ = options;
    plan->backend_ = std::move(backend);
    return plan;
}

absl::Status Plan::finish(const support::Cancellation* cancellation) {
    absl::StatusOr<physical::ExecGraph> exec = physical::lower(graph_, physical_, cancellation);
    if (!exec.ok()) {
        return exec.status();
    }
    // Preparing the backend is bounded by the plan's size; the last point to stop at.
    if (absl::Status status = support::check_cancelled(cancellation, "the backend's preparation");
        !status.ok()) {
        return status;
    }
    exec_ = *std::move(exec);
    absl::StatusOr<std::unique_ptr<Executable>> executable = backend_->prepare(exec_);
    if (!executable.ok()) {
        return executable.status();
    }
    executable_ = *std::move(executable);
    return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::compile(ir::Graph graph, const CompileOptions& options,
                                                    std::shared_ptr<Backend> backend) {
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        start(std::move(graph), options, std::move(backend));
    if (!plan.ok()) {
        return plan.status();
    }
    const exprog::Topology topology = topology_of(options);
    physical::PhysicalOptions physical_options;
    physical_options.synthesis.mode = options.schedule;
    physical_options.synthesis.seed = options.seed;
    physical_options.synthesis.iterations = options.synthesis_iterations;
    // Every stage polls the one cancellation (compiler/support/cancellation.h); the plan's
    // decisions never depend on it.
    const support::Cancellation* cancellation = options.cancellation.get();
    physical_options.synthesis.cancellation = cancellation;
    const logical::PlannerOptions planner_options{options.devices, options.planner, options.seed,
                                                  cancellation};
    if (options.objective == physical::Objective::time) {
        // The search simulates plans on `topology` with the options compiled below, so the
        // plan it finds is timed as it will be built.
        absl::StatusOr<physical::TimeSearchResult> found = physical::optimize_for_time(
            (*plan)->graph_, planner_options, topology, physical_options);
        if (!found.ok()) {
            return found.status();
        }
        (*plan)->logical_ = std::move(found->plan);
    } else {
        absl::StatusOr<logical::LogicalPlan> logical =
            logical::optimize((*plan)->graph_, planner_options);
        if (!logical.ok()) {
            return logical.status();
        }
        (*plan)->logical_ = *std::move(logical);
    }
    absl::StatusOr<physical::PhysicalPlan> physical =
        physical::compile_physical((*plan)->graph_, (*plan)->logical_, topology, physical_options);
    if (!physical.ok()) {
        return physical.status();
    }
    (*plan)->physical_ = *std::move(physical);
    if (absl::Status status = (*plan)->finish(cancellation); !status.ok()) {
        return status;
    }
    return plan;
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::restore(ir::Graph graph, const CompileOptions& options,
                                                    absl::string_view record,
                                                    std::shared_ptr<Backend> backend) {
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        start(std::move(graph), options, std::move(backend));
    if (!plan.ok()) {
        return plan.status();
    }
    const exprog::Topology topology = topology_of(options);
    absl::StatusOr<physical::RestoredPlan> restored =
        physical::restore_plan((*plan)->graph_, {options.devices, options.planner, options.seed},
                               topology, options.schedule, record);
    if (!restored.ok()) {
        return restored.status();
    }
    (*plan)->logical_ = std::move(restored->logical);
    (*plan)->physical_ = std::move(restored->physical);
    if (absl::Status status = (*plan)->finish(); !status.ok()) {
        return status;
    }
    return plan;
}

std::string Plan::record() const {
    return physical::plan_record(graph_, logical_, physical_);
}

const ir::GraphTensor* Plan::tensor(absl::string_view name) const {
    std::optional<ir::TensorId> id = graph_.find_tensor(name);
    return id ? &graph_.tensor(*id) : nullptr;
}

absl::Status Plan::load(absl::string_view name, absl::Span<const float> values) {
    const ir::GraphTensor* info = tensor(name);
    if (info == nullptr || !info->is_input()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", name, "' is not an input of the graph (inputs: ",
                         absl::StrJoin(graph_.inputs(), ", ",
                                       [&](std::string* out, ir::TensorId id) {
                                           absl::StrAppend(out, graph_.tensor(id).name);
                                       }),
                         ")"));
    }
    if (static_cast<int64_t>(values.size()) != info->type.elements()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", name, "' ", info->type.to_string(), " has ",
                         info->type.elements(), " elements; got ", values.size()));
    }
    std::vector<std::byte> bytes(info->type.bytes());
    ir::from_f32(info->type.dtype, values.data(), bytes.data(), values.size());
    return load_bytes(name, bytes);
}

absl::Status Plan::load_bytes(absl::string_view name, absl::Span<const std::byte> bytes) {
    const ir::GraphTensor* info = tensor(name);
    if (info == nullptr || !info->is_input()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", name, "' is not an input of the graph"));
    }
    if (static_cast<int64_t>(bytes.size()) != info->type.bytes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", name, "' ", info->type.to_string(), " takes ", info->type.bytes(),
            " bytes (", ir::dtype_name(info->type.dtype), "); got ", bytes.size()));
    }
    const int64_t element_bytes = ir::dtype_size(info->type.dtype);
    const ir::Box whole = info->type.box();
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = exec_.input_blocks.find(info->name);
    if (it != exec_.input_blocks.end()) { // an input no operator reads has no blocks
        std::vector<std::byte> block;
        for (physical::BufferId id : it->second) {
            const physical::Buffer& buffer = exec_.buffers[id];
            block.resize(buffer.bytes());
            ir::copy_region(bytes.data(), whole, block.data(), buffer.box, buffer.box,
                            element_bytes);
            if (absl::Status status = executable_->write_buffer(id, block); !status.ok()) {
                return status;
            }
        }
    }
    loaded_.insert(info->name);
    return absl::OkStatus();
}

absl::Status Plan::execute() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (ir::TensorId id : graph_.inputs()) {
        if (!loaded_.count(graph_.tensor(id).name)) {
            return absl::FailedPreconditionError(
                absl::StrCat("input '", graph_.tensor(id).name, "' ",
                             graph_.tensor(id).type.to_string(), " was never loaded"));
        }
    }
    if (absl::Status status = executable_->run(); !status.ok()) {
        return status;
    }
    ++executions_;
    return absl::OkStatus();
}

absl::StatusOr<std::vector<std::byte>> Plan::offload_bytes(absl::string_view name) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = exec_.outputs.find(std::string(name));
    if (it == exec_.outputs.end()) {
        std::vector<std::string> saved;
        for (const auto& [output, buffer] : exec_.outputs) {
            saved.push_back(output);
        }
        return absl::NotFoundError(absl::StrCat(
            "'", name, "' is not a saved output (saved: ", absl::StrJoin(saved, ", "), ")"));
    }
    if (executions_ == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("offload of '", name, "' before the plan was executed"));
    }
    std::vector<std::byte> bytes(exec_.buffers[it->second].bytes());
    if (absl::Status status = executable_->read_buffer(it->second, absl::MakeSpan(bytes));
        !status.ok()) {
        return status;
    }
    return bytes;
}

absl::StatusOr<std::vector<float>> Plan::offload(absl::string_view name) {
    absl::StatusOr<std::vector<std::byte>> bytes = offload_bytes(name);
    if (!bytes.ok()) {
        return bytes.status();
    }
    const physical::Buffer& buffer = exec_.buffers[exec_.outputs.at(std::string(name))];
    std::vector<float> values(buffer.elements());
    ir::to_f32(buffer.dtype, bytes->data(), values.data(), buffer.elements());
    return values;
}

std::vector<std::vector<int64_t>> Plan::bytes_moved() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return executable_->bytes_moved();
}

int64_t Plan::executions() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return executions_;
}

namespace {

std::string pair_table(const std::vector<std::vector<int64_t>>& bytes) {
    std::string out;
    for (size_t src = 0; src < bytes.size(); ++src) {
        for (size_t dst = 0; dst < bytes[src].size(); ++dst) {
            if (bytes[src][dst] != 0) {
                absl::StrAppend(&out, "  ", src, " -> ", dst, ": ", bytes[src][dst], " B\n");
            }
        }
    }
    return out.empty() ? "  (none)\n" : out;
}

} // namespace

std::string Plan::explain() const {
    std::string out = logical::explain_text(graph_, logical_);
    absl::StrAppend(&out, "\n", physical::explain_exchanges(graph_, physical_));
    absl::StrAppend(&out, "\nbytes moved per execute, by device pair (from the programs):\n",
                    pair_table(physical_.program_bytes()));
    absl::StrAppend(&out, "peak memory per device (static plan): ",
                    absl::StrJoin(exec_.arena_bytes, ", "), " B\n");
    absl::StrAppend(&out, "exec graph: ", exec_.buffers.size(), " buffers, ", exec_.nodes.size(),
                    " nodes on the ", backend_->name(), " backend\n");
    return out;
}

} // namespace einsummable::runtime
