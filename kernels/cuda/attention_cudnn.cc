// cuDNN fused SDPA for ir::Attention (attention_cudnn.h). The only translation unit that
// includes the cuDNN frontend's headers, which are large: every other file sees this one
// through attention_cudnn.h.

#include "kernels/cuda/attention_cudnn.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/attention.h"
#include "kernels/cuda/cudnn_library.h"

#if EINSUMMABLE_HAVE_CUDNN_FRONTEND
#ifndef NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#error "the cuDNN frontend must load cuDNN at run time (kernels/cuda/CMakeLists.txt defines this)"
#endif
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

// The shape of one function spec's blocks: q [s, heads_q, d], k [s, heads_kv, d],
// v [s, heads_kv, d_v], out [s, heads_q, d_v].
struct SdpaShape {
    int64_t sequence = 0;
    int64_t heads_q = 0;
    int64_t heads_kv = 0;
    int64_t head_dim = 0;
    int64_t value_dim = 0;
    float scale = 1.0f;
    bool causal = false;
};

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

void destroy_cudnn(void* handle) {
    fe::detail::destroy_handle(static_cast<cudnnHandle_t>(handle));
}

// The device's cuDNN handle, created on first use with the device current.
absl::StatusOr<cudnnHandle_t> cudnn_handle(DeviceLibraries& libraries) {
    if (libraries.cudnn_handle() == nullptr) {
        if (absl::Status status =
                cuda_status(cudaSetDevice(libraries.physical_device()),
                            absl::StrCat("cudaSetDevice(", libraries.physical_device(), ")"));
            !status.ok()) {
            return status;
        }
        cudnnHandle_t handle = nullptr;
        if (cudnnStatus_t status = fe::detail::create_handle(&handle);
            status != CUDNN_STATUS_SUCCESS) {
            return absl::UnavailableError(cudnn_error(status, "cudnnCreate"));
        }
        libraries.set_cudnn_handle(handle, &destroy_cudnn);
    }
    return static_cast<cudnnHandle_t>(libraries.cudnn_handle());
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

class CudnnAttention final : public PreparedKernel {
public:
    int64_t scratch_bytes() const override { return workspace_bytes; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        if (launch.inputs.size() != 3 || launch.outputs.size() != 1) {
            return absl::InvalidArgumentError(
                absl::StrCat(op_name, ": an attention launch takes 3 inputs and 1 output, got ",
                             launch.inputs.size(), " and ", launch.outputs.size()));
        }
        if (workspace_bytes > 0 && launch.scratch == nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat(op_name, ": the launch has no scratch but cuDNN needs a ",
                             workspace_bytes, "-byte workspace"));
        }
        if (cudnnStatus_t status = fe::detail::set_stream(handle, launch.stream);
            status != CUDNN_STATUS_SUCCESS) {
            return absl::InternalError(
                absl::StrCat(op_name, ": ", cudnn_error(status, "cudnnSetStream")));
        }
        // cuDNN's variant pack takes non-const pointers; it only reads q, k and v.
        std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(launch.inputs[0])},
                                                   {kK, const_cast<void*>(launch.inputs[1])},
                                                   {kV, const_cast<void*>(launch.inputs[2])},
                                                   {kO, launch.outputs[0]}};
        fe::error_t error = graph->execute(handle, pack, launch.scratch);
        if (error.is_bad()) {
            return absl::InternalError(
                absl::StrCat(op_name, ": cudnn_frontend Graph::execute: ", error.get_message()));
        }
        return absl::OkStatus();
    }

    std::string describe() const override {
        return absl::StrCat("cudnn sdpa ", ir::dtype_name(dtype), " s=", shape.sequence,
                            " heads_q=", shape.heads_q, " heads_kv=", shape.heads_kv,
                            " d=", shape.head_dim, " d_v=", shape.value_dim,
                            shape.causal ? " causal" : "");
    }

    std::string op_name;
    ir::DType dtype = ir::DType::bf16;
    SdpaShape shape;
    cudnnHandle_t handle = nullptr;
    std::unique_ptr<fe::graph::Graph> graph;
    int64_t workspace_bytes = 0;
};

