#include "compiler/physical/physical_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/exprog/parser.h"
#include "compiler/exprog/pipelining.h"
#include "compiler/exprog/program_simulation.h"
#include "compiler/ir/ops/write_rows.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/support/status_macros.h"

namespace einsummable::physical {
namespace {

using exprog::Aggregate;
using exprog::Program;
using exprog::Site;

// Who reads one block of the tensor: a partition (a consumer's function spec) or a GPU.
struct Reader {
    Site site;
    ir::Box block;
};

std::string partition_name(int function) {
    return absl::StrCat("F", function);
}

// What every exchange's preamble shares: GPUS 0..devices-1, the partitions, and the cells of the
// overlay grid of `source` (where the tensor is) and the readers' blocks that some reader
// needs, in grid order. For each such cell, `add_atoms(exchange, cell_idx, cell, bytes, sites)`
// declares its atoms (IN) and its OUT at `sites`.
template <typename AddAtoms>
Exchange make_exchange(const ir::Graph& graph, ir::TensorId tensor, ir::Tiling source, int devices,
                       std::vector<exprog::Partition> partitions,
                       const std::vector<Reader>& readers, AddAtoms add_atoms) {
    const ir::GraphTensor& info = graph.tensor(tensor);
    std::vector<ir::Box> blocks;
    for (const Reader& reader : readers) {
        blocks.push_back(reader.block);
    }
    const std::vector<ir::Tiling> tilings = {std::move(source), ir::distinct_boxes(blocks)};
    Exchange exchange;
    exchange.tensor = tensor;
    exchange.dtype = info.type.dtype;
    Program& program = exchange.program;
    program.gpus.resize(devices);
    std::iota(program.gpus.begin(), program.gpus.end(), 0);
    program.partitions = std::move(partitions);
    const double element_bytes = static_cast<double>(ir::dtype_size(info.type.dtype));
    for (const ir::Box& cell : ir::overlay_grid(tilings, info.type.box())) {
        std::vector<Site> sites;
        for (const Reader& reader : readers) {
            if (reader.block.contains(cell) &&
                std::find(sites.begin(), sites.end(), reader.site) == sites.end()) {
                sites.push_back(reader.site);
            }
        }
        if (sites.empty()) {
            continue;
        }
        const int cell_idx = static_cast<int>(exchange.cells.size());
        exchange.cells.push_back(cell);
        add_atoms(exchange, cell_idx, cell, static_cast<double>(cell.volume()) * element_bytes,
                  std::move(sites));
    }
    return exchange;
}

// The preamble for moving `tensor` — written by `producer`'s function specs as output
// `output_idx` — to `readers`: one atom per cell and producer function that wrote it (several
// copies of a cell are partial results, aggregated for OUT).
Exchange make_preamble(const ir::Graph& graph, ir::TensorId tensor,
                       const OperatorPlacement& producer, int output_idx, int devices,
                       std::vector<exprog::Partition> partitions,
                       const std::vector<Reader>& readers) {
    return make_exchange(
        graph, tensor, producer.spec.output_tiling(output_idx), devices, std::move(partitions),
        readers,
        [&](Exchange& exchange, int cell_idx, const ir::Box& cell, double bytes,
            std::vector<Site> sites) {
            Aggregate aggregate;
            const std::vector<ir::FunctionSpec>& functions = producer.spec.functions;
            std::vector<size_t> writers;
            for (size_t f = 0; f < functions.size(); ++f) {
                if (functions[f].outputs[output_idx].contains(cell)) {
                    writers.push_back(f);
                }
            }
            // Partial log-sum-exp results move with their statistics.
            exchange.stats = ir::carries_stats(producer.spec.aggregations[output_idx]);
            exchange.whole_atoms =
                exchange.whole_atoms ||
                (writers.size() > 1 && ir::combines_rows(producer.spec.aggregations[output_idx]));
            const double atom_bytes =
                exchange.stats && writers.size() > 1
                    ? static_cast<double>(ir::block_bytes(cell, exchange.dtype, true))
                    : bytes;
            for (size_t f : writers) {
                Atom atom{absl::StrCat("a", cell_idx, "_", f), cell_idx, static_cast<int>(f)};
                exchange.program.ins.push_back({atom.name, producer.devices[f], atom_bytes, {}});
                aggregate.insert(atom.name);
                exchange.atoms.push_back(std::move(atom));
            }
            exchange.program.outs.push_back({std::move(aggregate), std::move(sites), {}});
        });
}

// The preamble for moving a resident (pinned) graph input from its resident blocks to
// `readers`: one atom per cell (a<cell>, producer_function -1), declared at every device
// holding a resident block that contains the cell — copies of a replicated weight are equal,
// so any one will do (source substitution picks).
Exchange make_resident_preamble(const ir::Graph& graph, ir::TensorId tensor,
                                const ResidentTensor& resident, int devices,
                                std::vector<exprog::Partition> partitions,
                                const std::vector<Reader>& readers) {
    return make_exchange(
        graph, tensor, resident.tiling(), devices, std::move(partitions), readers,
        [&](Exchange& exchange, int cell_idx, const ir::Box& cell, double bytes,
            std::vector<Site> sites) {
            Atom atom{absl::StrCat("a", cell_idx), cell_idx, -1};
            std::vector<int> holders;
            for (const ResidentBlock& block : resident.blocks) {
                if (block.box.contains(cell) &&
                    std::find(holders.begin(), holders.end(), block.device) == holders.end()) {
                    holders.push_back(block.device);
                    exchange.program.ins.push_back({atom.name, block.device, bytes, {}});
                }
            }
            exchange.program.outs.push_back({Aggregate{atom.name}, std::move(sites), {}});
            exchange.atoms.push_back(std::move(atom));
        });
}

// Where the functions of `node` run when it updates the resident state in input `input` in
// place: each at the one device holding its block of the state. FailedPrecondition naming the
// state and the block when no device, or more than one, holds it (a plan whose tiling of the
// state is not the layout's; the planner keeps the layout's, logical::keep_state_tilings).
absl::StatusOr<std::vector<int>> state_placement(const ir::Graph& graph, const ir::GraphNode& node,
                                                 const ir::JoinAggSpec& spec, int input,
                                                 const ResidentTensor& state) {
    std::vector<int> devices;
    for (const ir::FunctionSpec& function : spec.functions) {
        const ir::Box& block = function.inputs[input];
        std::vector<int> holders;
        for (const ResidentBlock& resident : state.blocks) {
            if (resident.box == block) {
                holders.push_back(resident.device);
            }
        }
        if (holders.size() != 1) {
            return absl::FailedPreconditionError(absl::StrCat(
                "operator '", node.name, "' updates the resident state '",
                graph.tensor(node.inputs[input]).name, "' in place, but ", holders.size(),
                " devices hold its block ", block.to_string(),
                " (the state's resident blocks must be the operator's, each on one device)"));
        }
        devices.push_back(holders.front());
    }
    return devices;
}

// The readers of a saved output: each distinct block of the producer's output at one device
// that wrote it, its holder, from which the runtime fetches it. A block one function spec wrote
// stays where it is; a block several wrote (partial results) is aggregated at the writer's
// device that holds the fewest bytes of the output so far (the first writer on a tie), so the
// reductions of different blocks spread over their writers instead of all meeting on one device.
std::vector<Reader> saved_readers(const OperatorPlacement& producer, int output_idx,
                                  ir::DType dtype, int devices) {
    std::vector<int64_t> held(devices, 0);
    std::vector<Reader> readers;
    for (const ir::Box& block : producer.spec.output_tiling(output_idx)) {
        int holder = -1;
        for (size_t f = 0; f < producer.spec.functions.size(); ++f) {
            const int device = producer.devices[f];
            if (producer.spec.functions[f].outputs[output_idx] == block &&
                (holder < 0 || held[device] < held[holder])) {
                holder = device;
            }
        }
        held[holder] += ir::block_bytes(block, dtype, false);
        readers.push_back({Site::of_gpu(holder), block});
    }
    return readers;
}

// A seed per exchange, so programs do not all draw the same random moves: the caller's mixed
// with the exchange's canonical text (FNV-1a), so that the same exchange draws the same moves
// wherever it occurs and a cached body is what a fresh search would give.
uint64_t program_seed(uint64_t seed, const std::string& canonical) {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : canonical) {
        hash = (hash ^ c) * 0x100000001b3ull;
    }
    return seed ^ hash;
}

absl::Status synthesize_into(Exchange& exchange, const exprog::Topology& topology,
                             exprog::SynthesisOptions options, uint64_t seed,
                             absl::string_view what, SynthesisCache* cache) {
    options.exclusive_partitions = true;
    if (exchange.whole_atoms) {
        options.max_chunks = 0;
    }
    // Also before a cache hit: a compile of cached bodies has no other step to stop at.
    if (support::is_cancelled(options.cancellation)) {
        return support::cancelled_error(absl::StrCat("the exchange synthesis for ", what));
    }
    // The canonical form (synthesis_cache.h): the preamble names atoms and partitions by
    // position only, so its text is the same wherever the exchange occurs.
    const std::string canonical =
        absl::StrCat(topology.to_text(), "\n", exprog::print_program(exchange.program));
    options.seed = program_seed(seed, canonical);
    std::string key;
    if (cache != nullptr) {
        key = absl::StrCat(exprog::synthesis_mode_name(options.mode), " ", options.seed, " ",
                           options.iterations, " ", options.max_chunks, " ", options.skip_margin,
                           " ", options.full_budget_gap, "\n", canonical);
        if (std::optional<SynthesisCache::Body> body = cache->find(key)) {
            exchange.program = std::move(body->program);
            exchange.membership = std::move(body->membership);
            exchange.simulated_s = body->simulated_s;
            exchange.naive_simulated_s = body->naive_simulated_s;
            return absl::OkStatus();
        }
    }
    absl::StatusOr<exprog::SynthesisResult> result =
        exprog::synthesize(exchange.program, topology, options);
    if (absl::IsCancelled(result.status())) { // synthesize() names no operator
        return support::cancelled_error(absl::StrCat("the exchange synthesis for ", what));
    }
    if (!result.ok()) {
        return absl::Status(result.status().code(),
                            absl::StrCat(what, ": synthesis failed: ", result.status().message()));
    }
    exchange.program = std::move(result->program);
    exchange.membership = std::move(result->membership);
    exchange.simulated_s = result->simulated_s;
    exchange.naive_simulated_s = result->naive_simulated_s;
    if (cache != nullptr) {
        cache->insert(key, {exchange.program, exchange.membership, exchange.simulated_s,
                            exchange.naive_simulated_s, result->skipped});
    }
    return absl::OkStatus();
}

// The devices the first exchange's membership gives the operator's groups of function specs
// (one function spec each without micro-batches): one each, distinct, in 0..devices-1.
// Synthesis with exclusive partitions guarantees it; a recorded membership is checked here.
// `what` names the exchange (and so the operator).
absl::Status take_placement(const Exchange& exchange, int devices, const std::string& what,
                            OperatorPlacement& placement) {
    const int groups = placement.group_count();
    const std::string unit = groups == static_cast<int>(placement.devices.size())
                                 ? "function spec"
                                 : "group of function specs";
    std::vector<int> holder(devices, -1), device_of(groups, -1);
    for (int g = 0; g < groups; ++g) {
        auto it = exchange.membership.find(partition_name(g));
        if (it == exchange.membership.end() || it->second.size() != 1) {
            return absl::InvalidArgumentError(
                absl::StrCat(what, ": the membership does not put partition ", partition_name(g),
                             " on exactly one device"));
        }
        const int device = it->second.front();
        if (device < 0 || device >= devices) {
            return absl::InvalidArgumentError(absl::StrCat(what, ": ", unit, " ", g,
                                                           " placed on device ", device, " of a ",
                                                           devices, "-device plan"));
        }
        if (holder[device] >= 0) {
            return absl::InvalidArgumentError(absl::StrCat(what, ": ", unit, "s ", holder[device],
                                                           " and ", g,
                                                           " are both placed on device ", device));
        }
        holder[device] = g;
        device_of[g] = device;
    }
    for (size_t k = 0; k < placement.devices.size(); ++k) {
        placement.devices[k] = device_of[placement.groups[k]];
    }
    return absl::OkStatus();
}

} // namespace

