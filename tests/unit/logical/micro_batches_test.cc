// compiler/logical/micro_batches.h: each operator's token rows cut into micro-batches, every
// finer function spec nested in the chosen one whose device runs it.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir/ops/attention.h"
#include "compiler/logical/micro_batches.h"
#include "compiler/logical/optimizer.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"

namespace einsummable::logical {
namespace {

struct Planned {
    ir::Graph graph;
    LogicalPlan plan;
};

Planned plan_for(const std::string& workload, int devices, Planner planner) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    EXPECT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<LogicalPlan> plan = optimize(*graph, {devices, planner, 0});
    EXPECT_TRUE(plan.ok()) << plan.status();
    return {*std::move(graph), *std::move(plan)};
}

bool is_attention(const ir::Graph& graph, ir::NodeId node) {
    return graph.node(node).op->kind() == ir::Attention::kKind;
}

// Every function spec nests in its group's chosen function spec (every box inside), each group
// holds micro-batches 0..m-1 once each, and where the chosen spec writes each output box once
// the group's boxes tile the chosen one's (their volumes add up to it).
void expect_nested_groups(const ir::Graph& graph, const OperatorPlan& op) {
    const std::string name = graph.node(op.node).name;
    absl::StatusOr<ir::JoinAggSpec> chosen = graph.node(op.node).op->spec(op.choice.request);
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    ASSERT_EQ(op.groups.size(), op.spec.functions.size()) << name;
    ASSERT_EQ(op.micro_batch.size(), op.spec.functions.size()) << name;
    EXPECT_EQ(group_count(op), static_cast<int>(chosen->functions.size())) << name;
    std::map<int, std::set<int>> batches;
    std::map<int, int64_t> volume;
    for (size_t k = 0; k < op.spec.functions.size(); ++k) {
        const ir::FunctionSpec& function = op.spec.functions[k];
        const ir::FunctionSpec& parent = chosen->functions.at(op.groups[k]);
        for (size_t i = 0; i < function.inputs.size(); ++i) {
            EXPECT_TRUE(parent.inputs[i].contains(function.inputs[i])) << name << " #" << k;
        }
        for (size_t o = 0; o < function.outputs.size(); ++o) {
            EXPECT_TRUE(parent.outputs[o].contains(function.outputs[o])) << name << " #" << k;
        }
        EXPECT_TRUE(batches[op.groups[k]].insert(op.micro_batch[k]).second) << name << " #" << k;
        volume[op.groups[k]] += function.outputs[0].volume();
    }
    for (const auto& [group, seen] : batches) {
        EXPECT_EQ(*seen.rbegin(), static_cast<int>(seen.size()) - 1) << name << " group " << group;
    }
    if (chosen->output_tiling(0).size() == chosen->functions.size()) {
        for (const auto& [group, total] : volume) {
            EXPECT_EQ(total, chosen->functions[group].outputs[0].volume()) << name;
        }
    }
}

TEST(MicroBatches, CutEveryOperatorsTokenRowsInsideTheChosenBlocks) {
    // Two packed sequences per device: every operator is cut, attention at the sequence end,
    // its keys with its queries.
    Planned p =
        plan_for("llama-block:seqs=4x8,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32",
                 2, Planner::data_parallel);
    ASSERT_TRUE(micro_batch_plan(p.graph, equal_micro_batches(2), p.plan).ok());
    EXPECT_EQ(p.plan.micro_batches, std::vector<int>({1, 1}));
    int cut = 0;
    for (const OperatorPlan& op : p.plan.operators) {
        if (op.groups.empty()) {
            continue;
        }
        ++cut;
        expect_nested_groups(p.graph, op);
        EXPECT_EQ(op.spec.functions.size(), 2 * op.choice.functions) << p.graph.node(op.node).name;
        if (is_attention(p.graph, op.node)) {
            for (const ir::FunctionSpec& function : op.spec.functions) {
                // Queries and keys of the same whole sequence: no finer block reads another's.
                EXPECT_EQ(function.inputs[0][0], function.inputs[1][0]);
                EXPECT_EQ(function.inputs[0][0].size(), 8);
            }
        }
    }
    EXPECT_EQ(cut, static_cast<int>(p.plan.operators.size()));
}

// The NodeId of the graph's attention.
ir::NodeId attention_node(const Planned& p) {
    for (const OperatorPlan& op : p.plan.operators) {
        if (is_attention(p.graph, op.node)) {
            return op.node;
        }
    }
    ADD_FAILURE() << "no attention";
    return 0;
}

TEST(MicroBatches, APartThatWaitsForLaterPartsIsLeftWholeAndSoIsWhatOnlyFeedsIt) {
    // One sequence per device: attention's first finer query block would read the keys of the
    // second (causal keys of the same sequence), so attention stays whole, and so do the
    // operators before it, which feed only it; everything after it is cut into four.
    Planned p =
        plan_for("llama-block:seqs=2x8,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32",
                 2, Planner::data_parallel);
    const LogicalPlan before = p.plan;
    ASSERT_TRUE(micro_batch_plan(p.graph, equal_micro_batches(4), p.plan).ok());
    const ir::NodeId attention = attention_node(p);
    for (const OperatorPlan& op : p.plan.operators) {
        const std::string name = p.graph.node(op.node).name;
        if (op.node <= attention) {
            EXPECT_TRUE(op.groups.empty()) << name;
            EXPECT_EQ(op.spec.functions, before.operators[op.node].spec.functions) << name;
        } else {
            ASSERT_FALSE(op.groups.empty()) << name;
            expect_nested_groups(p.graph, op);
            EXPECT_EQ(op.spec.functions.size(), 4 * op.choice.functions) << name;
        }
    }
    // Ulysses: attention split by heads reads every device's token-parallel q, k and v, so its
    // first part would wait for their second parts; the operators after it are cut.
    Planned ulysses =
        plan_for("llama-block:tokens=32,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32",
                 2, Planner::ulysses);
    ASSERT_TRUE(micro_batch_plan(ulysses.graph, equal_micro_batches(2), ulysses.plan).ok());
    const ir::NodeId heads = attention_node(ulysses);
    for (const OperatorPlan& op : ulysses.plan.operators) {
        EXPECT_EQ(op.groups.empty(), op.node <= heads) << ulysses.graph.node(op.node).name;
    }
}

TEST(MicroBatches, LeaveWholeWhatHasNoTokenRows) {
    // A matrix chain has no token rows.
    Planned chain = plan_for("chain:A,scale=1024,dtype=f32", 4, Planner::dp);
    ASSERT_TRUE(micro_batch_plan(chain.graph, equal_micro_batches(2), chain.plan).ok());
    for (const OperatorPlan& op : chain.plan.operators) {
        EXPECT_TRUE(op.groups.empty()) << chain.graph.node(op.node).name;
    }
}

TEST(MicroBatches, OneRestoresTheChosenSpecsAndZeroIsRefused) {
    Planned p = plan_for("ffn:tokens=32,d_model=16,d_ff=24", 4, Planner::dp);
    const LogicalPlan before = p.plan;
    ASSERT_TRUE(micro_batch_plan(p.graph, equal_micro_batches(3), p.plan).ok());
    bool changed = false;
    for (size_t id = 0; id < p.plan.operators.size(); ++id) {
        changed = changed || p.plan.operators[id].spec.functions.size() !=
                                 before.operators[id].spec.functions.size();
    }
    EXPECT_TRUE(changed);
    ASSERT_TRUE(micro_batch_plan(p.graph, equal_micro_batches(1), p.plan).ok());
    EXPECT_TRUE(p.plan.micro_batches.empty());
    for (size_t id = 0; id < p.plan.operators.size(); ++id) {
        EXPECT_EQ(p.plan.operators[id].spec.functions, before.operators[id].spec.functions);
        EXPECT_TRUE(p.plan.operators[id].groups.empty());
    }
    const absl::Status zero = micro_batch_plan(p.graph, {3, 0}, p.plan);
    EXPECT_TRUE(absl::IsInvalidArgument(zero)) << zero;
    EXPECT_NE(zero.message().find("micro-batch 1's weight 0 is not between 1 and"),
              std::string::npos)
        << zero;
    const absl::Status many = micro_batch_plan(p.graph, equal_micro_batches(65), p.plan);
    EXPECT_TRUE(absl::IsInvalidArgument(many)) << many;
    EXPECT_NE(many.message().find("at most 64 micro-batches"), std::string::npos) << many;
}

// The token interval of each function spec of `op`'s group `group`, in micro-batch order.
std::vector<ir::Interval> group_rows(const OperatorPlan& op, int group) {
    std::map<int, ir::Interval> rows;
    for (size_t k = 0; k < op.spec.functions.size(); ++k) {
        if (op.groups[k] == group) {
            rows[op.micro_batch[k]] = op.spec.functions[k].outputs[0][0];
        }
    }
    std::vector<ir::Interval> out;
    for (const auto& [batch, interval] : rows) {
        out.push_back(interval);
    }
    return out;
}

TEST(MicroBatches, WeightsSizeTheParts) {
    // 16 rows per device cut 3:1, anywhere: 12 then 4.
    Planned ffn = plan_for("ffn:tokens=32,d_model=16,d_ff=24", 2, Planner::data_parallel);
    ASSERT_TRUE(micro_batch_plan(ffn.graph, {3, 1}, ffn.plan).ok());
    EXPECT_EQ(group_rows(ffn.plan.operators[0], 1),
              std::vector<ir::Interval>({{16, 28}, {28, 32}}));
    // Four packed sequences of 4 per device. 3:1 cuts at 12, a sequence end: each part's
    // queries read keys of their own sequences only, and every operator is cut. 7:1 cuts at 14,
    // inside the last sequence: attention's first part would wait for keys of the second, so
    // attention and what feeds it stay whole and the operators after it are cut at 14.
    Planned llama =
        plan_for("llama-block:seqs=8x4,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32",
                 2, Planner::data_parallel);
    const ir::NodeId attention = attention_node(llama);
    for (const std::vector<int>& weights : {std::vector<int>{3, 1}, std::vector<int>{7, 1}}) {
        ASSERT_TRUE(micro_batch_plan(llama.graph, weights, llama.plan).ok());
        const int64_t cut = weights[0] == 3 ? 12 : 14;
        for (const OperatorPlan& op : llama.plan.operators) {
            const std::string name = llama.graph.node(op.node).name;
            if (cut == 14 && op.node <= attention) {
                EXPECT_TRUE(op.groups.empty()) << name;
                continue;
            }
            EXPECT_EQ(group_rows(op, 0), std::vector<ir::Interval>({{0, cut}, {cut, 16}})) << name;
            if (op.node == attention) {
                for (const ir::FunctionSpec& function : op.spec.functions) {
                    EXPECT_EQ(function.inputs[1][0], function.inputs[0][0]); // keys = queries
                }
            }
        }
    }
}

} // namespace
} // namespace einsummable::logical
