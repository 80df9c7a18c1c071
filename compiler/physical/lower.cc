#include "compiler/physical/lower.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/parser.h"
#include "compiler/exprog/program_simulation.h"
#include "compiler/ir/internal_error.h"
#include "compiler/ir/ops/write_rows.h"
#include "compiler/support/status_macros.h"

namespace einsummable::physical {
namespace {

using exprog::Aggregate;
using exprog::ProgramStep;

class Lowering {
public:
    Lowering(const ir::Graph& graph, const PhysicalPlan& plan, const ResidentLayout* resident,
             const support::Cancellation* cancellation)
        : graph_(graph), plan_(plan), resident_(resident), cancellation_(cancellation) {
        exec_.devices = plan.devices;
        kernel_outputs_.resize(graph.nodes().size());
        if (resident_ != nullptr && resident_->devices == plan.devices) {
            exec_.resident_bytes = resident_->arena_bytes;
        }
    }

    absl::StatusOr<ExecGraph> run(bool views) {
        for (const OperatorPlacement& op : plan_.operators) {
            if (support::is_cancelled(cancellation_)) {
                return support::cancelled_error(
                    absl::StrCat("the lowering of operator '", graph_.node(op.node).name, "'"));
            }
            lower_operator(op);
            EINSUMMABLE_RETURN_IF_ERROR(error_);
        }
        for (ir::TensorId id : graph_.saved()) {
            lower_saved(id);
        }
        order_by_micro_batch(exec_, batch_);
        if (views) {
            const std::vector<bool> candidates = chunk_nodes();
            use_views(exec_, &candidates);
        }
        EINSUMMABLE_RETURN_IF_ERROR(plan_memory(exec_, cancellation_));
        return std::move(exec_);
    }

private:
    BufferId add_buffer(ir::TensorId tensor, const ir::Box& box, int device,
                        bool persistent = false, bool stats = false) {
        const ir::GraphTensor& info = graph_.tensor(tensor);
        exec_.buffers.push_back({device, info.type.dtype, box, info.name, persistent, 0});
        exec_.buffers.back().stats = stats;
        writer_.push_back(-1);
        return static_cast<BufferId>(exec_.buffers.size()) - 1;
    }

    // Appends a node whose deps are the writers of its inputs; records it as its outputs'
    // writer.
    int add_node(ExecNode node, const std::vector<int>& extra_deps = {}) {
        std::set<int> deps(extra_deps.begin(), extra_deps.end());
        for (BufferId input : node.inputs) {
            if (writer_[input] >= 0) {
                deps.insert(writer_[input]);
            }
        }
        node.deps.assign(deps.begin(), deps.end());
        const int id = static_cast<int>(exec_.nodes.size());
        // Its micro-batch: that of the function spec it serves, else the latest of its deps'.
        int batch = std::max(batch_now_, 0);
        if (batch_now_ < 0) {
            for (int dep : node.deps) {
                batch = std::max(batch, batch_[dep]);
            }
        }
        batch_.push_back(batch);
        for (BufferId output : node.outputs) {
            writer_[output] = id;
        }
        exec_.nodes.push_back(std::move(node));
        return id;
    }

    // A slice or concat of chunks (a chunk read out of a larger fact, a cell stitched from
    // chunks): add_simple, the node marked as one use_views may turn into views.
    BufferId add_chunk_node(NodeKind kind, int device, std::vector<BufferId> inputs,
                            ir::TensorId tensor, const ir::Box& box) {
        const BufferId out = add_simple(kind, device, std::move(inputs), tensor, box);
        chunk_nodes_.insert(writer_[out]);
        return out;
    }

    // Per node: whether it is a slice or concat of chunks (add_chunk_node).
    std::vector<bool> chunk_nodes() const {
        std::vector<bool> marked(exec_.nodes.size(), false);
        for (int node : chunk_nodes_) {
            marked[node] = true;
        }
        return marked;
    }

    // The output carries log-sum-exp statistics when `stats` says so, or, unset, when the
    // first input does (a slice, copy or concat of partial results is one).
    BufferId add_simple(NodeKind kind, int device, std::vector<BufferId> inputs,
                        ir::TensorId tensor, const ir::Box& box, ir::AggOp agg = ir::AggOp::none,
                        const std::vector<int>& extra_deps = {},
                        std::optional<bool> stats = std::nullopt) {
        const bool with_stats = stats.value_or(!inputs.empty() && exec_.buffers[inputs[0]].stats);
        const BufferId out = add_buffer(tensor, box, device, /*persistent=*/false, with_stats);
        ExecNode node;
        node.kind = kind;
        node.device = device;
        node.inputs = std::move(inputs);
        node.outputs = {out};
        node.agg = agg;
        add_node(std::move(node), extra_deps);
        return out;
    }

    // The tensor's resident blocks when the layout holds it for this graph and these devices.
    const ResidentTensor* resident_tensor(ir::TensorId tensor) const {
        if (exec_.resident_bytes.empty()) {
            return nullptr;
        }
        const ir::GraphTensor& info = graph_.tensor(tensor);
        auto it = resident_->tensors.find(info.name);
        return it != resident_->tensors.end() && it->second.type == info.type && !info.saved
                   ? &it->second
                   : nullptr;
    }