int OperatorPlacement::group_count() const {
    return groups.empty() ? static_cast<int>(devices.size())
                          : *std::max_element(groups.begin(), groups.end()) + 1;
}

absl::StatusOr<PhysicalPlan> build_physical(const ir::Graph& graph,
                                            const logical::LogicalPlan& logical,
                                            const exprog::Topology& topology,
                                            exprog::SynthesisMode mode, ExchangeBodyFn body,
                                            const ResidentLayout* resident) {
    const int devices = static_cast<int>(logical.options.devices);
    if (devices > topology.num_gpus()) {
        return absl::InvalidArgumentError(absl::StrCat("the plan is for ", devices,
                                                       " devices; topology ", topology.name(),
                                                       " has ", topology.num_gpus()));
    }
    const std::map<ir::TensorId, const ResidentTensor*> pinned =
        pinned_inputs(graph, resident, devices);
    PhysicalPlan plan;
    plan.devices = devices;
    plan.topology = topology.name();
    plan.mode = mode;
    for (const ir::GraphNode& node : graph.nodes()) {
        const ir::NodeId id = static_cast<ir::NodeId>(plan.operators.size());
        OperatorPlacement placement;
        placement.node = id;
        const logical::OperatorPlan& chosen = logical.operators[id];
        placement.spec = chosen.spec;
        const int functions = static_cast<int>(placement.spec.functions.size());
        if (chosen.groups.empty()) {
            placement.groups.resize(functions);
            std::iota(placement.groups.begin(), placement.groups.end(), 0);
            placement.micro_batch.assign(functions, 0);
        } else {
            placement.groups = chosen.groups;
            placement.micro_batch = chosen.micro_batch;
        }
        const int groups = placement.group_count();
        if (groups > devices || placement.groups.size() != static_cast<size_t>(functions) ||
            placement.micro_batch.size() != static_cast<size_t>(functions)) {
            return absl::InternalError(absl::StrCat("operator '", node.name, "' has ", functions,
                                                    " function specs in ", groups, " groups for ",
                                                    devices, " devices"));
        }
        placement.devices = placement.groups; // group g on device g until an exchange places it

        // A resident state (an input the operator updates in place, read from the layout)
        // fixes the placement: each function runs where the state's block it writes lives.
        bool placed = false;
        const int in_place = ir::in_place_input(*node.op);
        if (auto state = in_place >= 0 ? pinned.find(node.inputs[in_place]) : pinned.end();
            state != pinned.end()) {
            EINSUMMABLE_ASSIGN_OR_RETURN(
                placement.devices,
                state_placement(graph, node, placement.spec, in_place, *state->second));
            placed = true;
        }

        // Produced and pinned inputs, largest first: the first one's program chooses the
        // placement.
        std::vector<int> produced;
        for (int i = 0; i < static_cast<int>(node.inputs.size()); ++i) {
            if (!graph.tensor(node.inputs[i]).is_input() || pinned.count(node.inputs[i])) {
                produced.push_back(i);
            }
        }
        std::stable_sort(produced.begin(), produced.end(), [&](int a, int b) {
            return graph.tensor(node.inputs[a]).type.bytes() >
                   graph.tensor(node.inputs[b]).type.bytes();
        });
        for (int i : produced) {
            const ir::GraphTensor& tensor = graph.tensor(node.inputs[i]);
            std::vector<exprog::Partition> partitions;
            std::vector<Reader> readers;
            for (int g = 0; g < groups; ++g) {
                exprog::Partition partition;
                partition.name = partition_name(g);
                if (placed) {
                    const auto first =
                        std::find(placement.groups.begin(), placement.groups.end(), g);
                    partition.members = {placement.devices[first - placement.groups.begin()]};
                } else {
                    partition.size = 1;
                }
                partitions.push_back(std::move(partition));
            }
            for (int k = 0; k < functions; ++k) {
                readers.push_back({Site::of_partition(partition_name(placement.groups[k])),
                                   placement.spec.functions[k].inputs[i]});
            }
            auto resident_tensor = pinned.find(node.inputs[i]);
            Exchange exchange =
                resident_tensor != pinned.end()
                    ? make_resident_preamble(graph, node.inputs[i], *resident_tensor->second,
                                             devices, std::move(partitions), readers)
                    : make_preamble(graph, node.inputs[i], plan.operators[tensor.producer],
                                    tensor.output_idx, devices, std::move(partitions), readers);
            exchange.input_idx = i;
            const ExchangeSite site{
                id,
                i,
                node.inputs[i],
                absl::StrCat("operator '", node.name, "' input ", i, " ('", tensor.name, "')"),
                &plan,
                &placement.spec,
                &placement.groups};
            EINSUMMABLE_RETURN_IF_ERROR(body(site, exchange));
            if (!placed) {
                EINSUMMABLE_RETURN_IF_ERROR(
                    take_placement(exchange, devices, site.what, placement));
                placed = true;
            }
            placement.exchanges.push_back(std::move(exchange));
        }
        plan.operators.push_back(std::move(placement));
    }
    for (ir::TensorId id : graph.saved()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        if (tensor.is_input()) {
            continue; // a saved graph input is returned from the block load() fills
        }
        Exchange exchange = make_preamble(
            graph, id, plan.operators[tensor.producer], tensor.output_idx, devices, {},
            saved_readers(plan.operators[tensor.producer], tensor.output_idx, tensor.type.dtype,
                          devices));
        const ExchangeSite site{-1, -1, id, absl::StrCat("saved output '", tensor.name, "'")};
        EINSUMMABLE_RETURN_IF_ERROR(body(site, exchange));
        plan.saved.push_back(std::move(exchange));
    }
    return plan;
}