#endif // EINSUMMABLE_HAVE_CUDNN_FRONTEND

} // namespace

bool cudnn_attention_built() {
    return EINSUMMABLE_HAVE_CUDNN_FRONTEND != 0;
}

absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_cudnn_attention(const KernelRequest& request) {
    const auto* op = dynamic_cast<const ir::Attention*>(request.op);
    if (op == nullptr || request.function == nullptr || request.libraries == nullptr) {
        return absl::InvalidArgumentError("prepare_cudnn_attention needs an attention operator, "
                                          "a function spec and the device's libraries");
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
    auto kernel = std::make_unique<CudnnAttention>();
    kernel->op_name = op->describe();
    kernel->dtype = dtype;
    SdpaShape& shape = kernel->shape;
    shape.sequence = rows.size();
    shape.heads_q = q[1].size();
    shape.heads_kv = k[1].size();
    shape.head_dim = q[2].size();
    shape.value_dim = v[2].size();
    shape.scale = attention_scale(*op, shape.head_dim);
    shape.causal = op->causal();

    // A cuDNN that does not load only costs fused attention (cudnn_library.h says why).
    if (absl::StatusOr<const CudnnLibrary*> library = frontend_cudnn(); !library.ok()) {
        return refuse(*op, library.status().message());
    }
    absl::StatusOr<cudnnHandle_t> handle = cudnn_handle(*request.libraries);
    if (!handle.ok()) {
        return refuse(*op, handle.status().message());
    }
    kernel->handle = *handle;

    kernel->graph = std::make_unique<fe::graph::Graph>();
    fe::graph::Graph& graph = *kernel->graph;
    graph
        .set_io_data_type(dtype == ir::DType::f16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto q_tensor =
        graph.tensor(input_tensor("q", kQ, bhsd(shape.sequence, shape.heads_q, shape.head_dim)));
    auto k_tensor =
        graph.tensor(input_tensor("k", kK, bhsd(shape.sequence, shape.heads_kv, shape.head_dim)));
    auto v_tensor =
        graph.tensor(input_tensor("v", kV, bhsd(shape.sequence, shape.heads_kv, shape.value_dim)));
    fe::graph::SDPA_attributes attributes = fe::graph::SDPA_attributes()
                                                .set_name("attention")
                                                .set_generate_stats(false)
                                                .set_attn_scale(shape.scale);
    if (shape.causal) {
        // Query t sees keys <= t of the block, which is one whole sequence over its own keys;
        // q and k have one length, so top-left it is.
        attributes.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
            .set_diagonal_band_right_bound(0);
    }
    auto [o_tensor, stats] = graph.sdpa(q_tensor, k_tensor, v_tensor, attributes);
    (void)stats;
    const BhsdLayout o_layout = bhsd(shape.sequence, shape.heads_q, shape.value_dim);
    o_tensor->set_output(true).set_uid(kO).set_dim(o_layout.dim).set_stride(o_layout.stride);

    // The frontend's build, step by step, so that a refusal names the step that failed.
    const char* step = "validate";
    fe::error_t error = graph.validate();
    if (error.is_good()) {
        step = "build_operation_graph";
        error = graph.build_operation_graph(*handle);
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
    if (error.is_bad()) {
        return refuse(*op, absl::StrCat(kernel->describe(), ": cudnn_frontend Graph::", step, ": ",
                                        error.get_message()));
    }
    if (error = graph.get_workspace_size(kernel->workspace_bytes); error.is_bad()) {
        return refuse(
            *op, absl::StrCat("cudnn_frontend Graph::get_workspace_size: ", error.get_message()));
    }
    return kernel;
#else
    return refuse(*op, "this build has no cuDNN frontend (cmake/cuda.cmake: run scripts/setup, "
                       "then configure again)");
#endif
}

} // namespace einsummable::kernels::cuda
