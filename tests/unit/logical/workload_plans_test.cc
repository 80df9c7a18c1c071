// Plans of the reference workloads (docs/workloads.md): the strategies the paper reports, chains
// against random plans, and golden files of the printed plans (scripts/update-goldens refreshes
// them).

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/time_dp.h"
#include "compiler/workloads/workloads.h"
#include "gtest/gtest.h"
#include "tests/unit/golden.h"

namespace einsummable::logical {
namespace {

struct Planned {
    ir::Graph graph;
    LogicalPlan plan;
};

Planned plan_workload(const std::string& name, int64_t devices, Planner planner = Planner::dp,
                      uint64_t seed = 0) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    EXPECT_TRUE(graph.ok()) << name << ": " << graph.status();
    absl::StatusOr<LogicalPlan> plan = optimize(*graph, {devices, planner, seed});
    EXPECT_TRUE(plan.ok()) << name << ": " << plan.status();
    return {*std::move(graph), *std::move(plan)};
}

const OperatorPlan& plan_of(const Planned& planned, const std::string& node_name) {
    for (const OperatorPlan& op_plan : planned.plan.operators) {
        if (planned.graph.node(op_plan.node).name == node_name) {
            return op_plan;
        }
    }
    ADD_FAILURE() << "no node " << node_name;
    return planned.plan.operators.front();
}

// Query heads follow kv heads: every function spec's query-head interval is g times its
// kv-head interval.
void expect_query_heads_follow_kv_heads(const Planned& planned) {
    for (const OperatorPlan& op_plan : planned.plan.operators) {
        const ir::Operator& op = *planned.graph.node(op_plan.node).op;
        if (op.kind() != "attention") {
            continue;
        }
        const int64_t group = dynamic_cast<const ir::Attention&>(op).group_size();
        for (const ir::FunctionSpec& function : op_plan.spec.functions) {
            EXPECT_EQ(function.inputs[0][1].lower, group * function.inputs[1][1].lower);
            EXPECT_EQ(function.inputs[0][1].upper, group * function.inputs[1][1].upper);
        }
    }
}

TEST(WorkloadPlans, OneLongSequenceIsUlysses) {
    const Planned planned = plan_workload("llama-block:tokens=131072", 8);
    EXPECT_EQ(plan_of(planned, "attn").choice.counts, (std::vector<int64_t>{1, 8, 1}))
        << "attention by heads_kv, the whole sequence on every device";
    for (const OperatorPlan& op_plan : planned.plan.operators) {
        const ir::GraphNode& node = planned.graph.node(op_plan.node);
        if (node.op->kind() != "attention") {
            EXPECT_EQ(op_plan.strategy, "data parallel")
                << node.name << " split " << split_string(*node.op, op_plan.choice);
        }
    }
    EXPECT_EQ(planned.plan.strategy, "Ulysses (attention by kv heads, everything else by tokens)");
    expect_query_heads_follow_kv_heads(planned);
}

TEST(WorkloadPlans, ManyShortSequencesAreDataParallelAlongSequenceEnds) {
    const Planned planned = plan_workload("llama-block:seqs=128x1024", 8);
    const OperatorPlan& attention = plan_of(planned, "attn");
    EXPECT_EQ(attention.choice.counts, (std::vector<int64_t>{8, 1, 8}));
    for (const ir::Interval& interval : attention.choice.request[0]) {
        EXPECT_EQ(interval.lower % 1024, 0) << "cut at a sequence end";
    }
    EXPECT_EQ(attention.choice.request[2], attention.choice.request[0])
        << "keys cut with the queries: each device reads its own sequences' keys";
    EXPECT_EQ(attention.choice.functions, 8);
    EXPECT_EQ(planned.plan.strategy, "data parallel");
    EXPECT_DOUBLE_EQ(planned.plan.total.elements.repartition, 0.0);
    expect_query_heads_follow_kv_heads(planned);
}

TEST(WorkloadPlans, ChainsNeverCostMoreThanTheBestOfTwentyRandomPlans) {
    for (const char* name : {"chain:A", "chain:B", "chain:C", "chain:D", "chain:E"}) {
        const Planned dp = plan_workload(name, 8);
        double best_random = INFINITY;
        for (uint64_t seed = 1; seed <= 20; ++seed) {
            best_random =
                std::min(best_random,
                         plan_workload(name, 8, Planner::random, seed).plan.total.bytes.total());
        }
        EXPECT_LE(dp.plan.total.bytes.total(), best_random) << name;
        const Planned greedy = plan_workload(name, 8, Planner::greedy);
        EXPECT_LE(dp.plan.total.bytes.total(), greedy.plan.total.bytes.total()) << name;
    }
}

// Golden files: tests/golden/plans/<case>.txt. EINSUMMABLE_UPDATE_GOLDEN=1 rewrites them.
struct GoldenCase {
    const char* file;
    const char* workload;
    int64_t devices;
};

void PrintTo(const GoldenCase& golden, std::ostream* out) {
    *out << golden.workload << " on " << golden.devices << " devices";
}

class GoldenPlan : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenPlan, MatchesTheGoldenFile) {
    const GoldenCase& golden = GetParam();
    const Planned planned = plan_workload(golden.workload, golden.devices);
    const std::string text = explain_text(planned.graph, planned.plan);
    golden::expect_matches(
        text, std::string(EINSUMMABLE_SOURCE_DIR) + "/tests/golden/plans/" + golden.file + ".txt",
        absl::StrCat("plan of ", golden.workload, " on ", golden.devices, " devices"));
}