absl::StatusOr<double> exchange_lowered_seconds(const ir::Graph& graph, const ExchangeSite& site,
                                                const Exchange& exchange,
                                                const exprog::Topology& topology,
                                                const ResidentLayout* resident) {
    if (site.plan == nullptr || site.consumer == nullptr || exchange.input_idx < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(site.what, ": only an operator input's exchange is priced by lowering"));
    }
    std::vector<int> devices;
    for (size_t k = 0; k < site.consumer->functions.size(); ++k) {
        const std::string name =
            partition_name(site.groups != nullptr ? (*site.groups)[k] : static_cast<int>(k));
        auto member = exchange.membership.find(name);
        if (member != exchange.membership.end() && !member->second.empty()) {
            devices.push_back(member->second.front());
            continue;
        }
        auto partition =
            std::find_if(exchange.program.partitions.begin(), exchange.program.partitions.end(),
                         [&](const exprog::Partition& p) { return p.name == name; });
        if (partition == exchange.program.partitions.end() || partition->members.empty()) {
            return absl::InvalidArgumentError(
                absl::StrCat(site.what, ": no device for partition ", name));
        }
        devices.push_back(partition->members.front());
    }
    const ExecGraph exec =
        lower_exchange(graph, *site.plan, exchange, *site.consumer, devices, resident);
    EINSUMMABLE_ASSIGN_OR_RETURN(PlanSimulation simulation, simulate_plan(exec, topology));
    return simulation.predicted_s;
}