    // The buffer of one resident block: persistent, in the device's resident arena.
    BufferId resident_buffer(ir::TensorId tensor, const ResidentBlock& block) {
        auto key = std::make_tuple(tensor, block.box, block.device);
        auto it = input_blocks_.find(key);
        if (it != input_blocks_.end()) {
            return it->second;
        }
        const BufferId id = add_buffer(tensor, block.box, block.device, /*persistent=*/true);
        exec_.buffers[id].resident = true;
        exec_.buffers[id].offset = block.offset;
        input_blocks_.emplace(key, id);
        return id;
    }

    // The persistent block of a graph input that load() fills; a resident tensor's block is
    // its resident buffer (a plan that defined the layout reads exactly its blocks).
    BufferId input_block(ir::TensorId tensor, const ir::Box& block, int device) {
        if (const ResidentTensor* resident = resident_tensor(tensor)) {
            auto found = std::find_if(
                resident->blocks.begin(), resident->blocks.end(),
                [&](const ResidentBlock& b) { return b.device == device && b.box == block; });
            EINSUMMABLE_CHECK(found != resident->blocks.end(),
                              "a resident input read in a block its layout does not hold");
            return resident_buffer(tensor, *found);
        }
        auto key = std::make_tuple(tensor, block, device);
        auto it = input_blocks_.find(key);
        if (it != input_blocks_.end()) {
            return it->second;
        }
        const BufferId id = add_buffer(tensor, block, device, /*persistent=*/true);
        exec_.input_blocks[graph_.tensor(tensor).name].push_back(id);
        input_blocks_.emplace(key, id);
        return id;
    }

    // The source of an IN atom at `gpu`: the cell sliced out of the buffer that holds it there
    // (the buffer itself when the cell is the whole buffer).
    BufferId cell_source(BufferId source, const ir::Box& cell, ir::TensorId tensor, int gpu) {
        return cell == exec_.buffers[source].box
                   ? source
                   : add_simple(NodeKind::slice, gpu, {source}, tensor, cell);
    }

    class ExchangeRun;

    // Walks an exchange program's steps; returns, for every cell, the buffer holding the
    // cell's whole aggregate at each GPU where an OUT requirement needs it.
    std::map<std::pair<int, int>, BufferId> run_exchange(const Exchange& exchange);

    // The block `block` of a tensor at `gpu`, stitched from the exchange's cells there.
    BufferId assemble(const Exchange& exchange,
                      const std::map<std::pair<int, int>, BufferId>& cells, const ir::Box& block,
                      int gpu) {
        auto key = std::make_tuple(&exchange, block, gpu);
        auto it = assembled_.find(key);
        if (it != assembled_.end()) {
            return it->second;
        }
        std::vector<BufferId> parts;
        for (size_t c = 0; c < exchange.cells.size(); ++c) {
            if (block.contains(exchange.cells[c])) {
                parts.push_back(cells.at({static_cast<int>(c), gpu}));
            }
        }
        const BufferId buffer =
            parts.size() == 1 && exec_.buffers[parts[0]].box == block
                ? parts[0]
                : add_simple(NodeKind::concat, gpu, std::move(parts), exchange.tensor, block);
        assembled_.emplace(key, buffer);
        return buffer;
    }