INSTANTIATE_TEST_SUITE_P(
    Workloads, GoldenPlan,
    ::testing::Values(
        GoldenCase{"ffn_p4", "ffn", 4}, GoldenCase{"matmul_4096_p8", "matmul:4096", 8},
        GoldenCase{"llama_tokens131072_p8", "llama-block:tokens=131072", 8},
        GoldenCase{"llama_seqs128x1024_p8", "llama-block:seqs=128x1024", 8},
        // Past the 8 kv heads, and with one.
        GoldenCase{"llama_tokens131072_p16", "llama-block:tokens=131072", 16},
        GoldenCase{"llama_tokens131072_p64", "llama-block:tokens=131072", 64},
        GoldenCase{"llama_tokens131072_kv1_p8", "llama-block:tokens=131072,heads_kv=1", 8},
        GoldenCase{"chain_A_p8", "chain:A", 8}, GoldenCase{"chain_B_p8", "chain:B", 8},
        GoldenCase{"chain_C_p8", "chain:C", 8}, GoldenCase{"chain_D_p8", "chain:D", 8},
        GoldenCase{"chain_E_p8", "chain:E", 8}),
    [](const ::testing::TestParamInfo<GoldenCase>& info) { return std::string(info.param.file); });

// The time programme's plans (the default objective) of the workloads of docs/workloads.md at
// 8 devices on dgx-a100 and dgx-v100: the explanation and the predicted time (its arithmetic is
// plain IEEE doubles, the same on every machine).
struct GoldenTimeCase {
    std::string file;
    std::string workload;
    std::string machine;
};

// Names the case in test listings (ctest prints the parameter) instead of its bytes.
void PrintTo(const GoldenTimeCase& golden, std::ostream* out) {
    *out << golden.workload << " on " << golden.machine;
}

class GoldenTimePlan : public ::testing::TestWithParam<GoldenTimeCase> {};

TEST_P(GoldenTimePlan, MatchesTheGoldenFile) {
    const GoldenTimeCase& golden = GetParam();
    absl::StatusOr<ir::Graph> graph = workloads::by_name(golden.workload);
    ASSERT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology(golden.machine);
    ASSERT_TRUE(topology.ok()) << topology.status();
    TimePlanReport report;
    absl::StatusOr<LogicalPlan> plan = optimize_by_time(*graph, {8}, *topology, &report);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const std::string text =
        absl::StrCat(explain_text(*graph, *plan),
                     "predicted: ", absl::StrFormat("%.6g", report.predicted_s * 1e3), " ms on ",
                     golden.machine, " (time programme), from ", report.origin, "\n");
    golden::expect_matches(
        text,
        absl::StrCat(EINSUMMABLE_SOURCE_DIR, "/tests/golden/time_plans/", golden.file, ".txt"),
        absl::StrCat("time plan of ", golden.workload, " on ", golden.machine));
}

std::vector<GoldenTimeCase> golden_time_cases() {
    const std::pair<const char*, const char*> workloads[] = {
        {"llama_tokens1024", "llama-block:tokens=1024"},
        {"llama_tokens8192", "llama-block:tokens=8192"},
        {"llama_tokens131072", "llama-block:tokens=131072"},
        {"llama_seqs8x1024", "llama-block:seqs=8x1024"},
        {"llama_seqs128x1024", "llama-block:seqs=128x1024"},
        {"chain_A", "chain:A"},
        {"chain_B", "chain:B"},
        {"chain_C", "chain:C"},
        {"chain_D", "chain:D"},
        {"chain_E", "chain:E"},
        {"ffn", "ffn"}};
    std::vector<GoldenTimeCase> cases;
    for (const auto& [file, workload] : workloads) {
        cases.push_back({absl::StrCat(file, "_a100_p8"), workload, "dgx-a100"});
        cases.push_back({absl::StrCat(file, "_v100_p8"), workload, "dgx-v100"});
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Workloads, GoldenTimePlan, ::testing::ValuesIn(golden_time_cases()),
                         [](const ::testing::TestParamInfo<GoldenTimeCase>& info) {
                             return info.param.file;
                         });

} // namespace
} // namespace einsummable::logical
