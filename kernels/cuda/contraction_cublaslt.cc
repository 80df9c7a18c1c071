#include "kernels/cuda/contraction_cublaslt.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/block_ops.h"
#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/cuda_status.h"

namespace einsummable::kernels::cuda {
namespace {

constexpr uint64_t kWorkspaceLimit = uint64_t{32} << 20;
// KernelLaunch::scratch is aligned to this; every region placed in it starts on it too.
constexpr int64_t kScratchAlignment = 256;

int64_t align_up(int64_t bytes) {
    return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

// The loaded cuBLASLt: every kernel here is prepared after DeviceLibraries::cublaslt() loaded it.
const CublasLtApi& lt() {
    return *cublaslt_if_loaded();
}

absl::Status with_op(const std::string& op_name, const absl::Status& status) {
    if (status.ok()) {
        return status;
    }
    return absl::Status(status.code(), absl::StrCat(op_name, ": ", status.message()));
}

struct MatmulDescDeleter {
    void operator()(cublasLtMatmulDesc_t desc) const {
        cublaslt_if_loaded()->cublasLtMatmulDescDestroy(desc);
    }
};
struct LayoutDeleter {
    void operator()(cublasLtMatrixLayout_t layout) const {
        cublaslt_if_loaded()->cublasLtMatrixLayoutDestroy(layout);
    }
};
struct PreferenceDeleter {
    void operator()(cublasLtMatmulPreference_t pref) const {
        cublaslt_if_loaded()->cublasLtMatmulPreferenceDestroy(pref);
    }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, MatmulDescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

struct LibraryTypes {
    cudaDataType_t data;
    cublasComputeType_t compute;
    cudaDataType_t scale;
};

// The CPU kernels widen f16 and bf16 to f32 and compute in f32; so does the matmul here.
// CUBLAS_COMPUTE_32F also keeps f32 off TF32, which would differ from the CPU by ~1e-3.
LibraryTypes library_types(ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case ir::DType::bf16:
        return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case ir::DType::f32:
        return {CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case ir::DType::f64:
        return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case ir::DType::i32: // never contracted: make_operator refuses integer operands
    case ir::DType::i64:
        break;
    }
    return {CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
}

// One layout change through scratch: the stored layout of an operand into the gemm's (or the
// gemm's output into the output term), written at `offset` in scratch.
struct Packing {
    bool needed = false;
    TermPermutation permutation;
    int64_t offset = 0;
};

struct Algorithm {
    cublasLtMatmulAlgo_t algo{};
    int64_t workspace_bytes = 0;
};

// An algorithm and the pointer alignment it was chosen for.
struct TierAlgorithm {
    uint32_t alignment = 0;
    Algorithm algorithm;
};

class CublasLtContraction final : public PreparedKernel {
public:
    int64_t scratch_bytes() const override { return scratch_bytes_; }
    absl::Status enqueue(const KernelLaunch& launch) const override;
    std::string describe() const override;

    std::string op_name;
    ir::DType dtype = ir::DType::f32;
    GemmShape shape;
    int lhs_input = 0;
    int rhs_input = 1;
    int64_t element_bytes = 4;
    int64_t output_bytes = 0;
    // Nothing to compute (an empty output block), or a sum over no terms (k's extent is 0).
    bool empty = false;
    bool zero_k = false;

    Packing lhs_pack;
    Packing rhs_pack;
    Packing out_pack;
    int64_t scratch_bytes_ = 0;

    cublasLtHandle_t handle = nullptr;
    MatmulDesc desc;
    // cuBLASLt's A is the plan's rhs, its B the plan's lhs (Cᵀ = Bᵀ·Aᵀ); C and D share one.
    Layout a_layout;
    Layout b_layout;
    Layout c_layout;
    // Strictest alignment first, one per tier the heuristic has an algorithm for; the last is
    // for operands aligned only to their element size, and is always there.
    std::vector<TierAlgorithm> algorithms;
    float alpha_f32 = 1.0f;
    float beta_f32 = 0.0f;
    double alpha_f64 = 1.0;
    double beta_f64 = 0.0;
};

absl::Status CublasLtContraction::enqueue(const KernelLaunch& launch) const {
    if (launch.inputs.size() != 2 || launch.outputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(op_name, ": a contraction launch takes 2 inputs and 1 output, got ",
                         launch.inputs.size(), " and ", launch.outputs.size()));
    }
    if (empty) {
        return absl::OkStatus();
    }
    void* out = launch.outputs[0];
    if (zero_k) {
        return with_op(
            op_name,
            cuda_status(cudaMemsetAsync(out, 0, static_cast<size_t>(output_bytes), launch.stream),
                        "cudaMemsetAsync (sum over an empty k)"));
    }
    if (scratch_bytes_ > 0 && launch.scratch == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(op_name, ": the launch has no scratch but the kernel needs ",
                         scratch_bytes_, " bytes"));
    }
    auto* scratch = static_cast<std::byte*>(launch.scratch);
    auto pack = [&](const Packing& packing, const void* src, void* dst) {
        return with_op(op_name,
                       enqueue_permute(src, packing.permutation.src_dims, packing.permutation.perm,
                                       element_bytes, dst, launch.stream));
    };
    const void* lhs = launch.inputs[static_cast<size_t>(lhs_input)];
    if (lhs_pack.needed) {
        void* packed = scratch + lhs_pack.offset;
        EINSUMMABLE_RETURN_IF_ERROR(pack(lhs_pack, lhs, packed));
        lhs = packed;
    }
    const void* rhs = launch.inputs[static_cast<size_t>(rhs_input)];
    if (rhs_pack.needed) {
        void* packed = scratch + rhs_pack.offset;
        EINSUMMABLE_RETURN_IF_ERROR(pack(rhs_pack, rhs, packed));
        rhs = packed;
    }
    void* gemm_out = out_pack.needed ? static_cast<void*>(scratch + out_pack.offset) : out;

    const uint32_t alignment =
        cublaslt_alignment({reinterpret_cast<uintptr_t>(lhs), reinterpret_cast<uintptr_t>(rhs),
                            reinterpret_cast<uintptr_t>(gemm_out)},
                           static_cast<uint32_t>(element_bytes));
    const Algorithm* chosen = &algorithms.back().algorithm;
    for (const TierAlgorithm& tier : algorithms) {
        if (tier.alignment <= alignment) {
            chosen = &tier.algorithm;
            break;
        }
    }
    const Algorithm& algorithm = *chosen;
    const bool f64 = dtype == ir::DType::f64;
    const void* alpha = f64 ? static_cast<const void*>(&alpha_f64) : &alpha_f32;
    const void* beta = f64 ? static_cast<const void*>(&beta_f64) : &beta_f32;
    if (absl::Status status = cublas_status(
            lt().cublasLtMatmul(handle, desc.get(), alpha, rhs, a_layout.get(), lhs, b_layout.get(),
                                beta, gemm_out, c_layout.get(), gemm_out, c_layout.get(),
                                &algorithm.algo, algorithm.workspace_bytes > 0 ? scratch : nullptr,
                                static_cast<size_t>(algorithm.workspace_bytes), launch.stream),
            "cublasLtMatmul");
        !status.ok()) {
        return with_op(op_name, status);
    }
    if (out_pack.needed) {
        return pack(out_pack, gemm_out, out);
    }
    return absl::OkStatus();
}

std::string CublasLtContraction::describe() const {
    std::string text = absl::StrCat("cublasLt ", ir::dtype_name(dtype), " gemm m=", shape.m,
                                    " n=", shape.n, " k=", shape.k, " batch=", shape.batch);
    if (empty) {
        absl::StrAppend(&text, " (empty block: nothing runs)");
    } else if (zero_k) {
        absl::StrAppend(&text, " (sum over no terms: zero fill)");
    } else if (lhs_pack.needed || rhs_pack.needed || out_pack.needed) {
        std::string packed;
        for (const auto& [name, packing] :
             {std::pair{"lhs", &lhs_pack}, std::pair{"rhs", &rhs_pack},
              std::pair{"out", &out_pack}}) {
            if (packing->needed) {
                absl::StrAppend(&packed, packed.empty() ? "" : ", ", name);
            }
        }
        absl::StrAppend(&text, " (permutes ", packed, ")");
    }
    return text;
}

absl::Status unimplemented(const std::string& op_name, absl::string_view why) {
    return absl::UnimplementedError(
        absl::StrCat(op_name, ": cuBLASLt cannot run this block: ", why));
}

// Plans one packing of `bytes` from `src_term` to `dst_term` at the end of scratch.
absl::Status plan_packing(const std::string& op_name, absl::string_view role,
                          const std::string& src_term, const std::string& dst_term,
                          const IndexExtents& extents, int64_t bytes, int64_t& scratch_end,
                          Packing& packing) {
    packing.permutation = term_permutation(src_term, dst_term, extents);
    if (packing.permutation.identity()) {
        return absl::OkStatus(); // the two layouts hold the same bytes
    }
    if (packing.permutation.src_dims.size() > static_cast<size_t>(kMaxCopyRank)) {
        return unimplemented(
            op_name, absl::StrCat("the ", role, " permutation '", src_term, "' -> '", dst_term,
                                  "' has ", packing.permutation.src_dims.size(),
                                  " dimensions, more than enqueue_permute's ", kMaxCopyRank));
    }
    packing.needed = true;
    packing.offset = scratch_end;
    scratch_end = align_up(scratch_end + bytes);
    return absl::OkStatus();
}

absl::StatusOr<Layout> make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t batch_stride, absl::string_view role) {
    cublasLtMatrixLayout_t raw = nullptr;
    EINSUMMABLE_RETURN_IF_ERROR(
        cublas_status(lt().cublasLtMatrixLayoutCreate(&raw, type, static_cast<uint64_t>(rows),
                                                      static_cast<uint64_t>(cols), ld),
                      absl::StrCat("cublasLtMatrixLayoutCreate (", role, ")")));
    Layout layout(raw);
    if (batch > 1) {
        const auto count = static_cast<int32_t>(batch);
        EINSUMMABLE_RETURN_IF_ERROR(cublas_status(
            lt().cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                  sizeof(count)),
            absl::StrCat("cublasLtMatrixLayoutSetAttribute BATCH_COUNT (", role, ")")));
        EINSUMMABLE_RETURN_IF_ERROR(cublas_status(
            lt().cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &batch_stride, sizeof(batch_stride)),
            absl::StrCat("cublasLtMatrixLayoutSetAttribute "
                         "STRIDED_BATCH_OFFSET (",
                         role, ")")));
    }
    return layout;
}