    // The output buffers of function spec k of `op`. Output boxes written more than once under
    // a log-sum-exp aggregation are partial results: the kernel writes their statistics too.
    std::vector<BufferId> add_kernel_outputs(const OperatorPlacement& op, int k) {
        const ir::GraphNode& node = graph_.node(op.node);
        const ir::FunctionSpec& function = op.spec.functions[k];
        std::vector<BufferId> outputs;
        for (size_t o = 0; o < node.outputs.size(); ++o) {
            const int copies = static_cast<int>(std::count_if(
                op.spec.functions.begin(), op.spec.functions.end(),
                [&](const ir::FunctionSpec& f) { return f.outputs[o] == function.outputs[o]; }));
            const bool stats = ir::carries_stats(op.spec.aggregations[o]) && copies > 1;
            outputs.push_back(add_buffer(node.outputs[o], function.outputs[o], op.devices[k],
                                         /*persistent=*/false, stats));
        }
        return outputs;
    }

public:
    // lower_exchange (lower.h): one operator input's exchange alone, its producer's outputs
    // written by no node.
    ExecGraph lower_exchange_alone(const Exchange& exchange, const ir::JoinAggSpec& consumer,
                                   const std::vector<int>& devices) {
        const ir::GraphTensor& tensor = graph_.tensor(exchange.tensor);
        if (!tensor.is_input()) {
            const OperatorPlacement& producer = plan_.operators[tensor.producer];
            std::vector<BufferId>& written = kernel_outputs_[tensor.producer];
            for (int k = 0; k < static_cast<int>(producer.spec.functions.size()); ++k) {
                const std::vector<BufferId> outputs = add_kernel_outputs(producer, k);
                written.insert(written.end(), outputs.begin(), outputs.end());
            }
        }
        const auto cells = run_exchange(exchange);
        for (size_t k = 0; k < devices.size(); ++k) {
            assemble(exchange, cells, consumer.functions[k].inputs[exchange.input_idx], devices[k]);
        }
        const std::vector<bool> candidates = chunk_nodes();
        use_views(exec_, &candidates);
        return std::move(exec_);
    }

private:
    void lower_operator(const OperatorPlacement& op) {
        const ir::GraphNode& node = graph_.node(op.node);
        const int functions = static_cast<int>(op.spec.functions.size());
        // blocks[k][i]: the buffer function k reads as input i.
        std::vector<std::vector<BufferId>> blocks(functions,
                                                  std::vector<BufferId>(node.inputs.size(), -1));
        for (const Exchange& exchange : op.exchanges) {
            batch_now_ = -1; // the transfers take their producers' micro-batches
            const auto cells = run_exchange(exchange);
            for (int k = 0; k < functions; ++k) {
                batch_now_ = micro_batch(op, k);
                blocks[k][exchange.input_idx] =
                    assemble(exchange, cells, op.spec.functions[k].inputs[exchange.input_idx],
                             op.devices[k]);
            }
        }
        for (int k = 0; k < functions; ++k) {
            for (size_t i = 0; i < node.inputs.size(); ++i) {
                if (blocks[k][i] < 0) {
                    EINSUMMABLE_CHECK(graph_.tensor(node.inputs[i]).is_input(),
                                      "produced input without an exchange");
                    blocks[k][i] =
                        input_block(node.inputs[i], op.spec.functions[k].inputs[i], op.devices[k]);
                }
            }
        }
        // A resident state is updated in place: the operator's output is the state's blocks.
        const int in_place = ir::in_place_input(*node.op);
        const bool state = in_place >= 0 && resident_tensor(node.inputs[in_place]) != nullptr;
        std::vector<BufferId>& written = kernel_outputs_[op.node];
        for (int k = 0; k < functions; ++k) {
            batch_now_ = micro_batch(op, k);
            const ir::FunctionSpec& function = op.spec.functions[k];
            ExecNode kernel;
            kernel.kind = NodeKind::kernel;
            kernel.device = op.devices[k];
            kernel.inputs = blocks[k];
            if (state) {
                const BufferId block = blocks[k][in_place];
                const Buffer& buffer = exec_.buffers[block];
                if (!buffer.resident || buffer.is_view() || buffer.device != op.devices[k] ||
                    buffer.box != function.outputs[0]) {
                    error_ = absl::FailedPreconditionError(absl::StrCat(
                        "operator '", node.name, "' cannot update the resident state '",
                        graph_.tensor(node.inputs[in_place]).name, "' in place: function ", k,
                        " on device ", op.devices[k], " writes ", function.outputs[0].to_string(),
                        " but reads the state from ",
                        buffer.resident ? "its resident block " : "a copy ", buffer.box.to_string(),
                        " on device ", buffer.device));
                    return;
                }
                kernel.outputs = {block};
            } else {
                kernel.outputs = add_kernel_outputs(op, k);
            }
            written.insert(written.end(), kernel.outputs.begin(), kernel.outputs.end());
            kernel.graph_node = op.node;
            kernel.label = absl::StrCat(node.name, "#", k);
            kernel.op = node.op.get();
            kernel.function = k;
            kernel.spec = function;
            add_node(std::move(kernel));
        }
        batch_now_ = -1;
    }

    static int micro_batch(const OperatorPlacement& op, int k) {
        return k < static_cast<int>(op.micro_batch.size()) ? op.micro_batch[k] : 0;
    }

    // A saved output stays on the devices that computed it: its exchange (physical_plan.h)
    // leaves every block at one holder, aggregating the blocks several function specs wrote
    // there; each block's buffer there becomes persistent, and the runtime fetches the blocks
    // from their devices.
    void lower_saved(ir::TensorId id) {
        const ir::GraphTensor& tensor = graph_.tensor(id);
        if (tensor.is_input()) {
            exec_.outputs[tensor.name] = {input_block(id, tensor.type.box(), 0)};
            return;
        }
        const Exchange& exchange = *std::find_if(plan_.saved.begin(), plan_.saved.end(),
                                                 [&](const Exchange& e) { return e.tensor == id; });
        std::vector<BufferId>& blocks = exec_.outputs[tensor.name];
        for (const auto& [cell_gpu, buffer] : run_exchange(exchange)) {
            EINSUMMABLE_CHECK(exec_.buffers[buffer].box == exchange.cells[cell_gpu.first] &&
                                  !exec_.buffers[buffer].stats,
                              "a saved output's block is not its complete cell");
            exec_.buffers[buffer].persistent = true;
            blocks.push_back(buffer);
        }
    }

