// cuDNN fused SDPA for ir::Attention (attention_cudnn.h). The only translation unit that
// includes the cuDNN frontend's headers, which are large: every other file sees this one
// through attention_cudnn.h.

#include "kernels/cuda/attention_cudnn.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/attention_cudnn_cache.h"
#include "kernels/cuda/cudnn_library.h"

#if EINSUMMABLE_HAVE_CUDNN_FRONTEND
#ifndef NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#error "the cuDNN frontend must load cuDNN at run time (kernels/cuda/CMakeLists.txt defines this)"
#endif
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include "kernels/cuda/cuda_status.h"

// The handle through which the frontend calls cuDNN (dlsym on it): defined by the program, set
// once by frontend_cudnn() below before any call into the frontend.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
} // namespace cudnn_frontend
#endif

namespace einsummable::kernels::cuda {
namespace {

absl::Status refuse(const ir::Operator& op, absl::string_view why) {
    return absl::UnimplementedError(
        absl::StrCat(op.describe(), ": cuDNN SDPA does not run this block: ", why));
}

#if EINSUMMABLE_HAVE_CUDNN_FRONTEND

namespace fe = cudnn_frontend;

// Tensor uids of the variant pack.
constexpr int64_t kQ = 1;
constexpr int64_t kK = 2;
constexpr int64_t kV = 3;
constexpr int64_t kO = 4;

// The operator's scale, as the CPU kernel reads it (kernels/cpu/attention_f32.cc).
float attention_scale(const ir::Attention& op, int64_t head_dim) {
    float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    const auto& values = op.attributes().values();
    if (auto it = values.find("scale"); it != values.end()) {
        if (const double* value = std::get_if<double>(&it->second)) {
            scale = static_cast<float>(*value);
        } else if (const int64_t* int_value = std::get_if<int64_t>(&it->second)) {
            scale = static_cast<float>(*int_value);
        }
    }
    return scale;
}

// cuDNN for the frontend: loaded once per process (cudnn_library.h), its handle handed to the
// frontend before anything calls into it. Every path into the frontend starts here.
absl::StatusOr<const CudnnLibrary*> frontend_cudnn() {
    static const absl::StatusOr<const CudnnLibrary*> loaded = [] {
        absl::StatusOr<const CudnnLibrary*> library = load_cudnn();
        if (library.ok()) {
            fe::cudnn_dlhandle = (*library)->handle;
        }
        return library;
    }();
    return loaded;
}

std::string cudnn_error(cudnnStatus_t status, absl::string_view call) {
    return absl::StrCat(call, ": ", fe::detail::get_error_string(status));
}

// ---- Built graphs, shared process-wide --------------------------------------------------------
//
// A graph is built once per SdpaGraphKey (physical GPU, dtype, shape, mask, scale) for the whole
// process, so that the virtual devices of one GPU, repeated prepares and the daemon's later plans
// reuse it: a build chooses engines and may compile kernels with NVRTC.
//
// How graphs are shared follows what cuDNN documents. The developer guide ("Thread Safety",
// docs.nvidia.com/deeplearning/cudnn/frontend/latest/developer/misc.html): the library is
// thread-safe as long as threads do not use one cuDNN handle at the same time. Nothing documents
// executing a plan with a handle other than the one it was built with, or one plan from several
// threads at once; cuDNN's engineers told PyTorch that the backend API "has known thread-safety
// limitations when ExecutionPlans are shared (or even shallow copied) across threads"
// (pytorch/pytorch#103939, after cudnnBackendExecute races in #103793), which is why PyTorch keeps
// its cuDNN plan caches per thread. So this relies on neither: each physical GPU has one cuDNN
// handle for the process and one mutex (GpuCudnn); every graph of that GPU is built and executed
// with that handle, and each build, and each set-stream + execute, holds the mutex. Virtual
// devices of one GPU run on separate threads; they never use the handle or a plan at the same
// time. An execute only enqueues (under CUDA graph capture it is recorded, not run), so the lock
// is short; a build holds it longer, but builds happen when preparing, once per key.
//
// The handle keeps the last stream it was given, which its executable may destroy; every use sets
// the stream first, so a stale one is never used. Handles and the cache live until the process
// exits (never destroyed: CUDA may be torn down before static destructors run). A prepared
// kernel also holds its graph through a shared_ptr, so the graph outlives every CUDA graph
// captured from the kernel's launches (CudaExecutable destroys those before its kernels) however
// the cache changes. A failed build (a shape this cuDNN or GPU does not take) is cached like a
// success: later prepares get the same refusal, and the flash kernel, without building again.

// One physical GPU's cuDNN handle and the mutex held for every use of it (see above).
struct GpuCudnn {
    std::mutex mutex;
    cudnnHandle_t handle = nullptr; // created on first use; never destroyed
};

GpuCudnn& gpu_cudnn(int device) {
    static std::mutex mutex;
    static auto* gpus = new std::map<int, std::unique_ptr<GpuCudnn>>();
    std::lock_guard<std::mutex> lock(mutex);
    std::unique_ptr<GpuCudnn>& gpu = (*gpus)[device];
    if (gpu == nullptr) {
        gpu = std::make_unique<GpuCudnn>();
    }
    return *gpu;
}

// Runs `work` with `device` current on this thread, then makes the previous device current again.
template <typename Work>
auto on_device(int device, Work&& work) -> decltype(work()) {
    int previous = 0;
    const bool restore = cudaGetDevice(&previous) == cudaSuccess;
    EINSUMMABLE_RETURN_IF_ERROR(
        cuda_status(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")")));
    auto result = work();
    if (restore && previous != device) {
        cudaSetDevice(previous);
    }
    return result;
}

// Creates the GPU's handle if it has none. Not cached on failure: the next prepare tries again.
absl::Status ensure_handle(GpuCudnn& gpu, int device) {
    std::lock_guard<std::mutex> lock(gpu.mutex);
    if (gpu.handle != nullptr) {
        return absl::OkStatus();
    }
    return on_device(device, [&]() -> absl::Status {
        cudnnHandle_t handle = nullptr;
        if (cudnnStatus_t status = fe::detail::create_handle(&handle);
            status != CUDNN_STATUS_SUCCESS) {
            return absl::UnavailableError(cudnn_error(status, "cudnnCreate"));
        }
        gpu.handle = handle;
        return absl::OkStatus();
    });
}

// One built graph: its plan chosen, executed with its GPU's handle under its GPU's mutex.
struct SdpaGraph {
    GpuCudnn* gpu = nullptr;
    std::unique_ptr<fe::graph::Graph> graph;
    int64_t workspace_bytes = 0;
};

BuildOnceCache<SdpaGraphKey, SdpaGraph, SdpaGraphKeyHash>& sdpa_graphs() {
    static auto* cache = new BuildOnceCache<SdpaGraphKey, SdpaGraph, SdpaGraphKeyHash>();
    return *cache;
}

// A dense [sequence, heads, dim] block as cuDNN's [batch 1, heads, sequence, dim]: its dims and
// strides.
struct BhsdLayout {
    std::vector<int64_t> dim;
    std::vector<int64_t> stride;
};
BhsdLayout bhsd(int64_t sequence, int64_t heads, int64_t dim) {
    return {{1, heads, sequence, dim}, {sequence * heads * dim, dim, heads * dim, 1}};
}

fe::graph::Tensor_attributes input_tensor(const char* name, int64_t uid, const BhsdLayout& layout) {
    return fe::graph::Tensor_attributes()
        .set_name(name)
        .set_uid(uid)
        .set_dim(layout.dim)
        .set_stride(layout.stride);
}

// Builds the graph of `key` with its GPU's handle (ensure_handle first). Unimplemented, naming
// the key and the step that failed, when cuDNN does not take it.
absl::StatusOr<std::shared_ptr<const SdpaGraph>> build_sdpa_graph(const SdpaGraphKey& key,
                                                                  GpuCudnn& gpu) {
    auto built = std::make_shared<SdpaGraph>();
    built->gpu = &gpu;
    built->graph = std::make_unique<fe::graph::Graph>();
    fe::graph::Graph& graph = *built->graph;
    graph
        .set_io_data_type(key.dtype == ir::DType::f16 ? fe::DataType_t::HALF
                                                      : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto q_tensor =
        graph.tensor(input_tensor("q", kQ, bhsd(key.sequence, key.heads_q, key.head_dim)));
    auto k_tensor =
        graph.tensor(input_tensor("k", kK, bhsd(key.sequence, key.heads_kv, key.head_dim)));
    auto v_tensor =
        graph.tensor(input_tensor("v", kV, bhsd(key.sequence, key.heads_kv, key.value_dim)));
    fe::graph::SDPA_attributes attributes = fe::graph::SDPA_attributes()
                                                .set_name("attention")
                                                .set_generate_stats(false)
                                                .set_attn_scale(key.scale);
    if (key.causal) {
        // Query t sees keys <= t of the block, which is one whole sequence over its own keys;
        // q and k have one length, so top-left it is.
        attributes.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
            .set_diagonal_band_right_bound(0);
    }
    auto [o_tensor, stats] = graph.sdpa(q_tensor, k_tensor, v_tensor, attributes);
    (void)stats;
    const BhsdLayout o_layout = bhsd(key.sequence, key.heads_q, key.value_dim);
    o_tensor->set_output(true).set_uid(kO).set_dim(o_layout.dim).set_stride(o_layout.stride);

    // The frontend's build, step by step, so that a refusal names the step that failed.
    std::lock_guard<std::mutex> lock(gpu.mutex);
    return on_device(
        key.physical_device, [&]() -> absl::StatusOr<std::shared_ptr<const SdpaGraph>> {
            const char* step = "validate";
            fe::error_t error = graph.validate();
            if (error.is_good()) {
                step = "build_operation_graph";
                error = graph.build_operation_graph(gpu.handle);
            }
            if (error.is_good()) {
                step = "create_execution_plans";
                error = graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
            }
            if (error.is_good()) {
                step = "check_support";
                error = graph.check_support();
            }
            if (error.is_good()) {
                step = "build_plans";
                error = graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
            }
            if (error.is_good()) {
                step = "get_workspace_size";
                error = graph.get_workspace_size(built->workspace_bytes);
            }
            if (error.is_bad()) {
                return absl::UnimplementedError(absl::StrCat(
                    key.to_string(), ": cudnn_frontend Graph::", step, ": ", error.get_message()));
            }
            return std::shared_ptr<const SdpaGraph>(std::move(built));
        });
}

class CudnnAttention final : public PreparedKernel {
public:
    int64_t scratch_bytes() const override { return graph->workspace_bytes; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        if (launch.inputs.size() != 3 || launch.outputs.size() != 1) {
            return absl::InvalidArgumentError(
                absl::StrCat(op_name, ": an attention launch takes 3 inputs and 1 output, got ",
                             launch.inputs.size(), " and ", launch.outputs.size()));
        }
        if (graph->workspace_bytes > 0 && launch.scratch == nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat(op_name, ": the launch has no scratch but cuDNN needs a ",
                             graph->workspace_bytes, "-byte workspace"));
        }
        // cuDNN's variant pack takes non-const pointers; it only reads q, k and v.
        std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(launch.inputs[0])},
                                                   {kK, const_cast<void*>(launch.inputs[1])},
                                                   {kV, const_cast<void*>(launch.inputs[2])},
                                                   {kO, launch.outputs[0]}};
        // The GPU's handle and this graph are used by one thread at a time (see above).
        std::lock_guard<std::mutex> lock(graph->gpu->mutex);
        try {
            if (cudnnStatus_t status = fe::detail::set_stream(graph->gpu->handle, launch.stream);
                status != CUDNN_STATUS_SUCCESS) {
                return absl::InternalError(
                    absl::StrCat(op_name, ": ", cudnn_error(status, "cudnnSetStream")));
            }
            fe::error_t error = graph->graph->execute(graph->gpu->handle, pack, launch.scratch);
            if (error.is_bad()) {
                return absl::InternalError(absl::StrCat(
                    op_name, ": cudnn_frontend Graph::execute: ", error.get_message()));
            }
        } catch (const std::exception& e) {
            return absl::InternalError(
                absl::StrCat(op_name, ": the cuDNN frontend threw: ", e.what()));
        }
        return absl::OkStatus();
    }

    std::string describe() const override {
        return absl::StrCat("cudnn sdpa ", ir::dtype_name(key.dtype), " s=", key.sequence,
                            " heads_q=", key.heads_q, " heads_kv=", key.heads_kv,
                            " d=", key.head_dim, " d_v=", key.value_dim,
                            key.causal ? " causal" : "");
    }

    std::string op_name;
    SdpaGraphKey key;
    // Shared with the cache and every kernel of the same key; kept alive by this kernel for as
    // long as a CUDA graph captured from its launches may run.
    std::shared_ptr<const SdpaGraph> graph;
};