// cuBLASLt's best algorithm for `kernel`'s matmul with every pointer aligned to `alignment`
// bytes; nullopt when it has none.
absl::StatusOr<std::optional<Algorithm>> choose_algorithm(const CublasLtContraction& kernel,
                                                          uint32_t alignment) {
    cublasLtMatmulPreference_t raw = nullptr;
    EINSUMMABLE_RETURN_IF_ERROR(
        cublas_status(lt().cublasLtMatmulPreferenceCreate(&raw), "cublasLtMatmulPreferenceCreate"));
    Preference preference(raw);
    const uint64_t workspace_limit = kWorkspaceLimit;
    EINSUMMABLE_RETURN_IF_ERROR(cublas_status(
        lt().cublasLtMatmulPreferenceSetAttribute(raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &workspace_limit, sizeof(workspace_limit)),
        "cublasLtMatmulPreferenceSetAttribute MAX_WORKSPACE_BYTES"));
    for (cublasLtMatmulPreferenceAttributes_t attribute :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
        EINSUMMABLE_RETURN_IF_ERROR(
            cublas_status(lt().cublasLtMatmulPreferenceSetAttribute(raw, attribute, &alignment,
                                                                    sizeof(alignment)),
                          "cublasLtMatmulPreferenceSetAttribute MIN_ALIGNMENT"));
    }
    if (kernel.dtype == ir::DType::f16 || kernel.dtype == ir::DType::bf16) {
        // Split-K partial sums in the compute type (f32), never in the 16-bit output type, so
        // f16/bf16 contractions accumulate in f32 as the CPU kernels do.
        const uint32_t schemes =
            CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        EINSUMMABLE_RETURN_IF_ERROR(cublas_status(
            lt().cublasLtMatmulPreferenceSetAttribute(
                raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)),
            "cublasLtMatmulPreferenceSetAttribute REDUCTION_SCHEME_MASK"));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status = lt().cublasLtMatmulAlgoGetHeuristic(
        kernel.handle, kernel.desc.get(), kernel.a_layout.get(), kernel.b_layout.get(),
        kernel.c_layout.get(), kernel.c_layout.get(), raw, 1, &result, &returned);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED ||
        (status == CUBLAS_STATUS_SUCCESS && returned == 0)) {
        return std::optional<Algorithm>();
    }
    EINSUMMABLE_RETURN_IF_ERROR(cublas_status(status, "cublasLtMatmulAlgoGetHeuristic"));
    if (result.state != CUBLAS_STATUS_SUCCESS) {
        return std::optional<Algorithm>();
    }
    return std::optional<Algorithm>(
        Algorithm{result.algo, static_cast<int64_t>(result.workspaceSize)});
}

