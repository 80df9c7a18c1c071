#include "compiler/ir/cache_steps.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/argmax.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/ops/rope.h"
#include "compiler/ir/ops/top_k.h"
#include "compiler/ir/ops/write_rows.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

namespace {

// The names of the caches of attention node `attention`.
std::string k_cache_name(const std::string& attention) {
    return absl::StrCat(attention, ".k_cache");
}
std::string v_cache_name(const std::string& attention) {
    return absl::StrCat(attention, ".v_cache");
}

// `attributes` without `name`.
Attributes without(const Attributes& attributes, const std::string& name) {
    Attributes kept;
    for (const auto& [key, value] : attributes.values()) {
        if (key != name) {
            kept.set(key, value);
        }
    }
    return kept;
}

// Builds the step graph node by node, copying the forward graph's tensors by name.
class StepBuilder {
public:
    StepBuilder(const Graph& forward, CacheStep step, const CacheShape& caches)
        : forward_(forward), step_(step), caches_(caches) {}

    absl::StatusOr<Graph> run() {
        if (caches_.slots < 1 || caches_.capacity < 1 || caches_.page_size < 0 ||
            caches_.pages < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("the caches' slots (", caches_.slots, ") and capacity (",
                             caches_.capacity, ") must be at least 1, their page size (",
                             caches_.page_size, ") and pages (", caches_.pages, ") at least 0"));
        }
        if (caches_.capacity % caches_.resolved_page_size() != 0 || caches_.resolved_pages() < 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "a sequence's capacity (", caches_.capacity, ") must be whole pages of ",
                caches_.resolved_page_size(), " keys, and the pool at least one page"));
        }
        EINSUMMABLE_RETURN_IF_ERROR(check_forward());
        for (TensorId id : forward_.inputs()) {
            const GraphTensor& tensor = forward_.tensor(id);
            EINSUMMABLE_ASSIGN_OR_RETURN(
                TensorId copy,
                step_graph_.add_input(tensor.name, tensor.type.dtype, tensor.type.dims));
            if (tensor.weight) {
                EINSUMMABLE_RETURN_IF_ERROR(step_graph_.mark_weight(copy));
            }
            ids_[id] = copy;
        }
        EINSUMMABLE_RETURN_IF_ERROR(add_step_inputs());
        for (const GraphNode& node : forward_.nodes()) {
            EINSUMMABLE_RETURN_IF_ERROR(add_node(node));
        }
        for (TensorId id : forward_.saved()) {
            EINSUMMABLE_RETURN_IF_ERROR(step_graph_.save(ids_.at(id)));
        }
        return std::move(step_graph_);
    }