namespace {

// Whether chunks could overlap anything in the exchange's whole-atom program: some step reads
// what another of its sends delivered (a relay forwards it, an aggregate sums it). Without such
// a step every transfer is one hop from data the producers left, nothing waits on a transfer,
// and chunking it only adds a copy per chunk.
bool has_pipelinable_steps(const Exchange& exchange) {
    const std::vector<exprog::ProgramStep> steps =
        exprog::program_steps(exchange.program, exchange.membership);
    auto delivered = [&](int step) {
        return step >= 0 && steps[step].kind == exprog::ProgramStep::Kind::send;
    };
    return std::any_of(steps.begin(), steps.end(), [&](const exprog::ProgramStep& step) {
        return (step.kind == exprog::ProgramStep::Kind::send && delivered(step.after)) ||
               std::any_of(step.part_steps.begin(), step.part_steps.end(), delivered);
    });
}

// The per-exchange choice (PhysicalOptions::choose_chunking): the exchange synthesised with
// whole atoms and, where chunks could overlap anything (has_pipelinable_steps), with chunks; the
// one whose lowering simulates faster kept. When the chunked one is kept, `whole` (if not null)
// receives the whole-atom one.
absl::Status choose_chunking(const ir::Graph& graph, const ExchangeSite& site, Exchange& exchange,
                             const exprog::Topology& topology, const PhysicalOptions& options,
                             uint64_t seed, std::optional<Exchange>* whole) {
    exprog::SynthesisOptions whole_atoms = options.synthesis;
    whole_atoms.max_chunks = 0;
    if (site.node < 0 || options.synthesis.max_chunks <= 0 || exchange.whole_atoms) {
        return synthesize_into(exchange, topology, whole_atoms, seed, site.what, options.cache);
    }
    Exchange chunked = exchange;
    EINSUMMABLE_RETURN_IF_ERROR(
        synthesize_into(exchange, topology, whole_atoms, seed, site.what, options.cache));
    EINSUMMABLE_ASSIGN_OR_RETURN(
        const double whole_s,
        exchange_lowered_seconds(graph, site, exchange, topology, options.resident));
    exchange.simulated_s = exchange.whole_atoms_lowered_s = exchange.chunked_lowered_s = whole_s;
    if (!has_pipelinable_steps(exchange)) {
        return absl::OkStatus(); // chunks not tried: the price of both is whole_s
    }
    EINSUMMABLE_RETURN_IF_ERROR(
        synthesize_into(chunked, topology, options.synthesis, seed, site.what, options.cache));
    EINSUMMABLE_ASSIGN_OR_RETURN(
        const double chunked_s,
        exchange_lowered_seconds(graph, site, chunked, topology, options.resident));
    exchange.chunked_lowered_s = chunked_s;
    if (chunked_s < whole_s) {
        chunked.simulated_s = chunked_s;
        chunked.whole_atoms_lowered_s = whole_s;
        chunked.chunked_lowered_s = chunked_s;
        if (whole != nullptr) {
            *whole = std::move(exchange);
        }
        exchange = std::move(chunked);
    }
    return absl::OkStatus();
}

} // namespace

