// Plans for decode steps (bench/README.md "decode"): one LLaMA block's decode step
// (workloads::llama_decode: one new token per sequence against its key/value cache) for
// LLaMA-2-7B shapes (32 kv heads), LLaMA-70B shapes (8 kv heads) and the 7B shapes with one kv
// head (multi-query attention, fewer kv heads than GPUs), at batch 1, 8 and 64 with
// 4K and 32K cached tokens per sequence, on 8 GPUs of dgx-a100 and dgx-h100. Per setup, the
// whole-plan simulated time (the compile pipeline, then simulate_plan; nothing here runs on a
// GPU) of
//   default         the daemon's default plan (the time programme, any attention split);
//   tensor-parallel megatron: attention by kv heads, the projections column/row parallel
//                   (what vLLM runs on 8 GPUs);
//   flash-decoding  the time programme with attention split along the keys only (each GPU
//                   reads a block of every sequence's cache for every head, combined by the
//                   log-sum-exp ⊕: flash-decoding across GPUs), the rest as it chooses;
// and the split the default gives attention. Writes a markdown table on stdout and, with
// --csv, every number.
//
// Run: build/bin/decode_bench [--csv FILE] [--quick] (bench/README.md).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/support/status_macros.h"
#include "compiler/workloads/workloads.h"

ABSL_FLAG(std::string, csv, "", "where to write every number as CSV (optional)");
ABSL_FLAG(bool, quick, false,
          "small shapes (d_model 256, 8 or 2 kv heads, 64 or 512 cached keys) on dgx-h100 only: "
          "the ctest check that the default is never slower than the hand strategies");

