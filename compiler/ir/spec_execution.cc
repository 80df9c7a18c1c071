#include "compiler/ir/spec_execution.h"

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

namespace {

absl::StatusOr<std::vector<HostTensor>> run_kernel(const BlockKernel& kernel, const Operator& op,
                                                   absl::Span<const HostTensor> inputs,
                                                   const FunctionSpec& function) {
    if (kernel) {
        return kernel(op, inputs, function);
    }
    return op.reference(inputs, function);
}

} // namespace

absl::StatusOr<std::vector<HostTensor>> execute_spec(const Operator& op, const JoinAggSpec& spec,
                                                     absl::Span<const HostTensor> inputs,
                                                     const BlockKernel& kernel) {
    if (static_cast<int>(inputs.size()) != op.num_inputs()) {
        return absl::InvalidArgumentError(absl::StrCat(op.kind(), ": got ", inputs.size(),
                                                       " inputs, expected ", op.num_inputs()));
    }
    for (int input_idx = 0; input_idx < op.num_inputs(); ++input_idx) {
        if (inputs[input_idx].box() != op.input_types()[input_idx].box()) {
            return absl::InvalidArgumentError(absl::StrCat(
                op.kind(), ": input ", input_idx, " covers ", inputs[input_idx].box().to_string(),
                ", expected the whole tensor ", op.input_types()[input_idx].to_string()));
        }
    }
    // Aggregated blocks per output, keyed by box. An operator with an output that carries
    // statistics (log_sum_exp, arg_max) runs every function through reference_partial (the
    // kernel hook computes complete blocks only) and carries the statistics until the
    // recomposition drops them.
    bool partial = false;
    for (AggOp agg : spec.aggregations) {
        partial = partial || carries_stats(agg);
    }
    std::vector<std::map<Box, PartialBlock>> aggregated(op.num_outputs());
    for (size_t function_idx = 0; function_idx < spec.functions.size(); ++function_idx) {
        const FunctionSpec& function = spec.functions[function_idx];
        std::vector<HostTensor> blocks; // join: project the inputs
        blocks.reserve(inputs.size());
        for (int input_idx = 0; input_idx < op.num_inputs(); ++input_idx) {
            if (!inputs[input_idx].box().contains(function.inputs[input_idx])) {
                return absl::InvalidArgumentError(absl::StrCat(
                    op.kind(), ": function ", function_idx, " reads ",
                    function.inputs[input_idx].to_string(), " outside input ", input_idx));
            }
            blocks.push_back(inputs[input_idx].slice(function.inputs[input_idx]));
        }
        std::vector<PartialBlock> outputs;
        if (partial) {
            EINSUMMABLE_ASSIGN_OR_RETURN(outputs, op.reference_partial(blocks, function));
        } else {
            EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<HostTensor> computed,
                                         run_kernel(kernel, op, blocks, function));
            for (HostTensor& block : computed) {
                outputs.push_back({std::move(block), {}});
            }
        }
        for (int output_idx = 0; output_idx < op.num_outputs(); ++output_idx) {
            PartialBlock& block = outputs[output_idx];
            auto [it, inserted] = aggregated[output_idx].try_emplace(block.values.box(), block);
            if (inserted) {
                continue;
            }
            const AggOp agg = spec.aggregations[output_idx];
            if (agg == AggOp::none) {
                return absl::InternalError(absl::StrCat(
                    op.kind(), ": output ", output_idx, " box ", block.values.box().to_string(),
                    " repeats but the spec has no aggregation for it"));
            }
            if (carries_stats(agg)) {
                EINSUMMABLE_ASSIGN_OR_RETURN(it->second, combine_partials(agg, it->second, block));
                continue;
            }
            if (agg == AggOp::top_k) {
                EINSUMMABLE_ASSIGN_OR_RETURN(it->second.values,
                                             merge_top_k(it->second.values, block.values));
                continue;
            }
            double* target = it->second.values.data();
            for (int64_t idx = 0; idx < block.values.size(); ++idx) {
                target[idx] = aggregate(agg, target[idx], block.values.data()[idx]);
            }
        }
    }
    std::vector<HostTensor> results; // recompose
    for (int output_idx = 0; output_idx < op.num_outputs(); ++output_idx) {
        const Box whole = op.output_types()[output_idx].box();
        std::vector<Box> boxes;
        for (const auto& [box, block] : aggregated[output_idx]) {
            boxes.push_back(box);
        }
        if (absl::Status status = check_tiles(boxes, whole); !status.ok()) {
            return absl::InternalError(absl::StrCat(op.kind(), ": output ", output_idx,
                                                    " boxes do not tile it: ", status.message()));
        }
        HostTensor result(whole);
        for (const auto& [box, block] : aggregated[output_idx]) {
            result.write(block.values);
        }
        results.push_back(std::move(result));
    }
    return results;
}

absl::StatusOr<std::vector<HostTensor>>
execute_whole(const Operator& op, absl::Span<const HostTensor> inputs, const BlockKernel& kernel) {
    return execute_spec(op, op.whole_spec(), inputs, kernel);
}

absl::StatusOr<std::map<std::string, HostTensor>>
evaluate_graph(const Graph& graph, const std::map<std::string, HostTensor>& inputs,
               const BlockKernel& kernel) {
    std::vector<std::optional<HostTensor>> values(graph.tensors().size());
    for (TensorId id : graph.inputs()) {
        const GraphTensor& tensor = graph.tensor(id);
        auto it = inputs.find(tensor.name);
        if (it == inputs.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat("no value for graph input '", tensor.name, "'"));
        }
        if (it->second.box() != tensor.type.box()) {
            return absl::InvalidArgumentError(
                absl::StrCat("graph input '", tensor.name, "' has shape ",
                             it->second.box().to_string(), ", expected ", tensor.type.to_string()));
        }
        values[id] = it->second;
    }
    for (const GraphNode& node : graph.nodes()) {
        std::vector<HostTensor> node_inputs;
        for (TensorId id : node.inputs) {
            node_inputs.push_back(*values[id]);
        }
        absl::StatusOr<std::vector<HostTensor>> outputs =
            execute_whole(*node.op, node_inputs, kernel);
        if (!outputs.ok()) {
            return absl::Status(outputs.status().code(), absl::StrCat("node '", node.name, "': ",
                                                                      outputs.status().message()));
        }
        for (size_t output_idx = 0; output_idx < node.outputs.size(); ++output_idx) {
            values[node.outputs[output_idx]] = std::move((*outputs)[output_idx]);
        }
    }
    std::map<std::string, HostTensor> saved;
    for (TensorId id : graph.saved()) {
        saved.emplace(graph.tensor(id).name, *values[id]);
    }
    return saved;
}

} // namespace einsummable::ir
