// The paper's feed-forward network, decomposed every way a device count allows.
//
//   x  f32[tokens, d_model]   w1 f32[d_model, d_ff]   w2 f32[d_ff, d_model]
//   h = einsum(ij,jk->ik)(x, w1);  a = einsum(ij->ij, join=relu)(h);  y = einsum(ij,jk->ik)(a, w2)
//
// For every operator and every assignment of interval counts to its indices whose product is
// the device count, the join-agg spec is executed block by block with the CPU kernels (BLAS for
// the contractions) and compared with the operator run on whole tensors. This is the property
// the whole system rests on (docs/design.md "Join-agg specs"): every decomposition computes the
// same tensor.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/interval_request.h"
#include "compiler/ir/spec_execution.h"
#include "kernels/cpu/block_kernel.h"

ABSL_FLAG(int64_t, tokens, 4096, "rows of x (tokens)");
ABSL_FLAG(int64_t, d_model, 1024, "model width");
ABSL_FLAG(int64_t, d_ff, 4096, "hidden width of the feed-forward layer");
ABSL_FLAG(int64_t, devices, 4, "device count: every spec splits its operator into this many parts");
ABSL_FLAG(uint64_t, seed, 20261130, "seed for the random inputs");
ABSL_FLAG(double, tolerance, 1e-9, "largest max relative error that passes");

namespace {

namespace ir = einsummable::ir;
namespace cpu = einsummable::kernels::cpu;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::StatusOr<ir::Graph> build_ffn(int64_t tokens, int64_t d_model, int64_t d_ff) {
    ir::Graph graph;
    absl::StatusOr<ir::TensorId> x =
        graph.add_input("x", ir::DType::f32, {{"tokens", tokens}, {"d_model", d_model}});
    if (!x.ok()) {
        return x.status();
    }
    absl::StatusOr<ir::TensorId> w1 =
        graph.add_input("w1", ir::DType::f32, {{"d_model", d_model}, {"d_ff", d_ff}});
    if (!w1.ok()) {
        return w1.status();
    }
    absl::StatusOr<ir::TensorId> w2 =
        graph.add_input("w2", ir::DType::f32, {{"d_ff", d_ff}, {"d_model", d_model}});
    if (!w2.ok()) {
        return w2.status();
    }
    const ir::Attributes matmul = {{"equation", std::string("ij,jk->ik")}};
    absl::StatusOr<ir::TensorId> h = graph.add("h", "einsum", matmul, {*x, *w1});
    if (!h.ok()) {
        return h.status();
    }
    absl::StatusOr<ir::TensorId> a = graph.add(
        "a", "einsum", {{"equation", std::string("ij->ij")}, {"join", std::string("relu")}}, {*h});
    if (!a.ok()) {
        return a.status();
    }
    absl::StatusOr<ir::TensorId> y = graph.add("y", "einsum", matmul, {*a, *w2});
    if (!y.ok()) {
        return y.status();
    }
    if (absl::Status status = graph.save(*y); !status.ok()) {
        return status;
    }
    if (absl::Status status = graph.validate(); !status.ok()) {
        return status;
    }
    return graph;
}

// One executed spec, as printed.
struct SpecReport {
    std::string split;
    size_t functions = 0;
    size_t output_boxes = 0;
    size_t aggregated_copies = 0; // function outputs ⊕-combined into a box already produced
    int64_t join_input_bytes = 0;
    double error = 0.0;
    double seconds = 0.0;
};

SpecReport describe_spec(const ir::Operator& op, const std::vector<ir::ShardableIndex>& indices,
                         const ir::IntervalRequest& request, const ir::JoinAggSpec& spec) {
    SpecReport report;
    report.split = ir::request_to_string(indices, request);
    report.functions = spec.functions.size();
    report.output_boxes = spec.output_tiling(0).size();
    report.aggregated_copies = report.functions - report.output_boxes;
    for (const ir::FunctionSpec& function : spec.functions) {
        for (int input_idx = 0; input_idx < op.num_inputs(); ++input_idx) {
            report.join_input_bytes += function.inputs[input_idx].volume() *
                                       ir::dtype_size(op.input_types()[input_idx].dtype);
        }
    }
    return report;
}

std::string format_bytes(int64_t bytes) {
    if (bytes >= (int64_t{1} << 30)) {
        return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30));
    }
    if (bytes >= (int64_t{1} << 20)) {
        return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    }
    if (bytes >= (int64_t{1} << 10)) {
        return absl::StrFormat("%.1f KiB", static_cast<double>(bytes) / (1 << 10));
    }
    return absl::StrCat(bytes, " B");
}