namespace einsummable {
namespace {

struct Model {
    std::string name;
    std::string shape; // the llama-decode keys after batch and cached
};

struct Variant {
    std::string name;
    logical::Planner planner;
    logical::AttentionSplits splits;
};

const Variant kVariants[] = {
    {"default", logical::Planner::dp, logical::AttentionSplits::any},
    {"tensor-parallel", logical::Planner::megatron, logical::AttentionSplits::any},
    {"flash-decoding", logical::Planner::dp, logical::AttentionSplits::key_blocks},
};

struct Timed {
    double predicted_s = 0.0;
    std::string attention_split; // "tokens/1 heads_kv/8 keys/1"
};

absl::StatusOr<Timed> plan_and_simulate(const ir::Graph& graph, const Variant& variant, int devices,
                                        const exprog::Topology& topology) {
    physical::SynthesisCache cache;
    pipeline::Options options;
    options.devices = devices;
    options.planner = variant.planner;
    options.cache = &cache;
    options.objective = logical::Objective::time;
    pipeline::Machine machine;
    machine.devices = devices;
    machine.topology = topology;
    machine.attention_splits = variant.splits;
    EINSUMMABLE_ASSIGN_OR_RETURN(pipeline::CompiledPlan compiled,
                                 pipeline::compile(graph, options, machine));
    EINSUMMABLE_ASSIGN_OR_RETURN(physical::PlanSimulation simulation,
                                 physical::simulate_plan(compiled.exec, topology));
    Timed timed{simulation.predicted_s, ""};
    for (const logical::OperatorPlan& op : compiled.logical.operators) {
        const ir::GraphNode& node = graph.node(op.node);
        if (node.op->kind() == ir::Attention::kKind) {
            timed.attention_split = logical::split_string(*node.op, op.choice);
        }
    }
    return timed;
}

int run() {
    const bool quick = absl::GetFlag(FLAGS_quick);
    const std::vector<Model> models =
        quick ? std::vector<Model>{{"small-mha", "d_model=256,heads_q=8,heads_kv=8,d_head=32,"
                                                 "d_ff=688,dtype=f16"},
                                   {"small-gqa", "d_model=256,heads_q=8,heads_kv=2,d_head=32,"
                                                 "d_ff=688,dtype=f16"}}
              : std::vector<Model>{{"llama-7b", "d_model=4096,heads_q=32,heads_kv=32,d_head=128,"
                                                "d_ff=11008,dtype=f16"},
                                   {"llama-70b", "d_model=8192,heads_q=64,heads_kv=8,d_head=128,"
                                                 "d_ff=28672,dtype=f16"},
                                   {"mqa-7b", "d_model=4096,heads_q=32,heads_kv=1,d_head=128,"
                                              "d_ff=11008,dtype=f16"}};
    const std::vector<int64_t> batches = {1, 8, 64};
    const std::vector<int64_t> caches =
        quick ? std::vector<int64_t>{64, 512} : std::vector<int64_t>{4096, 32768};
    const std::vector<std::string> machines =
        quick ? std::vector<std::string>{"dgx-h100"}
              : std::vector<std::string>{"dgx-a100", "dgx-h100"};
    constexpr int kDevices = 8;

    std::ofstream csv;
    if (!absl::GetFlag(FLAGS_csv).empty()) {
        csv.open(absl::GetFlag(FLAGS_csv));
        if (!csv) {
            std::fprintf(stderr, "decode_bench: cannot write %s\n",
                         absl::GetFlag(FLAGS_csv).c_str());
            return 1;
        }
        csv << "model,machine,devices,batch,cached,plan,predicted_s,attention_split\n";
    }
    std::printf("| model | machine | batch | cached | default ms | tensor-parallel ms | "
                "flash-decoding ms | default / best hand | default's attention split |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    int slower = 0;
    for (const Model& model : models) {
        for (const std::string& machine : machines) {
            absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology(machine);
            if (!topology.ok()) {
                std::fprintf(stderr, "%s\n", std::string(topology.status().message()).c_str());
                return 1;
            }
            for (int64_t batch : batches) {
                for (int64_t cached : caches) {
                    const std::string workload = absl::StrCat("llama-decode:batch=", batch,
                                                              ",cached=", cached, ",", model.shape);
                    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
                    if (!graph.ok()) {
                        std::fprintf(stderr, "%s: %s\n", workload.c_str(),
                                     std::string(graph.status().message()).c_str());
                        return 1;
                    }
                    std::vector<Timed> times;
                    for (const Variant& variant : kVariants) {
                        absl::StatusOr<Timed> timed =
                            plan_and_simulate(*graph, variant, kDevices, *topology);
                        if (!timed.ok()) {
                            std::fprintf(stderr, "%s, %s: %s\n", workload.c_str(),
                                         variant.name.c_str(),
                                         std::string(timed.status().message()).c_str());
                            return 1;
                        }
                        times.push_back(*timed);
                        if (csv) {
                            csv << absl::StrFormat("%s,%s,%d,%d,%d,%s,%.9g,%s\n", model.name,
                                                   machine, kDevices, batch, cached, variant.name,
                                                   timed->predicted_s, timed->attention_split);
                        }
                    }
                    const double best_hand = std::min(times[1].predicted_s, times[2].predicted_s);
                    const double ratio = times[0].predicted_s / best_hand;
                    // Ties within 1 % (the time programme prices a plan, the simulator runs it).
                    if (ratio > 1.01) {
                        ++slower;
                    }
                    std::printf("| %s | %s | %lld | %lld | %.3f | %.3f | %.3f | %.3f | %s |\n",
                                model.name.c_str(), machine.c_str(), static_cast<long long>(batch),
                                static_cast<long long>(cached), times[0].predicted_s * 1e3,
                                times[1].predicted_s * 1e3, times[2].predicted_s * 1e3, ratio,
                                times[0].attention_split.c_str());
                }
            }
        }
    }
    std::printf("\nsetups where the default is more than 1 %% slower than the best hand "
                "strategy: %d\n",
                slower);
    return slower == 0 ? 0 : 3;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    absl::SetProgramUsageMessage("decode_bench [--csv FILE] [--quick]: plans for decode steps");
    absl::ParseCommandLine(argc, argv);
    return einsummable::run();
}
