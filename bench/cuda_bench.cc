// cuda_bench: the CUDA backend against the same work without it, side by side in one run on one
// GPU, for scripts/gpu-check (docs/cuda.md, "The GPU check"). Prints one Markdown table:
//
//   gemm        bf16 matmul 4096³ and 8192³: a p = 1 plan's execute() against its one kernel
//               (the same cuBLASLt call, prepared the same way) enqueued directly on a stream
//               and waited for; TFLOP/s of each and the card's dense bf16 peak.
//   sdpa        GQA attention, 32 query / 8 kv heads, d = 128, causal, 8K tokens, bf16: the
//               same two sides (cuDNN's fused SDPA when it takes the block).
//   llama       the reference LLaMA block in bf16 at 1K and 8K tokens: latency at p = 1, and
//               p = 4 virtual devices on the one GPU over p = 1.
//   graph       the 1K block at p = 1: instantiate + upload time, and graph replay against the
//               same ops launched eagerly (CudaExecutable::run_eager).
//
// Sides alternate (A B A B ...) so that noise hits both alike; medians are reported. Usage:
// cuda_bench [--repeat N] (default 20). Exits 1 with a message when there is no GPU.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/support/statistics.h"
#include "compiler/workloads/by_name.h"
#include "compiler/workloads/graph_builder.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_libraries.h"
#include "kernels/cuda/kernel.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/plan.h"

namespace einsummable {
namespace {

using support::median;

constexpr uint64_t kSeed = 20261202;

[[noreturn]] void die(const std::string& what, const absl::Status& status) {
    std::fprintf(stderr, "cuda_bench: %s: %s\n", what.c_str(),
                 std::string(status.message()).c_str());
    std::exit(1);
}

void check(const absl::Status& status, const std::string& what) {
    if (!status.ok()) {
        die(what, status);
    }
}

void check_cuda(cudaError_t error, const std::string& what) {
    if (error != cudaSuccess) {
        die(what, absl::InternalError(cudaGetErrorString(error)));
    }
}

double seconds_of(const std::function<void()>& work) {
    const auto start = std::chrono::steady_clock::now();
    work();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Medians of A and B, alternating, after one warm-up of each.
std::pair<double, double> side_by_side(int repeat, const std::function<void()>& a,
                                       const std::function<void()>& b) {
    a();
    b();
    std::vector<double> times_a;
    std::vector<double> times_b;
    for (int run = 0; run < repeat; ++run) {
        times_a.push_back(seconds_of(a));
        times_b.push_back(seconds_of(b));
    }
    return {median(times_a), median(times_b)};
}

// Dense bf16 tensor-core peak in TFLOP/s by card name (datasheets, docs/workloads.md); 0 unknown.
double peak_bf16_tflops(const std::string& name) {
    if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos) {
        return name.find("PCIe") != std::string::npos ? 756.0 : 989.0;
    }
    if (name.find("A100") != std::string::npos) {
        return 312.0;
    }
    if (name.find("L40S") != std::string::npos) {
        return 362.0;
    }
    return 0.0;
}

std::unique_ptr<runtime::Plan> compile(ir::Graph graph, int devices) {
    runtime::CompileOptions options;
    options.devices = devices;
    options.seed = kSeed;
    options.synthesis_iterations = 100;
    absl::StatusOr<std::unique_ptr<runtime::Backend>> backend =
        runtime::cuda::make_cuda_backend({std::vector<int>(static_cast<size_t>(devices), 0)});
    if (!backend.ok()) {
        die("make_cuda_backend", backend.status());
    }
    absl::StatusOr<std::unique_ptr<runtime::Plan>> plan = runtime::Plan::compile(
        std::move(graph), options, std::shared_ptr<runtime::Backend>(*std::move(backend)));
    if (!plan.ok()) {
        die("compile", plan.status());
    }
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<float> uniform(-0.1f, 0.1f);
    for (ir::TensorId id : (*plan)->graph().inputs()) {
        const ir::GraphTensor& tensor = (*plan)->graph().tensor(id);
        std::vector<float> values(static_cast<size_t>(tensor.type.elements()));
        for (float& v : values) {
            v = uniform(rng);
        }
        check((*plan)->load(tensor.name, values), "load " + tensor.name);
    }
    return *std::move(plan);
}

ir::Graph workload(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    if (!graph.ok()) {
        die(name, graph.status());
    }
    return *std::move(graph);
}

// GQA causal attention alone: q [tokens, heads_q, d], k and v [tokens, heads_kv, d].
ir::Graph attention(int64_t tokens, int64_t heads_q, int64_t heads_kv, int64_t d) {
    workloads::GraphBuilder b("sdpa");
    const ir::Dim s{"sequence", tokens}, hq{"heads_q", heads_q}, hkv{"heads_kv", heads_kv},
        dh{"d_head", d};
    const ir::TensorId q = b.input("q", ir::DType::bf16, {s, hq, dh});
    const ir::TensorId k = b.input("k", ir::DType::bf16, {s, hkv, dh});
    const ir::TensorId v = b.input("v", ir::DType::bf16, {s, hkv, dh});
    b.save(b.op("attn", "attention",
                {{"causal", true}, {"sequence_ends", std::vector<int64_t>{tokens}}}, {q, k, v}));
    absl::StatusOr<ir::Graph> graph = std::move(b).finish();
    if (!graph.ok()) {
        die("sdpa graph", graph.status());
    }
    return *std::move(graph);
}

// The plan's one kernel node (a p = 1 plan of one operator), prepared on its own with fresh
// device buffers, so that it can be launched outside any plan.
class DirectKernel {
public:
    explicit DirectKernel(const physical::ExecGraph& graph) : libraries_(0) {
        const physical::ExecNode* node = nullptr;
        for (const physical::ExecNode& candidate : graph.nodes) {
            if (candidate.kind == physical::NodeKind::kernel) {
                node = &candidate;
                break;
            }
        }
        if (node == nullptr) {
            die("direct kernel", absl::NotFoundError("the plan has no kernel node"));
        }
        kernels::cuda::KernelRequest request;
        request.op = node->op;
        request.function = &node->spec;
        request.libraries = &libraries_;
        for (physical::BufferId id : node->inputs) {
            request.input_dtypes.push_back(graph.buffers[id].dtype);
            inputs_.push_back(allocate(graph.buffers[id].bytes()));
        }
        for (physical::BufferId id : node->outputs) {
            request.output_dtypes.push_back(graph.buffers[id].dtype);
            outputs_.push_back(allocate(graph.buffers[id].bytes()));
        }
        absl::StatusOr<std::unique_ptr<kernels::cuda::PreparedKernel>> kernel =
            kernels::cuda::prepare_kernel(request);
        if (!kernel.ok()) {
            die("prepare_kernel", kernel.status());
        }
        kernel_ = *std::move(kernel);
        scratch_ = kernel_->scratch_bytes() > 0 ? allocate(kernel_->scratch_bytes()) : nullptr;
        check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    }
    ~DirectKernel() {
        cudaStreamDestroy(stream_);
        for (void* p : allocations_) {
            cudaFree(p);
        }
    }