private:
    // Every attention is causal self-attention over the graph's one packing of sequences; no
    // RoPE reads positions yet.
    absl::Status check_forward() {
        for (const GraphNode& node : forward_.nodes()) {
            if (const auto* attention = dynamic_cast<const Attention*>(node.op.get())) {
                if (!attention->causal() || attention->has_key_ends() || node.inputs.size() != 3) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        "attention node '", node.name,
                        "' is not causal self-attention (causal, no key_ends, inputs q, k, v): "
                        "its keys cannot come from a cache"));
                }
                const int64_t tokens = forward_.tensor(node.inputs[0]).type.dims[0].size;
                if (tokens_ < 0) {
                    tokens_ = tokens;
                    sequence_ends_ = attention->sequence_ends();
                } else if (tokens != tokens_ || attention->sequence_ends() != sequence_ends_) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        "attention node '", node.name,
                        "' packs its sequences differently from the graph's first attention"));
                }
            }
            if (const auto* rope = dynamic_cast<const Rope*>(node.op.get());
                rope != nullptr && rope->has_positions()) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "rope node '", node.name, "' already reads positions; the step gives them"));
            }
        }
        if (tokens_ < 0) {
            return absl::InvalidArgumentError("the graph has no attention node: nothing to cache");
        }
        if (step_ == CacheStep::decode) {
            const auto sequences = static_cast<int64_t>(sequence_ends_.size());
            if (sequences > caches_.slots) {
                return absl::InvalidArgumentError(
                    absl::StrCat("a decode step's sequences are the first slots: the graph packs ",
                                 sequences, " sequences for ", caches_.slots, " slots"));
            }
            for (int64_t s = 0; s < sequences; ++s) {
                const int64_t length = sequence_ends_[s] - (s == 0 ? 0 : sequence_ends_[s - 1]);
                if (length > caches_.capacity) {
                    return absl::InvalidArgumentError(
                        absl::StrCat("sequence ", s, " has ", length,
                                     " tokens, more than a slot's capacity of ", caches_.capacity));
                }
            }
        }
        return absl::OkStatus();
    }

    absl::StatusOr<TensorId> add_new_input(const std::string& name, std::vector<Dim> dims) {
        if (forward_.find_tensor(name).has_value()) {
            return absl::InvalidArgumentError(absl::StrCat("the graph already has a tensor named '",
                                                           name, "', an input the step adds"));
        }
        return step_graph_.add_input(name, DType::i32, std::move(dims));
    }

    absl::Status add_step_inputs() {
        EINSUMMABLE_ASSIGN_OR_RETURN(slots_, add_new_input("slots", {{"tokens", tokens_}}));
        if (step_ == CacheStep::decode) {
            EINSUMMABLE_ASSIGN_OR_RETURN(positions_,
                                         add_new_input("positions", {{"tokens", tokens_}}));
            const auto sequences = static_cast<int64_t>(sequence_ends_.size());
            EINSUMMABLE_ASSIGN_OR_RETURN(key_lengths_,
                                         add_new_input("key_lengths", {{"sequences", sequences}}));
            EINSUMMABLE_ASSIGN_OR_RETURN(
                page_table_,
                add_new_input("page_table",
                              {{"sequences", sequences}, {"pages", caches_.pages_per_sequence()}}));
        }
        return absl::OkStatus();
    }

    // The cache of `source` (k or v of attention `attention`) written with its rows: the
    // write_rows output.
    absl::StatusOr<TensorId> write_cache(const std::string& attention, const std::string& cache,
                                         const std::string& write, TensorId source) {
        const TensorType& rows = forward_.tensor(source).type;
        std::vector<Dim> dims = rows.dims;
        dims[0] = Dim{"cache", caches_.resolved_pages() * caches_.resolved_page_size()};
        if (forward_.find_tensor(cache).has_value()) {
            return absl::InvalidArgumentError(absl::StrCat("the graph already has a tensor named '",
                                                           cache, "', a cache of '", attention,
                                                           "'"));
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(TensorId state,
                                     step_graph_.add_input(cache, rows.dtype, std::move(dims)));
        return step_graph_.add(write, "write_rows", {}, {state, ids_.at(source), slots_});
    }

    absl::Status add_node(const GraphNode& node) {
        std::vector<TensorId> inputs;
        for (TensorId input : node.inputs) {
            inputs.push_back(ids_.at(input));
        }
        Attributes attributes = node.op->attributes();
        if (dynamic_cast<const Attention*>(node.op.get()) != nullptr) {
            EINSUMMABLE_ASSIGN_OR_RETURN(
                TensorId k, write_cache(node.name, k_cache_name(node.name),
                                        absl::StrCat(node.name, ".k_write"), node.inputs[1]));
            EINSUMMABLE_ASSIGN_OR_RETURN(
                TensorId v, write_cache(node.name, v_cache_name(node.name),
                                        absl::StrCat(node.name, ".v_write"), node.inputs[2]));
            if (step_ == CacheStep::decode) {
                attributes.set("page_size", caches_.resolved_page_size());
                attributes.set("sequence_ends", sequence_ends_);
                inputs = {inputs[0], k, v, key_lengths_, page_table_};
            }
        } else if (step_ == CacheStep::decode &&
                   dynamic_cast<const Rope*>(node.op.get()) != nullptr) {
            attributes = without(attributes, "sequence_ends");
            inputs.push_back(positions_);
        }
        std::vector<std::string> output_names;
        for (TensorId output : node.outputs) {
            output_names.push_back(forward_.tensor(output).name);
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(
            std::vector<TensorId> outputs,
            step_graph_.add_node(node.name, node.op->kind(), attributes, inputs, output_names));
        for (size_t o = 0; o < outputs.size(); ++o) {
            ids_[node.outputs[o]] = outputs[o];
        }
        return absl::OkStatus();
    }

    const Graph& forward_;
    const CacheStep step_;
    const CacheShape caches_;
    Graph step_graph_;
    std::map<TensorId, TensorId> ids_; // the forward graph's tensors in the step graph
    int64_t tokens_ = -1;
    std::vector<int64_t> sequence_ends_;
    TensorId slots_ = -1;
    TensorId positions_ = -1;
    TensorId key_lengths_ = -1;
    TensorId page_table_ = -1;
};

} // namespace