    const ir::Graph& graph_;
    const PhysicalPlan& plan_;
    const ResidentLayout* resident_;            // null: no resident inputs
    const support::Cancellation* cancellation_; // polled per operator; null: never
    absl::Status error_;                        // a state that cannot be updated in place
    ExecGraph exec_;
    std::vector<int> writer_; // per buffer: the node that writes it, -1 for load()
    std::vector<int> batch_;  // per node: its micro-batch (order_by_micro_batch)
    // The micro-batch of the function spec being lowered; -1 between function specs (an
    // exchange's transfers, a saved output's reductions).
    int batch_now_ = -1;
    // Per graph node: its kernel outputs, [function * num_outputs + output].
    std::vector<std::vector<BufferId>> kernel_outputs_;
    // Graph input blocks by (tensor, box, device): load()'s and resident ones.
    std::map<std::tuple<ir::TensorId, ir::Box, int>, BufferId> input_blocks_;
    std::map<std::tuple<const Exchange*, ir::Box, int>, BufferId> assembled_;
    std::set<int> chunk_nodes_; // the slices and concats of chunks (add_chunk_node)
};

// One exchange program lowered step by step: every FORM an aggregate node, every SEND a copy,
// reading the facts earlier steps left (or the atoms present from the start); then the buffer
// of every cell at every GPU an OUT requirement names.
class Lowering::ExchangeRun {
public:
    ExchangeRun(Lowering& lowering, const Exchange& exchange)
        : lowering_(lowering), exec_(lowering.exec_), exchange_(exchange),
          tensor_(lowering.graph_.tensor(exchange.tensor)) {
        // A resident input's atoms come from its resident blocks, a produced tensor's from the
        // producer's kernel outputs.
        resident_ = tensor_.is_input() ? lowering_.resident_tensor(exchange.tensor) : nullptr;
        EINSUMMABLE_CHECK(!tensor_.is_input() || resident_ != nullptr,
                          "an exchange of a graph input that is not resident");
        for (const Atom& atom : exchange.atoms) {
            atoms_.emplace(atom.name, &atom);
        }
        producer_ = resident_ != nullptr ? nullptr : &lowering_.plan_.operators[tensor_.producer];
        for (const Atom& atom : exchange.atoms) {
            ++cell_atoms_[atom.cell];
        }
        stats_kind_ = producer_ != nullptr &&
                      ir::carries_stats(producer_->spec.aggregations[tensor_.output_idx]);
    }

    std::map<std::pair<int, int>, BufferId> run() {
        for (const ProgramStep& step :
             exprog::program_steps(exchange_.program, exchange_.membership)) {
            run_step(step);
        }
        std::map<std::pair<int, int>, BufferId> cells; // (cell, gpu) -> buffer
        for (const exprog::OutDecl& out : exchange_.program.outs) {
            const int cell = cell_of(out.aggregate);
            for (const exprog::Site& site : out.sites) {
                for (int gpu : exprog::site_gpus(exchange_.program, site, exchange_.membership)) {
                    if (cells.count({cell, gpu})) {
                        continue;
                    }
                    cells.emplace(std::make_pair(cell, gpu),
                                  whole_at(exchange_.cells[cell], out.aggregate, gpu));
                }
            }
        }
        return cells;
    }

private:
    int cell_of(const Aggregate& aggregate) const { return atoms_.at(*aggregate.begin())->cell; }

    // A log-sum-exp aggregate short of all its cell's atoms is a partial result: its buffers
    // carry statistics; the complete one has none.
    bool partial(const Aggregate& aggregate) {
        return stats_kind_ && aggregate.size() < cell_atoms_[cell_of(aggregate)];
    }

    // `fact` read in the extent of `chunk` (which its chunk contains): its buffer, or a slice
    // of it.
    BufferId read(const exprog::Fact& fact, const exprog::Chunk& chunk) {
        const BufferId buffer = lookup(fact);
        const ir::Box box = chunk_box(exchange_.cells[cell_of(fact.aggregate)], chunk);
        if (buffer < 0 || box.empty()) {
            return -1;
        }
        return exec_.buffers[buffer].box == box
                   ? buffer
                   : lowering_.add_chunk_node(NodeKind::slice, fact.gpu, {buffer}, exchange_.tensor,
                                              box);
    }

    // The buffer of `fact`: the one a step formed, a slice of a larger chunk of it at its GPU,
    // or, for a single atom, the buffer it is present in from the start.
    BufferId lookup(const exprog::Fact& fact) {
        auto it = facts_.find(fact);
        if (it != facts_.end()) {
            return it->second;
        }
        if (!fact.chunk.whole()) {
            // A chunk the semantics records at a GPU that sent it out of a larger fact there
            // (no step formed it): a slice of that fact.
            for (auto other = facts_.lower_bound(
                     exprog::Fact{fact.aggregate, fact.gpu, exprog::Chunk{-1, 0}});
                 other != facts_.end() && other->first.aggregate == fact.aggregate &&
                 other->first.gpu == fact.gpu;
                 ++other) {
                if (other->first.chunk.contains(fact.chunk)) {
                    return read(other->first, fact.chunk);
                }
            }
            return read(exprog::Fact{fact.aggregate, fact.gpu}, fact.chunk);
        }
        EINSUMMABLE_CHECK(fact.aggregate.size() == 1,
                          absl::StrCat(exprog::fact_to_string(fact),
                                       " used before it was formed, in the exchange:\n",
                                       exprog::print_program(exchange_.program)));
        const BufferId buffer = atom_buffer(fact);
        facts_.emplace(fact, buffer);
        return buffer;
    }