    void run() {
        kernels::cuda::KernelLaunch launch;
        launch.stream = stream_;
        launch.inputs = inputs_;
        launch.outputs = outputs_;
        launch.scratch = scratch_;
        check(kernel_->enqueue(launch), "enqueue");
        check_cuda(cudaStreamSynchronize(stream_), "direct kernel");
    }
    std::string describe() const { return kernel_->describe(); }

private:
    void* allocate(int64_t bytes) {
        void* p = nullptr;
        check_cuda(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 256))),
                   "cudaMalloc");
        check_cuda(cudaMemset(p, 0, static_cast<size_t>(std::max<int64_t>(bytes, 256))),
                   "cudaMemset");
        allocations_.push_back(p);
        return p;
    }

    kernels::cuda::DeviceLibraries libraries_;
    std::unique_ptr<kernels::cuda::PreparedKernel> kernel_;
    std::vector<const void*> inputs_;
    std::vector<void*> outputs_;
    void* scratch_ = nullptr;
    std::vector<void*> allocations_;
    cudaStream_t stream_ = nullptr;
};

// One operator through a plan and directly: TFLOP/s of each.
void compare_kernel(const std::string& label, ir::Graph graph, double flops, double peak,
                    int repeat) {
    std::unique_ptr<runtime::Plan> plan = compile(std::move(graph), 1);
    DirectKernel direct(plan->exec_graph());
    const auto [plan_s, direct_s] = side_by_side(
        repeat, [&] { check(plan->execute(), "execute"); }, [&] { direct.run(); });
    const double plan_tflops = flops / plan_s / 1e12;
    const double direct_tflops = flops / direct_s / 1e12;
    std::printf("| %s | %.1f TFLOP/s | %.1f TFLOP/s | %.3f | %s; peak %s |\n", label.c_str(),
                plan_tflops, direct_tflops, plan_tflops / direct_tflops, direct.describe().c_str(),
                peak > 0
                    ? absl::StrCat(peak, " TFLOP/s (", plan_tflops / peak * 100, "% of it)").c_str()
                    : "unknown for this card");
}

