// Exchange-program synthesis against the lower bounds of docs/workloads.md and the targets that
// bench/README.md checks (with pipelining: every collective within 1.03x of the bound on dgx-a100
// and dgx-h100; on dgx-v100 all-gather within 1.10x of SCCL's 7/6 bound, reduce-scatter and
// all-reduce within 1.3x of the per-GPU bound; an 8-GPU operator input synthesised in under 1 s).
// Every program is costed on the fluid-flow simulator (docs/topologies.md), not on hardware. The
// benchmark's time is the synthesis wall time (default SynthesisOptions); the counters are
// simulated times:
//   vs_bound      optimized simulated time / the lower bound, collective_lower_bound on the
//                 topology: the per-GPU formula with the most one GPU can move (on dgx-v100
//                 its six links plus the PCIe bridge) or, if larger, the busiest cut's traffic
//                 over its capacity (on dgx-v100 this binds all-to-all).
//   vs_sccl       dgx-v100 all-gather only: optimized / (7/6 . n / 25 GB/s), SCCL's bound, where
//                 n = N/8 is each GPU's contribution (SCCL states it per GPU buffer: each GPU
//                 receives 7n over its six 25 GB/s links).
//   vs_naive      optimized / naive simulated time.
//   ordered_vs_bound  reduce-scatter and all-reduce on the switches only: the ordered
//                 progressive star in whole atoms (collectives.h, ordered_star_program: every
//                 GPU sends its parts one at a time) / the bound, for comparison.
//   optimized_ms, naive_ms, bound_ms, candidates.
// Run: build/bin/exprog_bench (pinned: taskset -c 0 build/bin/exprog_bench); medians of 3.

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "compiler/exprog/collectives.h"
#include "compiler/exprog/program_simulation.h"
#include "compiler/exprog/simulator.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/exprog/topology.h"

namespace einsummable::exprog {
namespace {

constexpr int kGpus = 8;
constexpr int kAtomsPerGpu = 8;
constexpr double kTotalBytes = 1e9;  // N = 1 GB
constexpr double kSingleLink = 25e9; // one DGX-1 NVLink2 link, per direction

void report(benchmark::State& state, const SynthesisResult& result, double bound) {
    state.counters["optimized_ms"] = result.simulated_s * 1e3;
    state.counters["naive_ms"] = result.naive_simulated_s * 1e3;
    state.counters["vs_naive"] = result.simulated_s / result.naive_simulated_s;
    state.counters["candidates"] = result.candidates;
    if (bound > 0.0) {
        state.counters["bound_ms"] = bound * 1e3;
        state.counters["vs_bound"] = result.simulated_s / bound;
    }
}

bool synthesize_into(benchmark::State& state, const Program& preamble, const Topology& topology,
                     SynthesisResult& out) {
    for (auto _ : state) {
        absl::StatusOr<SynthesisResult> result = synthesize(preamble, topology, {});
        if (!result.ok()) {
            state.SkipWithError(std::string(result.status().message()).c_str());
            return false;
        }
        out = *std::move(result);
        benchmark::DoNotOptimize(out.simulated_s);
    }
    return true;
}

void collective_bench(benchmark::State& state, Collective collective,
                      const std::string& topology_name) {
    absl::StatusOr<Topology> topology = builtin_topology(topology_name);
    if (!topology.ok()) {
        state.SkipWithError(std::string(topology.status().message()).c_str());
        return;
    }
    // Every GPU of the machine: 8 on a node, 16 and 32 on the clusters.
    const int gpus = topology->num_gpus();
    // Atoms per GPU: 8, or for the collectives whose chunk c goes to GPU c mod p a multiple of
    // the GPUs, so that every GPU gets its chunks (16 and 32 on the clusters).
    const int atoms = collective == Collective::all_gather
                          ? kAtomsPerGpu
                          : (kAtomsPerGpu + gpus - 1) / gpus * gpus;
    const Program preamble = collective_preamble(collective, gpus, kTotalBytes, atoms);
    SynthesisResult result;
    if (!synthesize_into(state, preamble, *topology, result)) {
        return;
    }
    const double bound = collective_lower_bound(collective, gpus, kTotalBytes, *topology);
    report(state, result, bound);
    const Program ordered = ordered_star_program(collective, gpus, kTotalBytes, 1);
    if (topology->kind() == TopologyKind::nvswitch && !ordered.actions.empty()) {
        absl::StatusOr<ProgramSimulation> run = simulate_program(ordered, {}, *topology);
        if (run.ok()) {
            state.counters["ordered_ms"] = run->result.makespan_s * 1e3;
            state.counters["ordered_vs_bound"] = run->result.makespan_s / bound;
        }
    }
    if (topology->kind() == TopologyKind::links && collective == Collective::all_gather) {
        const double per_gpu = kTotalBytes / 8.0;
        state.counters["vs_sccl"] = result.simulated_s / (7.0 / 6.0 * per_gpu / kSingleLink);
    }
}

// What the physical compiler would write for one input of a matmul C = A·B split 2x2x2 over 8
// GPUs, whose A was itself produced by a matmul split 2x2x2 (a 2x2 tiling of A with a 2-way
// split reduction): the atoms are the 8 partial blocks A<i><j>_<r> (128 MB each: a 16384² fp16
// A), one per GPU; each of the 8 function specs (i, j, k) is a size-1 partition that needs the
// sum A<i><j>_0 + A<i><j>_1. The synthesiser chooses the partitions' GPUs (placement) as well
// as the program.
Program matmul_input_preamble() {
    Program program;
    for (int g = 0; g < kGpus; ++g) {
        program.gpus.push_back(g);
    }
    constexpr double kBlockBytes = 8192.0 * 8192.0 * 2.0;
    int gpu = 0;
    for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 2; ++j) {
            for (int r = 0; r < 2; ++r) {
                program.ins.push_back(
                    InDecl{absl::StrCat("A", i, j, "_", r), gpu++, kBlockBytes, {}});
            }
        }
    }
    for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 2; ++j) {
            for (int k = 0; k < 2; ++k) {
                const std::string name = absl::StrCat("F", i, j, k);
                program.partitions.push_back(Partition{name, {}, 1, {}});
                program.outs.push_back(
                    OutDecl{{absl::StrCat("A", i, j, "_0"), absl::StrCat("A", i, j, "_1")},
                            {Site::of_partition(name)},
                            {}});
            }
        }
    }
    return program;
}