#endif // EINSUMMABLE_HAVE_CUDNN_FRONTEND

} // namespace

bool cudnn_attention_built() {
    return EINSUMMABLE_HAVE_CUDNN_FRONTEND != 0;
}

int64_t cudnn_attention_graphs() {
#if EINSUMMABLE_HAVE_CUDNN_FRONTEND
    return static_cast<int64_t>(sdpa_graphs().size());
#else
    return 0;
#endif
}

absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_cudnn_attention(const KernelRequest& request) {
    const auto* op = dynamic_cast<const ir::Attention*>(request.op);
    if (op == nullptr || request.function == nullptr || request.libraries == nullptr) {
        return absl::InvalidArgumentError("prepare_cudnn_attention needs an attention operator, "
                                          "a function spec and the device's libraries");
    }
    // Decode-shaped blocks (key_ends: queries and keys of lengths of their own, bottom-right
    // causal, maybe run-time key_lengths) and paged ones (keys read through a page table) go to
    // the flash kernel; this graph is built for self-attention only.
    if (op->has_pages()) {
        return refuse(*op, "k and v are a pool of pages read through page_table");
    }
    if (op->has_key_ends()) {
        return refuse(*op, "queries and keys have ends of their own (key_ends)");
    }
    const ir::FunctionSpec& function = *request.function;
    if (function.inputs.size() != 3 || function.outputs.size() != 1 ||
        request.input_dtypes.size() != 3 || request.output_dtypes.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(op->describe(), ": attention takes 3 inputs and 1 output"));
    }
    const ir::Box& q = function.inputs[0];
    const ir::Box& k = function.inputs[1];
    const ir::Box& v = function.inputs[2];
    const ir::Box& out = function.outputs[0];
    if (!op->has_spec_layout(function)) {
        return absl::InvalidArgumentError(absl::StrCat(
            op->describe(), ": blocks q ", q.to_string(), ", k ", k.to_string(), ", v ",
            v.to_string(), " -> ", out.to_string(), " are not a function spec of this attention"));
    }
    if (absl::Status whole = op->require_whole_sequences(function, "cuDNN's fused attention");
        !whole.ok()) {
        return refuse(*op, whole.message());
    }
    if (request.stats_for(0)) {
        return refuse(*op, "the output is a partial result with log-sum-exp statistics");
    }
    const ir::DType dtype = request.output_dtypes[0];
    for (ir::DType input_dtype : request.input_dtypes) {
        if (input_dtype != dtype) {
            return refuse(*op, "q, k, v and the output need one storage dtype");
        }
    }
    if (dtype != ir::DType::f16 && dtype != ir::DType::bf16) {
        return refuse(*op, absl::StrCat("storage dtype ", ir::dtype_name(dtype),
                                        " (cuDNN's fused attention takes f16 and bf16)"));
    }
    if (out.volume() == 0 || q[2].size() == 0) {
        return refuse(*op, absl::StrCat("empty block ", out.to_string()));
    }
    // cuDNN's support matrix; checked here so that the fallback does not wait for a graph build.
    for (const auto& [name, dim] :
         {std::pair{"d_head", q[2].size()}, std::pair{"d_v", v[2].size()}}) {
        if (dim % 8 != 0 || dim > 256) {
            return refuse(
                *op, absl::StrCat(name, " = ", dim, " (cuDNN takes multiples of 8 up to 256)"));
        }
    }
    // Keys never cross a sequence end; one dense attention per block holds only when no end
    // lies strictly inside the block's rows.
    const ir::Interval rows = q[0];
    for (int64_t end : op->sequence_ends()) {
        if (end > rows.lower && end < rows.upper) {
            return refuse(*op, absl::StrCat("rows ", rows.to_string(),
                                            " hold parts of several packed sequences (an end at ",
                                            end, ")"));
        }
    }