    // A fact present from the start: a single atom at a device that holds it — its producer's,
    // sliced out of the kernel output that wrote it, or one with a resident block containing
    // the cell.
    BufferId atom_buffer(const exprog::Fact& fact) {
        const int gpu = fact.gpu;
        const Atom& atom = *atoms_.at(*fact.aggregate.begin());
        const ir::Box& cell = exchange_.cells[atom.cell];
        BufferId source = -1;
        if (resident_ != nullptr) {
            for (const ResidentBlock& block : resident_->blocks) {
                if (block.device == gpu && block.box.contains(cell)) {
                    source = lowering_.resident_buffer(exchange_.tensor, block);
                    break;
                }
            }
            EINSUMMABLE_CHECK(source >= 0, "resident atom read where no block holds it");
        } else {
            EINSUMMABLE_CHECK(producer_->devices[atom.producer_function] == gpu,
                              "atom read away from its producer");
            const int outputs = lowering_.graph_.node(tensor_.producer).op->num_outputs();
            source = lowering_.kernel_outputs_[tensor_.producer][atom.producer_function * outputs +
                                                                 tensor_.output_idx];
        }
        return lowering_.cell_source(source, cell, exchange_.tensor, gpu);
    }

    // The nodes whose end means every one of `steps_before` is done (-1: none).
    std::vector<int> done_of(const std::vector<int>& steps_before) const {
        std::vector<int> nodes;
        for (int step : steps_before) {
            if (step >= 0) {
                nodes.insert(nodes.end(), step_done_[step].begin(), step_done_[step].end());
            }
        }
        return nodes;
    }

    // One step: a FORM's aggregate node or a SEND's copy, after the steps it is ordered after.
    void run_step(const ProgramStep& step) {
        const ir::Box& cell = exchange_.cells[cell_of(step.aggregate)];
        const ir::Box box = chunk_box(cell, step.chunk);
        const std::vector<int> order_deps = done_of(step.order_after);
        if (box.empty()) {
            // Nothing to move or combine; the step is done when what it waited for is.
            std::vector<int> before = step.order_after;
            before.push_back(step.after);
            before.insert(before.end(), step.part_steps.begin(), step.part_steps.end());
            facts_.emplace(
                exprog::Fact{step.aggregate,
                             step.kind == ProgramStep::Kind::form ? step.gpu : step.destination,
                             step.chunk},
                -1);
            step_done_.push_back(done_of(before));
            return;
        }
        BufferId out = -1;
        if (step.kind == ProgramStep::Kind::form) {
            std::vector<BufferId> parts;
            for (const exprog::Fact& part : step.parts) {
                parts.push_back(read(part, step.chunk));
            }
            EINSUMMABLE_CHECK(producer_ != nullptr, "a resident atom aggregated");
            out = lowering_.add_simple(NodeKind::aggregate, step.gpu, std::move(parts),
                                       exchange_.tensor, box,
                                       producer_->spec.aggregations[tensor_.output_idx], order_deps,
                                       partial(step.aggregate));
            facts_.emplace(exprog::Fact{step.aggregate, step.gpu, step.chunk}, out);
        } else {
            const BufferId source =
                read(exprog::Fact{step.aggregate, step.gpu, step.source_chunk}, step.chunk);
            out = lowering_.add_simple(NodeKind::copy, step.destination, {source}, exchange_.tensor,
                                       box, ir::AggOp::none, order_deps);
            facts_.emplace(exprog::Fact{step.aggregate, step.destination, step.chunk}, out);
        }
        step_done_.push_back({lowering_.writer_[out]});
    }