absl::StatusOr<PhysicalPlan> compile_physical(const ir::Graph& graph,
                                              const logical::LogicalPlan& logical,
                                              const exprog::Topology& topology,
                                              const PhysicalOptions& options,
                                              PhysicalPlan* whole_atoms) {
    // Without a shared cache, one for this compile: its identical exchanges synthesise once.
    SynthesisCache own_cache;
    PhysicalOptions cached = options;
    if (cached.cache == nullptr) {
        cached.cache = &own_cache;
    }
    // The whole-atom programs of the exchanges that were chunked, by (operator, input).
    std::map<std::pair<ir::NodeId, int>, Exchange> replaced;
    EINSUMMABLE_ASSIGN_OR_RETURN(
        PhysicalPlan plan,
        build_physical(
            graph, logical, topology, options.synthesis.mode,
            [&](const ExchangeSite& site, Exchange& exchange) -> absl::Status {
                // synthesize_into mixes the seed with the exchange's canonical text.
                const uint64_t seed = options.synthesis.seed;
                if (!options.choose_chunking) {
                    return synthesize_into(exchange, topology, options.synthesis, seed, site.what,
                                           cached.cache);
                }
                std::optional<Exchange> whole;
                EINSUMMABLE_RETURN_IF_ERROR(choose_chunking(graph, site, exchange, topology, cached,
                                                            seed, whole_atoms ? &whole : nullptr));
                if (whole.has_value()) {
                    replaced.emplace(std::make_pair(site.node, site.input_idx), *std::move(whole));
                }
                return absl::OkStatus();
            },
            options.resident));
    if (whole_atoms != nullptr) {
        *whole_atoms = plan;
        for (OperatorPlacement& op : whole_atoms->operators) {
            for (Exchange& exchange : op.exchanges) {
                auto it = replaced.find({op.node, exchange.input_idx});
                if (it != replaced.end()) {
                    exchange = it->second;
                }
            }
        }
    }
    return plan;
}