void llama(const std::string& tokens, int repeat) {
    const std::string name = absl::StrCat("llama-block:tokens=", tokens, ",dtype=bf16");
    std::unique_ptr<runtime::Plan> p1 = compile(workload(name), 1);
    std::unique_ptr<runtime::Plan> p4 = compile(workload(name), 4);
    const auto [p1_s, p4_s] = side_by_side(
        repeat, [&] { check(p1->execute(), "execute p=1"); },
        [&] { check(p4->execute(), "execute p=4"); });
    std::printf("| llama block bf16, %s tokens: p=4 virtual devices (A) / p=1 (B) | %.3f ms | "
                "%.3f ms | %.3f | one GPU: p=4 shares it, so this is the plan's overhead at "
                "p=4, not a speedup |\n",
                tokens.c_str(), p4_s * 1e3, p1_s * 1e3, p4_s / p1_s);
}

void graph_replay(int repeat) {
    std::unique_ptr<runtime::Plan> plan =
        compile(workload("llama-block:tokens=1024,dtype=bf16"), 1);
    absl::StatusOr<std::unique_ptr<runtime::cuda::CudaExecutable>> exe =
        runtime::cuda::CudaExecutable::create(plan->exec_graph(), {0}, {{false}});
    if (!exe.ok()) {
        die("CudaExecutable::create", exe.status());
    }
    const auto [replay_s, eager_s] = side_by_side(
        repeat, [&] { check((*exe)->run(), "graph replay"); },
        [&] { check((*exe)->run_eager(), "eager"); });
    std::printf("| llama block 1K: graph replay (A) / eager launches (B) | %.3f ms | %.3f ms | "
                "%.3f | %zu graph nodes (%s); instantiate + upload %.1f ms |\n",
                replay_s * 1e3, eager_s * 1e3, replay_s / eager_s, (*exe)->graph_plan().ops.size(),
                (*exe)->graph_plan().summary().c_str(), (*exe)->instantiate_seconds() * 1e3);
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    using namespace einsummable;
    int repeat = 20;
    for (int arg = 1; arg < argc; ++arg) {
        if (std::strcmp(argv[arg], "--repeat") == 0 && arg + 1 < argc) {
            repeat = std::max(1, std::atoi(argv[++arg]));
        } else {
            std::fprintf(stderr, "usage: cuda_bench [--repeat N]\n");
            return 2;
        }
    }
    absl::StatusOr<std::vector<kernels::cuda::DeviceInfo>> gpus = kernels::cuda::list_devices();
    if (!gpus.ok() || gpus->empty()) {
        std::fprintf(stderr, "cuda_bench: no CUDA GPU visible\n");
        return 1;
    }
    const std::string card = (*gpus)[0].to_string();
    const double peak = peak_bf16_tflops((*gpus)[0].name);
    std::printf("GPU %s; medians of %d alternating runs\n\n", card.c_str(), repeat);
    std::printf("| measurement | A (through a plan) | B (direct) | A / B | notes |\n"
                "|---|---|---|---|---|\n");
    for (int64_t n : {4096, 8192}) {
        compare_kernel(absl::StrCat("cuBLASLt bf16 gemm ", n, "^3"),
                       workload(absl::StrCat("matmul:", n, ",dtype=bf16")),
                       2.0 * static_cast<double>(n) * n * n, peak, repeat);
    }
    // Causal: half of the 4·s²·h·d FLOPs of dense attention.
    const int64_t s = 8192;
    compare_kernel("SDPA bf16 GQA 32/8, d=128, causal, 8K", attention(s, 32, 8, 128),
                   2.0 * static_cast<double>(s) * s * 32 * 128, peak, repeat);
    llama("1024", repeat);
    llama("8192", repeat);
    graph_replay(repeat);
    return 0;
}