    // The whole cell of `aggregate` at `gpu`: its buffer when the whole is there, else the
    // chunks there stitched together (a sweep over their intervals, slicing where two overlap).
    BufferId whole_at(const ir::Box& cell, const Aggregate& aggregate, int gpu) {
        const exprog::Fact whole{aggregate, gpu};
        const bool declared =
            aggregate.size() == 1 &&
            std::any_of(exchange_.program.ins.begin(), exchange_.program.ins.end(),
                        [&](const exprog::InDecl& in) {
                            return in.atom == *aggregate.begin() && in.gpu == gpu;
                        });
        if (facts_.count(whole) || declared) {
            return lookup(whole);
        }
        std::vector<std::pair<exprog::Chunk, BufferId>> present;
        for (auto it = facts_.lower_bound(exprog::Fact{aggregate, gpu, exprog::Chunk{-1, 0}});
             it != facts_.end() && it->first.aggregate == aggregate && it->first.gpu == gpu; ++it) {
            present.emplace_back(it->first.chunk, it->second);
        }
        // reach = num/den: [0, reach) is stitched.
        int64_t num = 0;
        int64_t den = 1;
        std::vector<BufferId> pieces;
        while (num < den) {
            const std::pair<exprog::Chunk, BufferId>* best = nullptr;
            for (const auto& candidate : present) {
                const exprog::Chunk& c = candidate.first;
                const bool starts_by_reach = int64_t{c.index} * den <= num * c.count;
                const bool extends = int64_t{c.index + 1} * den > num * c.count;
                if (starts_by_reach && extends &&
                    (best == nullptr || int64_t{c.index + 1} * best->first.count >
                                            int64_t{best->first.index + 1} * c.count)) {
                    best = &candidate;
                }
            }
            EINSUMMABLE_CHECK(best != nullptr, "an OUT met by chunks that do not cover the cell");
            const exprog::Chunk& c = best->first;
            const ir::Box box = fraction_box(cell, num, den, c.index + 1, c.count);
            if (best->second >= 0 && !box.empty()) {
                pieces.push_back(exec_.buffers[best->second].box == box
                                     ? best->second
                                     : lowering_.add_chunk_node(NodeKind::slice, gpu,
                                                                {best->second}, exchange_.tensor,
                                                                box));
            }
            num = c.index + 1;
            den = c.count;
        }
        return pieces.size() == 1
                   ? pieces[0]
                   : lowering_.add_chunk_node(NodeKind::concat, gpu, std::move(pieces),
                                              exchange_.tensor, cell);
    }

    Lowering& lowering_;
    ExecGraph& exec_;
    const Exchange& exchange_;
    const ir::GraphTensor& tensor_;
    const ResidentTensor* resident_ = nullptr;    // a resident input's layout, else null
    const OperatorPlacement* producer_ = nullptr; // a produced tensor's producer, else null
    std::map<std::string, const Atom*> atoms_;
    std::map<int, size_t> cell_atoms_; // per cell, its number of atoms
    bool stats_kind_ = false;          // the producer aggregates with log-sum-exp statistics
    // Every fact's buffer: the cell's box, or its chunk's (chunk_box); -1 for a chunk of
    // no elements (a cell thinner than its chunk count), which no node reads or writes.
    std::map<exprog::Fact, BufferId> facts_;
    // Per step, the nodes whose end means the step is done (ORDER's dependencies): its own
    // node, or, for a step of an empty chunk, what that step waited for.
    std::vector<std::vector<int>> step_done_;
};

std::map<std::pair<int, int>, BufferId> Lowering::run_exchange(const Exchange& exchange) {
    return ExchangeRun(*this, exchange).run();
}

constexpr int64_t kAlignment = 64;

int64_t align_up(int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

} // namespace

absl::StatusOr<ExecGraph> lower(const ir::Graph& graph, const PhysicalPlan& plan,
                                const ResidentLayout* resident,
                                const support::Cancellation* cancellation, bool views) {
    if (plan.operators.size() != graph.nodes().size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the physical plan has ", plan.operators.size(),
                         " operators; the graph has ", graph.nodes().size()));
    }
    return Lowering(graph, plan, resident, cancellation).run(views);
}

namespace {

// Whether concat `concat`'s inputs can all be written in place, as views of its output.
bool concat_in_place(const ExecGraph& graph, const ExecNode& concat, const std::vector<int>& writer,
                     const std::vector<int>& writes, const std::vector<int>& concat_reads) {
    const BufferId out = concat.outputs[0];
    // A persistent output (a saved output's gathering) keeps its concat: its parts stay
    // transient buffers of their own.
    if (graph.buffers[out].stats || graph.buffers[out].persistent) {
        return false;
    }
    for (BufferId in : concat.inputs) {
        const Buffer& part = graph.buffers[in];
        if (part.stats || part.is_view() || part.persistent || writes[in] != 1 ||
            concat_reads[in] != 1 || !contiguous_offset(graph.buffers[out].box, part.box)) {
            return false;
        }
        for (BufferId read : graph.nodes[writer[in]].inputs) {
            if (graph.view_root(read) == out) {
                return false;
            }
        }
    }
    return true;
}

} // namespace