namespace {

// What the lowering's copies move, exact: a chunk's box (chunk_box) in the tensor's dtype, with
// the statistics of a partial log-sum-exp result.
void add_program_bytes(const Exchange& exchange, std::vector<std::vector<int64_t>>& bytes) {
    std::map<std::string, int> cell_of;
    std::map<int, size_t> cell_atoms;
    for (const Atom& atom : exchange.atoms) {
        cell_of.emplace(atom.name, atom.cell);
        ++cell_atoms[atom.cell];
    }
    for (const exprog::ProgramStep& step :
         exprog::program_steps(exchange.program, exchange.membership)) {
        if (step.kind != exprog::ProgramStep::Kind::send) {
            continue;
        }
        const int cell = cell_of.at(*step.aggregate.begin());
        const bool partial = exchange.stats && step.aggregate.size() < cell_atoms[cell];
        bytes[step.gpu][step.destination] +=
            ir::block_bytes(chunk_box(exchange.cells[cell], step.chunk), exchange.dtype, partial);
    }
}

} // namespace

exprog::SynthesisOptions default_exchange_synthesis() {
    exprog::SynthesisOptions options;
    options.max_chunks = 0;
    return options;
}

absl::Status pipeline_exchanges(PhysicalPlan& plan, const exprog::Topology& topology, int chunks) {
    auto rewrite = [&](Exchange& exchange) -> absl::Status {
        if (exchange.whole_atoms) {
            return absl::OkStatus();
        }
        exchange.program = exprog::order_sends(
            exprog::chunk_actions(exprog::split_relays(exchange.program), chunks),
            exchange.membership, topology);
        absl::Status valid = exprog::check_with_membership(exchange.program, exchange.membership);
        return valid.ok() ? valid
                          : absl::InternalError(
                                absl::StrCat("a pipelined exchange is invalid: ", valid.message()));
    };
    for (OperatorPlacement& op : plan.operators) {
        for (Exchange& exchange : op.exchanges) {
            EINSUMMABLE_RETURN_IF_ERROR(rewrite(exchange));
        }
    }
    for (Exchange& exchange : plan.saved) {
        EINSUMMABLE_RETURN_IF_ERROR(rewrite(exchange));
    }
    return absl::OkStatus();
}