absl::Status set_operation(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                           bool transposed, absl::string_view what) {
    const cublasOperation_t operation = transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    return cublas_status(
        lt().cublasLtMatmulDescSetAttribute(desc, attribute, &operation, sizeof(operation)),
        absl::StrCat("cublasLtMatmulDescSetAttribute ", what));
}

} // namespace

uint32_t cublaslt_alignment(absl::Span<const uintptr_t> addresses, uint32_t element_bytes) {
    for (uint32_t alignment : kCublasLtAlignmentTiers) {
        if (std::all_of(addresses.begin(), addresses.end(),
                        [&](uintptr_t address) { return address % alignment == 0; })) {
            return alignment;
        }
    }
    return element_bytes;
}

absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_cublaslt_contraction(const KernelRequest& request, const ContractionPlan& plan) {
    const auto* einsum = dynamic_cast<const ir::Einsum*>(request.op);
    if (einsum == nullptr || request.function == nullptr || request.libraries == nullptr) {
        return absl::InvalidArgumentError(
            "prepare_cublaslt_contraction needs an einsum, a function spec and the device's "
            "libraries");
    }
    auto kernel = std::make_unique<CublasLtContraction>();
    kernel->op_name = einsum->describe();
    if (request.input_dtypes.size() != 2 || request.output_dtypes.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(kernel->op_name,
                         ": a contraction takes 2 input dtypes and 1 output "
                         "dtype, the request has ",
                         request.input_dtypes.size(), " and ", request.output_dtypes.size()));
    }
    kernel->dtype = request.output_dtypes[0];
    if (request.input_dtypes[0] != kernel->dtype || request.input_dtypes[1] != kernel->dtype) {
        return unimplemented(
            kernel->op_name,
            absl::StrCat("inputs stored as ", ir::dtype_name(request.input_dtypes[0]), " and ",
                         ir::dtype_name(request.input_dtypes[1]), ", the output as ",
                         ir::dtype_name(kernel->dtype), "; one dtype for all three is needed"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const IndexExtents extents,
                                 checked_index_extents(*einsum, *request.function));
    kernel->shape = gemm_shape(plan, extents);
    const GemmShape& shape = kernel->shape;
    kernel->lhs_input = plan.lhs_input;
    kernel->rhs_input = plan.rhs_input;
    kernel->element_bytes = ir::dtype_size(kernel->dtype);
    kernel->output_bytes = shape.batch * shape.m * shape.n * kernel->element_bytes;
    if (kernel->output_bytes == 0) {
        kernel->empty = true;
        return kernel;
    }
    if (shape.k == 0) {
        kernel->zero_k = true;
        return kernel;
    }
    // cuBLASLt takes rows, columns (hence leading dimensions) and batch counts as int32; the
    // generic kernel runs what exceeds them, as the CPU kernels fall back from BLAS.
    constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
    if (shape.batch > kMaxDim || shape.m > kMaxDim || shape.n > kMaxDim || shape.k > kMaxDim) {
        return unimplemented(kernel->op_name,
                             absl::StrCat("m=", shape.m, " n=", shape.n, " k=", shape.k,
                                          " batch=", shape.batch, " exceed cuBLASLt's int32"));
    }

    // Scratch: [workspace][packed lhs][packed rhs][gemm output]; the workspace's size is known
    // only after the heuristic, so the packings are placed from 0 and moved behind it below.
    int64_t scratch_end = 0;
    const std::string& lhs_term = einsum->input_terms()[static_cast<size_t>(plan.lhs_input)];
    const std::string& rhs_term = einsum->input_terms()[static_cast<size_t>(plan.rhs_input)];
    if (plan.lhs_packed) {
        EINSUMMABLE_RETURN_IF_ERROR(
            plan_packing(kernel->op_name, "lhs", lhs_term, plan.lhs_gemm_term(), extents,
                         shape.batch * shape.m * shape.k * kernel->element_bytes, scratch_end,
                         kernel->lhs_pack));
    }
    if (plan.rhs_packed) {
        EINSUMMABLE_RETURN_IF_ERROR(
            plan_packing(kernel->op_name, "rhs", rhs_term, plan.rhs_gemm_term(), extents,
                         shape.batch * shape.k * shape.n * kernel->element_bytes, scratch_end,
                         kernel->rhs_pack));
    }
    if (!plan.out_direct) {
        EINSUMMABLE_RETURN_IF_ERROR(
            plan_packing(kernel->op_name, "output", plan.out_gemm_term(), einsum->output_term(),
                         extents, kernel->output_bytes, scratch_end, kernel->out_pack));
    }

    absl::StatusOr<cublasLtHandle_t> handle = request.libraries->cublaslt();
    if (!handle.ok()) {
        return with_op(kernel->op_name, handle.status());
    }
    kernel->handle = *handle;
    const LibraryTypes types = library_types(kernel->dtype);
    cublasLtMatmulDesc_t raw_desc = nullptr;
    if (absl::Status status =
            cublas_status(lt().cublasLtMatmulDescCreate(&raw_desc, types.compute, types.scale),
                          "cublasLtMatmulDescCreate");
        !status.ok()) {
        return with_op(kernel->op_name, status);
    }
    kernel->desc.reset(raw_desc);
    // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: the library's A is the plan's rhs, whose
    // row-major k x n block is a column-major n x k matrix (ld n) — used as is — and a
    // transposed rhs (n x k row-major) is column-major k x n, taken transposed. Likewise for
    // the library's B, the plan's lhs.
    for (absl::Status status :
         {set_operation(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, plan.rhs_transposed, "TRANSA"),
          set_operation(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, plan.lhs_transposed, "TRANSB")}) {
        if (!status.ok()) {
            return with_op(kernel->op_name, status);
        }
    }
    absl::StatusOr<Layout> a_layout =
        plan.rhs_transposed
            ? make_layout(types.data, shape.k, shape.n, shape.ldb, shape.batch, shape.stride_b, "A")
            : make_layout(types.data, shape.n, shape.k, shape.ldb, shape.batch, shape.stride_b,
                          "A");
    absl::StatusOr<Layout> b_layout =
        plan.lhs_transposed
            ? make_layout(types.data, shape.m, shape.k, shape.lda, shape.batch, shape.stride_a, "B")
            : make_layout(types.data, shape.k, shape.m, shape.lda, shape.batch, shape.stride_a,
                          "B");
    absl::StatusOr<Layout> c_layout =
        make_layout(types.data, shape.n, shape.m, shape.ldc, shape.batch, shape.stride_c, "C");
    for (const absl::Status& status : {a_layout.status(), b_layout.status(), c_layout.status()}) {
        if (!status.ok()) {
            return with_op(kernel->op_name, status);
        }
    }
    kernel->a_layout = *std::move(a_layout);
    kernel->b_layout = *std::move(b_layout);
    kernel->c_layout = *std::move(c_layout);

    // One algorithm per tier, then for element-aligned operands (which must exist).
    std::vector<uint32_t> alignments(std::begin(kCublasLtAlignmentTiers),
                                     std::end(kCublasLtAlignmentTiers));
    alignments.push_back(static_cast<uint32_t>(kernel->element_bytes));
    int64_t workspace = 0;
    for (uint32_t alignment : alignments) {
        absl::StatusOr<std::optional<Algorithm>> algorithm = choose_algorithm(*kernel, alignment);
        if (!algorithm.ok()) {
            return with_op(kernel->op_name, algorithm.status());
        }
        if (algorithm->has_value()) {
            kernel->algorithms.push_back(TierAlgorithm{alignment, **algorithm});
            workspace = std::max(workspace, (*algorithm)->workspace_bytes);
        } else if (alignment == alignments.back()) {
            return unimplemented(kernel->op_name,
                                 absl::StrCat("the heuristic has no algorithm for ",
                                              kernel->describe(),
                                              " with element-aligned operands"));
        }
    }
    workspace = align_up(workspace);
    for (Packing* packing : {&kernel->lhs_pack, &kernel->rhs_pack, &kernel->out_pack}) {
        packing->offset += workspace;
    }
    kernel->scratch_bytes_ = workspace + scratch_end;
    return kernel;
}

} // namespace einsummable::kernels::cuda