void order_by_micro_batch(ExecGraph& graph, const std::vector<int>& batch) {
    const int nodes = static_cast<int>(graph.nodes.size());
    if (std::all_of(batch.begin(), batch.end(), [](int b) { return b == 0; })) {
        return; // the order already is (0, index)
    }
    std::vector<std::vector<int>> users(nodes);
    std::vector<int> waiting(nodes, 0);
    for (int n = 0; n < nodes; ++n) {
        waiting[n] = static_cast<int>(graph.nodes[n].deps.size());
        for (int dep : graph.nodes[n].deps) {
            users[dep].push_back(n);
        }
    }
    // Kahn's algorithm, the ready node of the least (micro-batch, index) first.
    std::set<std::pair<int, int>> ready;
    for (int n = 0; n < nodes; ++n) {
        if (waiting[n] == 0) {
            ready.insert({batch[n], n});
        }
    }
    std::vector<int> order, position(nodes, -1);
    order.reserve(nodes);
    while (!ready.empty()) {
        const int n = ready.begin()->second;
        ready.erase(ready.begin());
        position[n] = static_cast<int>(order.size());
        order.push_back(n);
        for (int user : users[n]) {
            if (--waiting[user] == 0) {
                ready.insert({batch[user], user});
            }
        }
    }
    EINSUMMABLE_CHECK(static_cast<int>(order.size()) == nodes, "the ExecGraph's deps have a cycle");
    std::vector<ExecNode> reordered;
    reordered.reserve(nodes);
    for (int n : order) {
        ExecNode node = std::move(graph.nodes[n]);
        for (int& dep : node.deps) {
            dep = position[dep];
        }
        std::sort(node.deps.begin(), node.deps.end());
        reordered.push_back(std::move(node));
    }
    graph.nodes = std::move(reordered);
}

void use_views(ExecGraph& graph, const std::vector<bool>* candidates) {
    const int nodes = static_cast<int>(graph.nodes.size());
    const size_t buffers = graph.buffers.size();
    std::vector<int> writer(buffers, -1), writes(buffers, 0), concat_reads(buffers, 0);
    for (int n = 0; n < nodes; ++n) {
        for (BufferId b : graph.nodes[n].outputs) {
            writer[b] = n;
            ++writes[b];
        }
        if (graph.nodes[n].kind == NodeKind::concat) {
            for (BufferId b : graph.nodes[n].inputs) {
                ++concat_reads[b];
            }
        }
    }
    std::vector<bool> removed(nodes, false);
    // Concats first, so that a slice feeding an in-place concat writes its part in place (one
    // node, moving only that part) rather than becoming a view the concat must copy.
    for (int n = 0; n < nodes; ++n) {
        const ExecNode& node = graph.nodes[n];
        const bool candidate = candidates == nullptr || (*candidates)[n];
        if (candidate && node.kind == NodeKind::concat &&
            concat_in_place(graph, node, writer, writes, concat_reads)) {
            for (BufferId in : node.inputs) {
                graph.buffers[in].parent = node.outputs[0];
            }
            removed[n] = true;
        }
    }
    for (int n = 0; n < nodes; ++n) {
        const ExecNode& node = graph.nodes[n];
        if (node.kind != NodeKind::slice || (candidates != nullptr && !(*candidates)[n])) {
            continue;
        }
        Buffer& out = graph.buffers[node.outputs[0]];
        const Buffer& in = graph.buffers[node.inputs[0]];
        if (!out.stats && !out.persistent && !out.is_view() && writes[node.outputs[0]] == 1 &&
            contiguous_offset(in.box, out.box)) {
            out.parent = node.inputs[0];
            removed[n] = true;
        }
    }
    // Renumber; a removed node's dependants wait for its (resolved) deps instead.
    std::vector<int> index(nodes, -1);
    std::vector<std::vector<int>> resolved(nodes);
    std::vector<ExecNode> kept;
    for (int n = 0; n < nodes; ++n) {
        std::set<int> deps;
        for (int dep : graph.nodes[n].deps) {
            if (removed[dep]) {
                deps.insert(resolved[dep].begin(), resolved[dep].end());
            } else {
                deps.insert(index[dep]);
            }
        }
        if (removed[n]) {
            resolved[n].assign(deps.begin(), deps.end());
            continue;
        }
        index[n] = static_cast<int>(kept.size());
        kept.push_back(std::move(graph.nodes[n]));
        kept.back().deps.assign(deps.begin(), deps.end());
    }
    graph.nodes = std::move(kept);
    graph.place_views();
}

ExecGraph lower_exchange(const ir::Graph& graph, const PhysicalPlan& plan, const Exchange& exchange,
                         const ir::JoinAggSpec& consumer, const std::vector<int>& devices,
                         const ResidentLayout* resident) {
    return Lowering(graph, plan, resident, nullptr)
        .lower_exchange_alone(exchange, consumer, devices);
}

namespace {

// A buffer an exchange sends from stays live until the next kernel: reusing its bytes for the
// next slice on its device would make that slice wait for the copy to another device, and the
// exchange would become a chain of launches one device after another. `last` is, per buffer,
// the last node using it; it is moved to the next kernel node for buffers last read by a copy.
void keep_sent_buffers_to_next_kernel(const ExecGraph& graph, std::vector<int>& last) {
    const int nodes = static_cast<int>(graph.nodes.size());
    int next_kernel = nodes;
    std::vector<int> phase_end(nodes);
    for (int n = nodes - 1; n >= 0; --n) {
        if (graph.nodes[n].kind == NodeKind::kernel) {
            next_kernel = n;
        }
        phase_end[n] = next_kernel;
    }
    for (int& end : last) {
        if (end >= 0 && graph.nodes[end].kind == NodeKind::copy) {
            end = std::max(end, phase_end[end]);
        }
    }
}

} // namespace

