// Plans do not depend on dimension names: every dimension of a workload renamed to d0, d1, ...
// gives the same index roles, the same split for every operator under every planner (the
// hand-written baselines included) and the same strategy labels. The baselines and labels read
// the roles operators declare (compiler/ir/index_role.h), never names like "tokens" or "heads".

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/logical/optimizer.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"

namespace einsummable::logical {
namespace {

// Gives every distinct dimension name a new one, d0, d1, ..., in order of first use.
class Renamer {
public:
    const std::string& operator()(const std::string& name) {
        auto [it, added] = names_.emplace(name, "");
        if (added) {
            it->second = absl::StrCat("d", names_.size() - 1);
        }
        return it->second;
    }

private:
    std::map<std::string, std::string> names_;
};

// `graph` with every dimension renamed: the inputs' dimensions, and the attributes that name the
// dimensions an operator creates (split_heads' heads_name and head_dim_name, merge_heads'
// dim_name). The same weights are marked.
ir::Graph renamed(const ir::Graph& graph) {
    Renamer rename;
    ir::GraphDescription description;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        ir::TensorDescription input{tensor.name, tensor.type.dtype, tensor.type.dims};
        for (ir::Dim& dim : input.dims) {
            dim.name = rename(dim.name);
        }
        description.inputs.push_back(std::move(input));
    }
    for (const ir::GraphNode& node : graph.nodes()) {
        ir::NodeDescription out{node.name, std::string(node.op->kind()), {}, {}, {}};
        for (const auto& [name, value] : node.op->attributes().values()) {
            const auto* text = std::get_if<std::string>(&value);
            if (text != nullptr && absl::EndsWith(name, "name")) {
                out.attributes.set(name, rename(*text));
            } else {
                out.attributes.set(name, value);
            }
        }
        for (ir::TensorId input : node.inputs) {
            out.inputs.push_back(graph.tensor(input).name);
        }
        for (ir::TensorId output : node.outputs) {
            out.outputs.push_back(graph.tensor(output).name);
        }
        description.nodes.push_back(std::move(out));
    }
    for (ir::TensorId id : graph.saved()) {
        description.saved.push_back(graph.tensor(id).name);
    }
    absl::StatusOr<ir::Graph> built = ir::Graph::build(description);
    EXPECT_TRUE(built.ok()) << built.status();
    for (ir::TensorId id : graph.inputs()) {
        if (graph.tensor(id).weight) {
            EXPECT_TRUE(built->mark_weight(*built->find_tensor(graph.tensor(id).name)).ok());
        }
    }
    return *std::move(built);
}

// Every dimension of every tensor is named d<k>, so no name says token, sequence or head.
void expect_only_new_names(const ir::Graph& graph) {
    for (const ir::GraphTensor& tensor : graph.tensors()) {
        for (const ir::Dim& dim : tensor.type.dims) {
            EXPECT_TRUE(absl::StartsWith(dim.name, "d") &&
                        dim.name.find_first_not_of("0123456789", 1) == std::string::npos)
                << tensor.name << ": " << tensor.type.to_string();
        }
    }
}

TEST(RenamedDimensions, RolesPlansAndLabelsAreUnchanged) {
    const std::vector<std::string> workloads = {"ffn",
                                                "matmul:64",
                                                "llama-block:tokens=1024",
                                                "llama-block:seqs=8x1024",
                                                "llama-block:seqs=8x1024,heads_kv=2",
                                                "llama-stack:blocks=2,tokens=256",
                                                "chain:B",
                                                "chain:C"};
    for (const std::string& workload : workloads) {
        const ir::Graph graph = *workloads::by_name(workload);
        const ir::Graph other = renamed(graph);
        expect_only_new_names(other);
        ASSERT_EQ(other.nodes().size(), graph.nodes().size()) << workload;
        for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
            ASSERT_EQ(other.node(node).name, graph.node(node).name) << workload;
        }
        EXPECT_EQ(ir::graph_index_roles(other), ir::graph_index_roles(graph)) << workload;
        for (Planner planner : all_planners()) {
            for (int64_t devices : {2, 4, 8}) {
                const std::string at =
                    absl::StrCat(workload, " ", planner_name(planner), " p=", devices);
                absl::StatusOr<LogicalPlan> plan = optimize(graph, {devices, planner, 0});
                absl::StatusOr<LogicalPlan> again = optimize(other, {devices, planner, 0});
                ASSERT_TRUE(plan.ok() && again.ok()) << at;
                EXPECT_EQ(again->strategy, plan->strategy) << at;
                for (size_t idx = 0; idx < plan->operators.size(); ++idx) {
                    const OperatorPlan& op = plan->operators[idx];
                    const OperatorPlan& renamed_op = again->operators[idx];
                    const std::string& name = graph.node(op.node).name;
                    EXPECT_EQ(renamed_op.choice.request, op.choice.request) << at << " " << name;
                    EXPECT_EQ(renamed_op.strategy, op.strategy) << at << " " << name;
                }
                EXPECT_DOUBLE_EQ(again->total.bytes.total(), plan->total.bytes.total()) << at;
            }
        }
    }
}

// What the labels say on the renamed LLaMA block: the names were the only thing that told
// tokens and heads apart before index roles.
TEST(RenamedDimensions, UlyssesAndMegatronKeepTheirLabelsWithoutTheNames) {
    const ir::Graph graph = renamed(*workloads::by_name("llama-block:seqs=8x1024"));
    absl::StatusOr<LogicalPlan> ulysses = optimize(graph, {8, Planner::ulysses, 0});
    ASSERT_TRUE(ulysses.ok()) << ulysses.status();
    EXPECT_EQ(ulysses->strategy, "Ulysses (attention by kv heads, everything else by tokens)");
    absl::StatusOr<LogicalPlan> megatron = optimize(graph, {8, Planner::megatron, 0});
    ASSERT_TRUE(megatron.ok()) << megatron.status();
    EXPECT_EQ(megatron->strategy,
              "tensor + sequence parallel (Megatron column/row, tokens elsewhere)");
    absl::StatusOr<LogicalPlan> data = optimize(graph, {8, Planner::data_parallel, 0});
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->strategy, "data parallel");
}

} // namespace
} // namespace einsummable::logical