absl::StatusOr<Graph> cache_step_graph(const Graph& graph, CacheStep step,
                                       const CacheShape& caches) {
    return StepBuilder(graph, step, caches).run();
}

namespace {

// The id of `logits` when it is a saved floating-point [rows, vocab] tensor of `graph`; else
// InvalidArgument naming it, prefixed by `what`.
absl::StatusOr<TensorId> saved_logits(const Graph& graph, const std::string& logits,
                                      absl::string_view what) {
    const std::optional<TensorId> id = graph.find_tensor(logits);
    if (!id || !graph.tensor(*id).saved) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": '", logits, "' is no saved output of the graph"));
    }
    const TensorType& type = graph.tensor(*id).type;
    if (type.rank() != 2 || is_integer(type.dtype)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": '", logits, "' is ", type.to_string(),
                         "; logits are floating-point [rows, vocab]"));
    }
    return *id;
}

} // namespace

absl::StatusOr<GreedyChoice> add_greedy_choice(Graph& graph, const std::string& logits) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const TensorId id, saved_logits(graph, logits, "greedy choice"));
    GreedyChoice choice{absl::StrCat(logits, ".greedy_ids"),
                        absl::StrCat(logits, ".greedy_logits")};
    EINSUMMABLE_ASSIGN_OR_RETURN(TensorId ids, graph.add(choice.ids, ArgMax::kKind, {}, {id}));
    EINSUMMABLE_ASSIGN_OR_RETURN(
        TensorId largest,
        graph.add(choice.logits, Einsum::kKind,
                  {{"equation", std::string("rv->r")}, {"agg", std::string("max")}}, {id}));
    EINSUMMABLE_RETURN_IF_ERROR(graph.save(ids));
    EINSUMMABLE_RETURN_IF_ERROR(graph.save(largest));
    return choice;
}

absl::StatusOr<std::string> add_top_k_choice(Graph& graph, const std::string& logits, int64_t k) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const TensorId id, saved_logits(graph, logits, "top-k choice"));
    if (k < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("top-k choice: k is ", k, "; give 1 or more"));
    }
    const int64_t vocab = graph.tensor(id).type.dims[1].size;
    std::string name = absl::StrCat(logits, ".top_k");
    EINSUMMABLE_ASSIGN_OR_RETURN(
        TensorId pairs,
        graph.add(name, TopK::kKind, {{"k", std::min({k, vocab, TopK::kMaxK})}}, {id}));
    EINSUMMABLE_RETURN_IF_ERROR(graph.save(pairs));
    return name;
}

std::vector<std::string> cache_inputs(const Graph& graph) {
    std::vector<std::string> caches;
    for (TensorId id : graph.inputs()) {
        for (NodeId consumer : graph.tensor(id).consumers) {
            const GraphNode& node = graph.node(consumer);
            const int in_place = in_place_input(*node.op);
            if (in_place >= 0 && node.inputs[in_place] == id) {
                caches.push_back(graph.tensor(id).name);
                break;
            }
        }
    }
    return caches;
}

} // namespace einsummable::ir