ir::Box chunk_box(const ir::Box& cell, const exprog::Chunk& chunk) {
    return fraction_box(cell, chunk.index, chunk.count, chunk.index + 1, chunk.count);
}

ir::Box fraction_box(const ir::Box& cell, int64_t lo_num, int64_t lo_den, int64_t hi_num,
                     int64_t hi_den) {
    if (cell.rank() == 0 || (lo_num == 0 && hi_num == hi_den)) {
        return cell;
    }
    // The outermost dimension of more than one element: every chunk is one contiguous run of
    // the cell's row-major block, so a chunk read out of it is a view and chunks written into
    // it land in place (lower.h use_views).
    int dim = 0;
    while (dim + 1 < cell.rank() && cell[dim].size() <= 1) {
        ++dim;
    }
    std::vector<ir::Interval> dims = cell.dims();
    const int64_t extent = cell[dim].size();
    dims[dim] = {cell[dim].lower + extent * lo_num / lo_den,
                 cell[dim].lower + extent * hi_num / hi_den};
    return ir::Box(std::move(dims));
}

std::vector<std::vector<int64_t>> PhysicalPlan::program_bytes() const {
    std::vector<std::vector<int64_t>> bytes(devices, std::vector<int64_t>(devices, 0));
    for (const OperatorPlacement& op : operators) {
        for (const Exchange& exchange : op.exchanges) {
            add_program_bytes(exchange, bytes);
        }
    }
    for (const Exchange& exchange : saved) {
        add_program_bytes(exchange, bytes);
    }
    return bytes;
}