void operator_input_bench(benchmark::State& state, const std::string& topology_name, bool matmul) {
    absl::StatusOr<Topology> topology = builtin_topology(topology_name);
    if (!topology.ok()) {
        state.SkipWithError(std::string(topology.status().message()).c_str());
        return;
    }
    const Program preamble =
        matmul ? matmul_input_preamble()
               : collective_preamble(Collective::all_reduce, kGpus, kTotalBytes, 1);
    SynthesisResult result;
    if (!synthesize_into(state, preamble, *topology, result)) {
        return;
    }
    report(state, result, 0.0);
}

void register_all() {
    const std::vector<std::string> topologies = {"dgx-a100", "dgx-h100", "dgx-v100"};
    // Clusters of DGX H100 nodes (docs/topologies.md "Clusters"): the collectives only.
    const std::vector<std::string> clusters = {"dgx-h100-2nodes", "dgx-h100-4nodes"};
    for (Collective collective : {Collective::all_gather, Collective::reduce_scatter,
                                  Collective::all_reduce, Collective::all_to_all}) {
        std::vector<std::string> machines = topologies;
        machines.insert(machines.end(), clusters.begin(), clusters.end());
        for (const std::string& topology : machines) {
            benchmark::RegisterBenchmark(
                absl::StrCat("synthesize/", collective_name(collective), "/", topology).c_str(),
                [collective, topology](benchmark::State& state) {
                    collective_bench(state, collective, topology);
                })
                ->Unit(benchmark::kMillisecond)
                ->Iterations(1)
                ->Repetitions(3)
                ->ReportAggregatesOnly(true);
        }
    }
    for (const std::string& topology : topologies) {
        for (bool matmul : {true, false}) {
            benchmark::RegisterBenchmark(absl::StrCat("operator_input/",
                                                      matmul ? "matmul-2x2x2" : "all-reduce-8x1",
                                                      "/", topology)
                                             .c_str(),
                                         [topology, matmul](benchmark::State& state) {
                                             operator_input_bench(state, topology, matmul);
                                         })
                ->Unit(benchmark::kMillisecond)
                ->Iterations(1)
                ->Repetitions(3)
                ->ReportAggregatesOnly(true);
        }
    }
}

} // namespace
} // namespace einsummable::exprog

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
        return 1;
    }
    einsummable::exprog::register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