absl::Status plan_memory(ExecGraph& graph, const support::Cancellation* cancellation) {
    EINSUMMABLE_RETURN_IF_ERROR(support::check_cancelled(cancellation, "the memory plan"));
    const int buffers = static_cast<int>(graph.buffers.size());
    const int nodes = static_cast<int>(graph.nodes.size());
    // Per root buffer (a view counts as its root): the first and last node using it, its
    // writers and every node using it.
    std::vector<int> first(buffers, -1), last(buffers, -1);
    std::vector<std::vector<int>> writers(buffers), users(buffers);
    for (int n = 0; n < nodes; ++n) {
        for (BufferId b : graph.nodes[n].outputs) {
            const BufferId root = graph.view_root(b);
            if (first[root] < 0) {
                first[root] = n;
            }
            last[root] = std::max(last[root], n);
            if (writers[root].empty() || writers[root].back() != n) {
                writers[root].push_back(n);
            }
        }
        for (BufferId b : graph.nodes[n].inputs) {
            const BufferId root = graph.view_root(b);
            last[root] = std::max(last[root], n);
            users[root].push_back(n);
        }
    }
    for (int b = 0; b < buffers; ++b) {
        users[b].insert(users[b].end(), writers[b].begin(), writers[b].end());
    }
    keep_sent_buffers_to_next_kernel(graph, last);
    graph.arena_bytes.assign(graph.devices, 0);
    // Persistent buffers at the bottom of each arena; resident ones live in the resident
    // arenas, where the layout placed them.
    for (Buffer& buffer : graph.buffers) {
        if (buffer.persistent && !buffer.resident && !buffer.is_view()) {
            buffer.offset = graph.arena_bytes[buffer.device];
            graph.arena_bytes[buffer.device] += align_up(buffer.bytes());
        }
    }
    const std::vector<int64_t> base = graph.arena_bytes;
    std::vector<int> order;
    for (int b = 0; b < buffers; ++b) {
        if (!graph.buffers[b].persistent && !graph.buffers[b].is_view() && first[b] >= 0) {
            order.push_back(b);
        }
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return first[a] < first[b]; });
    // Per device: the transient buffers placed so far that a later buffer may still have to
    // wait for — every one, less those whose bytes a later buffer took all of (below).
    std::vector<std::vector<int>> placed(graph.devices);
    for (size_t i = 0; i < order.size(); ++i) {
        // Each placement scans the buffers placed before it on the device: polled per buffer.
        if (support::is_cancelled(cancellation)) {
            return support::cancelled_error(
                absl::StrCat("the memory plan (", i, " of ", order.size(), " buffers placed)"));
        }
        const int b = order[i];
        Buffer& buffer = graph.buffers[b];
        const int64_t size = align_up(buffer.bytes());
        std::vector<std::pair<int64_t, int64_t>> live; // [offset, end) of buffers still live
        for (int other : placed[buffer.device]) {
            if (last[other] >= first[b]) {
                const Buffer& o = graph.buffers[other];
                live.emplace_back(o.offset, o.offset + align_up(o.bytes()));
            }
        }
        std::sort(live.begin(), live.end());
        int64_t offset = base[buffer.device];
        for (const auto& [begin, end] : live) {
            if (offset + size <= begin) {
                break;
            }
            offset = std::max(offset, end);
        }
        buffer.offset = offset;
        graph.arena_bytes[buffer.device] =
            std::max(graph.arena_bytes[buffer.device], offset + size);
        // Reused bytes: every writer waits for every earlier user of overlapping memory.
        std::set<int> reused;
        for (int other : placed[buffer.device]) {
            const Buffer& o = graph.buffers[other];
            if (last[other] < first[b] && o.offset < offset + size &&
                offset < o.offset + align_up(o.bytes())) {
                reused.insert(users[other].begin(), users[other].end());
            }
        }
        for (int w : writers[b]) {
            std::set<int> deps(graph.nodes[w].deps.begin(), graph.nodes[w].deps.end());
            for (int user : reused) {
                if (user < w) {
                    deps.insert(user);
                }
            }
            graph.nodes[w].deps.assign(deps.begin(), deps.end());
        }
        // A dead buffer whose bytes all lie inside this one's need not be waited for again: a
        // later buffer overlapping it overlaps this one, which is then dead too (first fit
        // never overlaps a live buffer), so its writer waits for this buffer's users, whose
        // writer waits for the dead buffer's users. Without this every reuse of the same bytes
        // waited directly for all earlier ones: deps, and the time to plan them, grew
        // quadratically with the graph (64 million deps for a 4,000-operator chain).
        std::vector<int>& on_device = placed[buffer.device];
        on_device.erase(std::remove_if(on_device.begin(), on_device.end(),
                                       [&](int other) {
                                           const Buffer& o = graph.buffers[other];
                                           return last[other] < first[b] && offset <= o.offset &&
                                                  o.offset + align_up(o.bytes()) <= offset + size;
                                       }),
                        on_device.end());
        on_device.push_back(b);
    }
    graph.place_views();
    return absl::OkStatus();
}

} // namespace einsummable::physical