namespace {

double least_crossing_bytes(const Exchange& exchange, const exprog::Topology& topology) {
    std::map<std::string, int> cell_of;
    for (const Atom& atom : exchange.atoms) {
        cell_of.emplace(atom.name, atom.cell);
    }
    std::map<std::string, std::set<int>> nodes_holding; // atom -> nodes with a GPU holding it
    for (const exprog::InDecl& in : exchange.program.ins) {
        nodes_holding[in.atom].insert(topology.node_of(in.gpu));
    }
    std::set<std::pair<exprog::Aggregate, int>> counted; // (aggregate, node)
    double least = 0.0;
    for (const exprog::OutDecl& out : exchange.program.outs) {
        std::set<int> nodes;
        for (const exprog::Site& site : out.sites) {
            for (int gpu : exprog::site_gpus(exchange.program, site, exchange.membership)) {
                nodes.insert(topology.node_of(gpu));
            }
        }
        for (int node : nodes) {
            const bool missing = std::any_of(
                out.aggregate.begin(), out.aggregate.end(),
                [&](const std::string& atom) { return nodes_holding[atom].count(node) == 0; });
            if (missing && counted.insert({out.aggregate, node}).second) {
                const int cell = cell_of.at(*out.aggregate.begin());
                least += static_cast<double>(
                    ir::block_bytes(exchange.cells[cell], exchange.dtype, false));
            }
        }
    }
    return least;
}

} // namespace

NodeCrossing node_crossing(const PhysicalPlan& plan, const exprog::Topology& topology) {
    NodeCrossing crossing;
    if (topology.nodes() <= 1) {
        return crossing;
    }
    const std::vector<std::vector<int64_t>> bytes = plan.program_bytes();
    for (int src = 0; src < plan.devices; ++src) {
        for (int dst = 0; dst < plan.devices; ++dst) {
            if (topology.node_of(src) != topology.node_of(dst)) {
                crossing.sent_bytes += static_cast<double>(bytes[src][dst]);
            }
        }
    }
    for (const OperatorPlacement& op : plan.operators) {
        for (const Exchange& exchange : op.exchanges) {
            crossing.least_bytes += least_crossing_bytes(exchange, topology);
        }
    }
    for (const Exchange& exchange : plan.saved) {
        crossing.least_bytes += least_crossing_bytes(exchange, topology);
    }
    return crossing;
}

double PhysicalPlan::simulated_s() const {
    double total = 0.0;
    for (const OperatorPlacement& op : operators) {
        for (const Exchange& exchange : op.exchanges) {
            total += exchange.simulated_s;
        }
    }
    for (const Exchange& exchange : saved) {
        total += exchange.simulated_s;
    }
    return total;
}

namespace {

void explain_exchange(const ir::Graph& graph, const Exchange& exchange, std::string& out) {
    absl::StrAppend(&out, "  exchange of '", graph.tensor(exchange.tensor).name, "'",
                    exchange.input_idx >= 0 ? absl::StrCat(" (input ", exchange.input_idx, ")")
                                            : std::string(" (saved output, to its holders)"),
                    ": ", exchange.atoms.size(), " atoms, simulated ",
                    absl::StrFormat("%.3f", exchange.simulated_s * 1e3), " ms (naive ",
                    absl::StrFormat("%.3f", exchange.naive_simulated_s * 1e3), " ms)\n");
    for (absl::string_view line : absl::StrSplit(exprog::print_program(exchange.program), '\n')) {
        if (!line.empty()) {
            absl::StrAppend(&out, "    ", line, "\n");
        }
    }
}

} // namespace

std::string explain_exchanges(const ir::Graph& graph, const PhysicalPlan& plan) {
    std::string out = absl::StrCat("exchange programs (", exprog::synthesis_mode_name(plan.mode),
                                   ", topology ", plan.topology, "; times simulated):\n");
    for (const OperatorPlacement& op : plan.operators) {
        absl::StrAppend(&out, graph.node(op.node).name, ": functions on devices [",
                        absl::StrJoin(op.devices, ", "), "]\n");
        for (const Exchange& exchange : op.exchanges) {
            explain_exchange(graph, exchange, out);
        }
    }
    for (const Exchange& exchange : plan.saved) {
        explain_exchange(graph, exchange, out);
    }
    absl::StrAppend(&out, "total simulated exchange time: ",
                    absl::StrFormat("%.3f", plan.simulated_s() * 1e3), " ms\n");
    return out;
}

} // namespace einsummable::physical