#if EINSUMMABLE_HAVE_CUDNN_FRONTEND
    SdpaGraphKey key;
    key.physical_device = request.libraries->physical_device();
    key.dtype = dtype;
    key.sequence = rows.size();
    key.heads_q = q[1].size();
    key.heads_kv = k[1].size();
    key.head_dim = q[2].size();
    key.value_dim = v[2].size();
    key.causal = op->causal();
    key.scale = attention_scale(*op, key.head_dim);

    // A cuDNN that does not load only costs fused attention (cudnn_library.h says why).
    if (absl::StatusOr<const CudnnLibrary*> library = frontend_cudnn(); !library.ok()) {
        return refuse(*op, library.status().message());
    }
    GpuCudnn& gpu = gpu_cudnn(key.physical_device);
    absl::StatusOr<std::shared_ptr<const SdpaGraph>> graph;
    try {
        if (absl::Status status = ensure_handle(gpu, key.physical_device); !status.ok()) {
            return refuse(*op, status.message());
        }
        graph = sdpa_graphs().get_or_build(key, [&] { return build_sdpa_graph(key, gpu); });
    } catch (const std::exception& e) {
        return refuse(*op, absl::StrCat(key.to_string(), ": the cuDNN frontend threw: ", e.what()));
    }
    if (!graph.ok()) {
        return refuse(*op, graph.status().message());
    }
    auto kernel = std::make_unique<CudnnAttention>();
    kernel->op_name = op->describe();
    kernel->key = key;
    kernel->graph = *std::move(graph);
    return kernel;
#else
    return refuse(*op, "this build has no cuDNN frontend (cmake/cuda.cmake: run scripts/setup, "
                       "then configure again)");
#endif
}

} // namespace einsummable::kernels::cuda