int run() {
    const int64_t tokens = absl::GetFlag(FLAGS_tokens);
    const int64_t d_model = absl::GetFlag(FLAGS_d_model);
    const int64_t d_ff = absl::GetFlag(FLAGS_d_ff);
    const int64_t devices = absl::GetFlag(FLAGS_devices);
    const double tolerance = absl::GetFlag(FLAGS_tolerance);
    const uint64_t seed = absl::GetFlag(FLAGS_seed);
    for (const auto& [name, value] :
         {std::pair{"--tokens", tokens}, std::pair{"--d_model", d_model}, std::pair{"--d_ff", d_ff},
          std::pair{"--devices", devices}}) {
        if (value < 1) {
            std::fprintf(stderr, "error: %s must be at least 1, got %lld\n", name,
                         static_cast<long long>(value));
            return 2;
        }
    }

    absl::StatusOr<ir::Graph> graph = build_ffn(tokens, d_model, d_ff);
    if (!graph.ok()) {
        std::fprintf(stderr, "error: building the FFN graph: %s\n",
                     std::string(graph.status().message()).c_str());
        return 2;
    }
    std::printf(
        "Einsummable FFN example: every join-agg spec of every operator for %lld devices.\n"
        "Each spec splits the operator's indices into interval counts whose product is the\n"
        "device count (\"i/2 k/2\"), runs one kernel call per function spec (BLAS for the\n"
        "contractions), sums repeated output boxes and stitches the result, which must\n"
        "equal the operator on whole tensors. Values are doubles; sizes are for f32.\n\n",
        static_cast<long long>(devices));
    std::printf("%s\n", graph->to_string().c_str());
    std::printf("seed %llu (rerun with --seed=%llu)\n\n", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(seed));

    const Clock::time_point start = Clock::now();
    std::mt19937_64 rng(seed);
    std::vector<std::optional<ir::HostTensor>> values(graph->tensors().size());
    for (ir::TensorId id : graph->inputs()) {
        values[id] = ir::HostTensor::random(graph->tensor(id).type.box(), rng);
    }

    std::printf("columns: node, split, function specs, distinct output boxes, copies aggregated\n"
                "(function outputs combined by the aggregation), bytes the join reads (input\n"
                "blocks of every function spec), max relative error against the whole-tensor\n"
                "result, seconds, verdict\n");
    int specs_run = 0;
    int failures = 0;
    double worst_error = 0.0;
    for (const ir::GraphNode& node : graph->nodes()) {
        const ir::Operator& op = *node.op;
        std::vector<ir::HostTensor> inputs;
        for (ir::TensorId id : node.inputs) {
            inputs.push_back(*values[id]);
        }
        Clock::time_point op_start = Clock::now();
        absl::StatusOr<std::vector<ir::HostTensor>> direct =
            ir::execute_whole(op, inputs, cpu::run_block);
        if (!direct.ok()) {
            std::fprintf(stderr, "error: node '%s' on whole tensors: %s\n", node.name.c_str(),
                         std::string(direct.status().message()).c_str());
            return 1;
        }
        std::printf("\n%s = %s  [%s on whole tensors: %.2f s]\n", node.name.c_str(),
                    op.describe().c_str(), cpu::uses_gemm(op) ? "BLAS" : "reference loop",
                    seconds_since(op_start));

        const std::vector<ir::ShardableIndex> indices = op.shardable_indices();
        for (const std::vector<int64_t>& counts :
             ir::interval_count_assignments(indices, devices)) {
            absl::StatusOr<ir::IntervalRequest> request = ir::make_request(indices, counts);
            absl::StatusOr<ir::JoinAggSpec> spec =
                request.ok() ? op.spec(*request)
                             : absl::StatusOr<ir::JoinAggSpec>(request.status());
            if (!spec.ok()) {
                std::fprintf(stderr, "error: node '%s': %s\n", node.name.c_str(),
                             std::string(spec.status().message()).c_str());
                return 1;
            }
            SpecReport report = describe_spec(op, indices, *request, *spec);
            Clock::time_point spec_start = Clock::now();
            absl::StatusOr<std::vector<ir::HostTensor>> result =
                ir::execute_spec(op, *spec, inputs, cpu::run_block);
            report.seconds = seconds_since(spec_start);
            if (!result.ok()) {
                std::fprintf(stderr, "error: node '%s' spec %s: %s\n", node.name.c_str(),
                             report.split.c_str(), std::string(result.status().message()).c_str());
                return 1;
            }
            report.error = ir::max_relative_error((*result)[0], (*direct)[0]);
            const bool ok = report.error <= tolerance;
            ++specs_run;
            failures += ok ? 0 : 1;
            worst_error = std::max(worst_error, report.error);
            std::printf("  %-2s %-18s functions=%-3zu out_boxes=%-3zu aggregated=%-3zu "
                        "join_reads=%-10s err=%.2e %6.2f s %s\n",
                        node.name.c_str(), report.split.c_str(), report.functions,
                        report.output_boxes, report.aggregated_copies,
                        format_bytes(report.join_input_bytes).c_str(), report.error, report.seconds,
                        ok ? "OK" : "FAIL");
        }
        for (size_t output_idx = 0; output_idx < node.outputs.size(); ++output_idx) {
            values[node.outputs[output_idx]] = std::move((*direct)[output_idx]);
        }
    }

    std::printf("\n%s: %d specs over %zu operators, %d failed, max relative error %.2e "
                "(tolerance %.0e), %.1f s\n",
                failures == 0 ? "PASS" : "FAIL", specs_run, graph->nodes().size(), failures,
                worst_error, tolerance, seconds_since(start));
    return failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    absl::SetProgramUsageMessage(
        "Executes every join-agg spec of the paper's FFN (x·w1, relu, ·w2) for --devices parts "
        "and checks each against the operator on whole tensors.\n"
        "Usage: einsummable-ffn-example [--tokens=4096] [--d_model=1024] [--d_ff=4096] "
        "[--devices=4] [--seed=N]");
    std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
    if (positional.size() > 1) {
        std::fprintf(stderr, "error: unexpected argument '%s'; flags look like --devices=4\n",
                     positional[1]);
        return 2;
    }
    return run();
}
