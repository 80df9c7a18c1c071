// block_ops.h: argument checks and copy planning on the host (C++20, with the ir box types);
// the kernels are in block_ops.cu behind block_ops_launch.h.

#include "kernels/cuda/block_ops.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/argmax_launch.h"
#include "kernels/cuda/block_ops_launch.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/top_k_launch.h"

namespace einsummable::kernels::cuda {
namespace {

static_assert(kMaxAggregatePartsPerLaunch == kMaxLaunchParts);
static_assert(kMaxCopyRank == kMaxStridedRank);

absl::Status argument_error(absl::string_view function, absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(function, ": ", message));
}

bool overlaps(const void* a, const void* b, int64_t bytes) {
    const auto a_begin = reinterpret_cast<uintptr_t>(a);
    const auto b_begin = reinterpret_cast<uintptr_t>(b);
    return a_begin < b_begin + static_cast<uintptr_t>(bytes) &&
           b_begin < a_begin + static_cast<uintptr_t>(bytes);
}

absl::Status check_element_bytes(absl::string_view function, int64_t element_bytes) {
    if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4 && element_bytes != 8) {
        return argument_error(
            function, absl::StrCat("element_bytes is ", element_bytes, "; expected 1, 2, 4 or 8"));
    }
    return absl::OkStatus();
}

// Drops dimensions of extent 1 and merges each dimension into the one inside it where both
// blocks walk the pair contiguously, so a copy of whole rows becomes one long run.
void collapse(StridedCopy& copy) {
    StridedCopy out = copy;
    out.rank = 0;
    for (int dim = 0; dim < copy.rank; ++dim) {
        if (copy.extent[dim] == 1) {
            continue;
        }
        const int last = out.rank - 1;
        if (last >= 0 && out.src_stride[last] == copy.src_stride[dim] * copy.extent[dim] &&
            out.dst_stride[last] == copy.dst_stride[dim] * copy.extent[dim]) {
            out.extent[last] *= copy.extent[dim];
            out.src_stride[last] = copy.src_stride[dim];
            out.dst_stride[last] = copy.dst_stride[dim];
            continue;
        }
        out.extent[out.rank] = copy.extent[dim];
        out.src_stride[out.rank] = copy.src_stride[dim];
        out.dst_stride[out.rank] = copy.dst_stride[dim];
        ++out.rank;
    }
    copy = out;
}

// Moves a contiguous innermost run in units of up to 16 bytes when every offset, stride and
// pointer allows it: one vector load and store per thread instead of up to eight.
void widen(StridedCopy& copy, const void* src, const void* dst) {
    if (copy.rank == 0) {
        return;
    }
    const int inner = copy.rank - 1;
    if (copy.src_stride[inner] != 1 || copy.dst_stride[inner] != 1) {
        return;
    }
    for (int64_t unit = 16; unit > copy.element_bytes; unit /= 2) {
        const int64_t factor = unit / copy.element_bytes;
        bool fits = copy.extent[inner] % factor == 0 && copy.src_offset % factor == 0 &&
                    copy.dst_offset % factor == 0 && reinterpret_cast<uintptr_t>(src) % unit == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % unit == 0;
        for (int dim = 0; dim < inner && fits; ++dim) {
            fits = copy.src_stride[dim] % factor == 0 && copy.dst_stride[dim] % factor == 0;
        }
        if (!fits) {
            continue;
        }
        copy.extent[inner] /= factor;
        for (int dim = 0; dim < inner; ++dim) {
            copy.src_stride[dim] /= factor;
            copy.dst_stride[dim] /= factor;
        }
        copy.src_offset /= factor;
        copy.dst_offset /= factor;
        copy.element_bytes = unit;
        return;
    }
}

// One memcpy for a single contiguous run, the strided kernel otherwise.
absl::Status run_copy(absl::string_view function, const StridedCopy& planned, const void* src,
                      void* dst, cudaStream_t stream) {
    const StridedCopy copy = collapse_and_widen(planned, src, dst);
    if (copy.rank == 0 || (copy.rank == 1 && copy.src_stride[0] == 1 && copy.dst_stride[0] == 1)) {
        const int64_t count = copy.rank == 0 ? 1 : copy.extent[0];
        return cuda_status(
            cudaMemcpyAsync(
                static_cast<std::byte*>(dst) + copy.dst_offset * copy.element_bytes,
                static_cast<const std::byte*>(src) + copy.src_offset * copy.element_bytes,
                static_cast<size_t>(count * copy.element_bytes), cudaMemcpyDeviceToDevice, stream),
            absl::StrCat(function, ": cudaMemcpyAsync"));
    }
    return cuda_status(launch_strided_copy(copy, src, dst, stream),
                       absl::StrCat(function, ": strided copy kernel launch"));
}

} // namespace

StridedCopy region_copy(const ir::Box& src_box, const ir::Box& dst_box, const ir::Box& region,
                        int64_t element_bytes) {
    StridedCopy copy;
    copy.rank = region.rank();
    copy.element_bytes = element_bytes;
    int64_t src_step = 1;
    int64_t dst_step = 1;
    for (int dim = region.rank() - 1; dim >= 0; --dim) {
        copy.extent[dim] = region[dim].size();
        copy.src_stride[dim] = src_step;
        copy.dst_stride[dim] = dst_step;
        copy.src_offset += (region[dim].lower - src_box[dim].lower) * src_step;
        copy.dst_offset += (region[dim].lower - dst_box[dim].lower) * dst_step;
        src_step *= src_box[dim].size();
        dst_step *= dst_box[dim].size();
    }
    return copy;
}

StridedCopy permute_copy(const int64_t* src_dims, const int* perm, int rank,
                         int64_t element_bytes) {
    // Row-major strides of src, then the copy in dst order (dst dimension j walks src dimension
    // perm[j]), so that writes are contiguous.
    std::array<int64_t, kMaxStridedRank> src_strides{};
    int64_t step = 1;
    for (int dim = rank - 1; dim >= 0; --dim) {
        src_strides[static_cast<size_t>(dim)] = step;
        step *= src_dims[dim];
    }
    StridedCopy copy;
    copy.rank = rank;
    copy.element_bytes = element_bytes;
    step = 1;
    for (int dim = rank - 1; dim >= 0; --dim) {
        copy.extent[dim] = src_dims[perm[dim]];
        copy.src_stride[dim] = src_strides[static_cast<size_t>(perm[dim])];
        copy.dst_stride[dim] = step;
        step *= copy.extent[dim];
    }
    return copy;
}

StridedCopy collapse_and_widen(StridedCopy copy, const void* src, const void* dst) {
    collapse(copy);
    widen(copy, src, dst);
    return copy;
}

absl::Status enqueue_aggregate(ir::AggOp op, ir::DType dtype, absl::Span<const void* const> parts,
                               void* out, int64_t n, cudaStream_t stream) {
    constexpr absl::string_view kFunction = "enqueue_aggregate";
    if (parts.empty()) {
        return argument_error(kFunction, "parts is empty; at least one part is needed");
    }
    if (n < 0) {
        return argument_error(kFunction, absl::StrCat("n is negative (", n, ")"));
    }
    if (n == 0) {
        return absl::OkStatus();
    }
    if (out == nullptr) {
        return argument_error(kFunction, "out is null");
    }
    const int64_t bytes = n * ir::dtype_size(dtype);
    for (size_t idx = 0; idx < parts.size(); ++idx) {
        if (parts[idx] == nullptr) {
            return argument_error(kFunction, absl::StrCat("parts[", idx, "] is null"));
        }
        if (overlaps(parts[idx], out, bytes)) {
            return argument_error(kFunction, absl::StrCat("out overlaps parts[", idx, "]"));
        }
    }
    AggregateKind kind = AggregateKind::none;
    switch (op) {
    case ir::AggOp::log_sum_exp:
        return argument_error(kFunction, "log_sum_exp parts carry statistics; "
                                         "enqueue_aggregate_log_sum_exp combines them");
    case ir::AggOp::arg_max:
        return argument_error(kFunction, "arg_max parts carry statistics; "
                                         "enqueue_aggregate_arg_max combines them");
    case ir::AggOp::top_k:
        return argument_error(kFunction, "top_k parts are rows of k (value, index) pairs; "
                                         "enqueue_aggregate_top_k merges them");
    case ir::AggOp::none:
        kind = AggregateKind::none;
        break;
    case ir::AggOp::sum:
        kind = AggregateKind::sum;
        break;
    case ir::AggOp::max:
        kind = AggregateKind::max;
        break;
    case ir::AggOp::min:
        kind = AggregateKind::min;
        break;
    }
    auto launch = [&](const void* const* first, size_t count) {
        return cuda_status(
            launch_aggregate(kind, dtype, first, static_cast<int>(count), out, n, stream),
            absl::StrCat(kFunction, ": ", ir::agg_op_name(op), " of ", parts.size(), " ",
                         ir::dtype_name(dtype), " parts, n = ", n));
    };
    const size_t per_launch = kind == AggregateKind::none ? 1 : kMaxLaunchParts;
    size_t done = std::min(parts.size(), per_launch);
    EINSUMMABLE_RETURN_IF_ERROR(launch(parts.data(), done));
    // Beyond one launch's parts: out ⊕ the next ones, in part order, into out.
    std::vector<const void*> chained;
    while (kind != AggregateKind::none && done < parts.size()) {
        const size_t count = std::min(parts.size() - done, per_launch - 1);
        chained.assign(1, out);
        chained.insert(chained.end(), parts.begin() + static_cast<std::ptrdiff_t>(done),
                       parts.begin() + static_cast<std::ptrdiff_t>(done + count));
        EINSUMMABLE_RETURN_IF_ERROR(launch(chained.data(), chained.size()));
        done += count;
    }
    return absl::OkStatus();
}

absl::Status enqueue_aggregate_log_sum_exp(ir::DType dtype, absl::Span<const void* const> parts,
                                           absl::Span<const float* const> part_stats, void* out,
                                           float* out_stats, int64_t vectors, int64_t width,
                                           cudaStream_t stream) {
    constexpr absl::string_view kFunction = "enqueue_aggregate_log_sum_exp";
    if (parts.empty()) {
        return argument_error(kFunction, "parts is empty; at least one part is needed");
    }
    if (part_stats.size() != parts.size()) {
        return argument_error(
            kFunction, absl::StrCat(parts.size(), " parts but ", part_stats.size(), " statistics"));
    }
    if (vectors < 0 || width < 0) {
        return argument_error(kFunction, absl::StrCat("vectors (", vectors, ") and width (", width,
                                                      ") may not be negative"));
    }
    if (vectors == 0) {
        return absl::OkStatus();
    }
    if (out == nullptr) {
        return argument_error(kFunction, "out is null");
    }
    if (parts.size() > static_cast<size_t>(kMaxLogSumExpParts) && out_stats == nullptr) {
        return argument_error(
            kFunction, absl::StrCat(parts.size(), " parts without output statistics: at most ",
                                    kMaxLogSumExpParts, " (more are folded through out's)"));
    }
    const int64_t bytes = vectors * width * ir::dtype_size(dtype);
    for (size_t idx = 0; idx < parts.size(); ++idx) {
        if (part_stats[idx] == nullptr || (parts[idx] == nullptr && bytes > 0)) {
            return argument_error(
                kFunction,
                absl::StrCat(parts[idx] == nullptr ? "parts[" : "part_stats[", idx, "] is null"));
        }
        if (bytes > 0 && overlaps(parts[idx], out, bytes)) {
            return argument_error(kFunction, absl::StrCat("out overlaps parts[", idx, "]"));
        }
    }
    auto launch = [&](const void* const* values, const float* const* stats, size_t count) {
        return cuda_status(launch_aggregate_log_sum_exp(dtype, values, stats,
                                                        static_cast<int>(count), out, out_stats,
                                                        vectors, width, stream),
                           absl::StrCat(kFunction, ": ", parts.size(), " ", ir::dtype_name(dtype),
                                        " parts of ", vectors, " x ", width));
    };
    size_t done = std::min(parts.size(), static_cast<size_t>(kMaxLogSumExpParts));
    EINSUMMABLE_RETURN_IF_ERROR(launch(parts.data(), part_stats.data(), done));
    // Beyond one launch's parts: out ⊕ the next ones, into out and out_stats.
    std::vector<const void*> values;
    std::vector<const float*> stats;
    while (done < parts.size()) {
        const size_t count =
            std::min(parts.size() - done, static_cast<size_t>(kMaxLogSumExpParts - 1));
        values.assign(1, out);
        stats.assign(1, out_stats);
        for (size_t idx = done; idx < done + count; ++idx) {
            values.push_back(parts[idx]);
            stats.push_back(part_stats[idx]);
        }
        EINSUMMABLE_RETURN_IF_ERROR(launch(values.data(), stats.data(), values.size()));
        done += count;
    }
    return absl::OkStatus();
}

absl::Status enqueue_aggregate_arg_max(absl::Span<const void* const> parts,
                                       absl::Span<const float* const> part_stats, void* out,
                                       float* out_stats, int64_t vectors, cudaStream_t stream) {
    constexpr absl::string_view kFunction = "enqueue_aggregate_arg_max";
    if (parts.empty() || part_stats.size() != parts.size()) {
        return argument_error(kFunction,
                              absl::StrCat(parts.size(), " parts and ", part_stats.size(),
                                           " statistics; one each, at least one"));
    }
    if (vectors <= 0) {
        return vectors == 0 ? absl::OkStatus()
                            : argument_error(kFunction, absl::StrCat("vectors is ", vectors));
    }
    if (out == nullptr) {
        return argument_error(kFunction, "out is null");
    }
    if (parts.size() > static_cast<size_t>(kMaxArgMaxParts) && out_stats == nullptr) {
        return argument_error(
            kFunction, absl::StrCat(parts.size(), " parts without output statistics: at most ",
                                    kMaxArgMaxParts, " (more are folded through out's)"));
    }
    const int64_t bytes = vectors * static_cast<int64_t>(sizeof(int64_t));
    for (size_t idx = 0; idx < parts.size(); ++idx) {
        if (parts[idx] == nullptr || part_stats[idx] == nullptr) {
            return argument_error(
                kFunction,
                absl::StrCat(parts[idx] == nullptr ? "parts[" : "part_stats[", idx, "] is null"));
        }
        if (overlaps(parts[idx], out, bytes)) {
            return argument_error(kFunction, absl::StrCat("out overlaps parts[", idx, "]"));
        }
    }
    std::vector<const int64_t*> indices;
    std::vector<const float*> stats;
    size_t done = 0;
    while (done < parts.size()) {
        indices.clear();
        stats.clear();
        if (done > 0) { // out ⊕ the next parts, into out and out_stats
            indices.push_back(static_cast<const int64_t*>(out));
            stats.push_back(out_stats);
        }
        while (done < parts.size() && indices.size() < static_cast<size_t>(kMaxArgMaxParts)) {
            indices.push_back(static_cast<const int64_t*>(parts[done]));
            stats.push_back(part_stats[done]);
            ++done;
        }
        EINSUMMABLE_RETURN_IF_ERROR(cuda_status(
            launch_aggregate_arg_max(indices.data(), stats.data(), static_cast<int>(indices.size()),
                                     static_cast<int64_t*>(out), out_stats, vectors, stream),
            absl::StrCat(kFunction, ": ", parts.size(), " parts of ", vectors, " indices")));
    }
    return absl::OkStatus();
}

absl::Status enqueue_aggregate_top_k(ir::DType dtype, absl::Span<const void* const> parts,
                                     void* out, int64_t rows, int64_t k, cudaStream_t stream) {
    constexpr absl::string_view kFunction = "enqueue_aggregate_top_k";
    if (parts.empty()) {
        return argument_error(kFunction, "parts is empty; at least one part is needed");
    }
    if (dtype != ir::DType::f32 && dtype != ir::DType::f64) {
        return argument_error(kFunction, absl::StrCat("dtype is ", ir::dtype_name(dtype),
                                                      "; the pairs are floating-point, f32 or "
                                                      "f64 (top_k's output)"));
    }
    if (k < 1 || k > kMaxTopK) {
        return argument_error(kFunction, absl::StrCat("k is ", k, "; give 1 to ", kMaxTopK));
    }
    if (rows <= 0) {
        return rows == 0 ? absl::OkStatus()
                         : argument_error(kFunction, absl::StrCat("rows is ", rows));
    }
    if (out == nullptr) {
        return argument_error(kFunction, "out is null");
    }
    const int64_t bytes = rows * 2 * k * ir::dtype_size(dtype);
    for (size_t idx = 0; idx < parts.size(); ++idx) {
        if (parts[idx] == nullptr) {
            return argument_error(kFunction, absl::StrCat("parts[", idx, "] is null"));
        }
        if ((idx > 0 || parts[idx] != out) && overlaps(parts[idx], out, bytes)) {
            return argument_error(kFunction, absl::StrCat("out overlaps parts[", idx, "]",
                                                          idx == 0 ? " without being it" : ""));
        }
    }
    std::vector<const void*> launch_parts;
    size_t done = 0;
    while (done < parts.size()) {
        launch_parts.clear();
        if (done > 0) { // out ⊕ the next parts, into out
            launch_parts.push_back(out);
        }
        while (done < parts.size() && launch_parts.size() < static_cast<size_t>(kMaxTopKParts)) {
            launch_parts.push_back(parts[done]);
            ++done;
        }
        if (launch_parts.size() == 1 && launch_parts[0] == out) {
            break; // one part, merged in place: nothing to do
        }
        EINSUMMABLE_RETURN_IF_ERROR(cuda_status(
            launch_aggregate_top_k(dtype, launch_parts.data(),
                                   static_cast<int>(launch_parts.size()), out, rows, k, stream),
            absl::StrCat(kFunction, ": ", parts.size(), " ", ir::dtype_name(dtype), " parts of ",
                         rows, " rows of ", k, " pairs")));
    }
    return absl::OkStatus();
}

void emulate_aggregate_log_sum_exp(const float* const* parts, const float* const* lse,
                                   int num_parts, float* out, float* out_lse, int64_t vectors,
                                   int64_t width) {
    for (int64_t row = 0; row < vectors; ++row) {
        const double combined = combined_log_sum_exp(lse, num_parts, row);
        for (int64_t col = 0; col < width; ++col) {
            float acc = 0.0f;
            for (int part = 0; part < num_parts; ++part) {
                acc += log_sum_exp_term(log_sum_exp_weight(lse[part][row], combined),
                                        parts[part][row * width + col]);
            }
            out[row * width + col] = acc;
        }
        if (out_lse != nullptr) {
            out_lse[row] = static_cast<float>(combined);
        }
    }
}

absl::Status enqueue_copy_region(const void* src, const ir::Box& src_box, void* dst,
                                 const ir::Box& dst_box, const ir::Box& region,
                                 int64_t element_bytes, cudaStream_t stream) {
    constexpr absl::string_view kFunction = "enqueue_copy_region";
    EINSUMMABLE_RETURN_IF_ERROR(check_element_bytes(kFunction, element_bytes));
    const int rank = region.rank();
    if (rank > kMaxCopyRank) {
        return argument_error(kFunction, absl::StrCat("region ", region.to_string(), " has rank ",
                                                      rank, "; at most ", kMaxCopyRank));
    }
    if (src_box.rank() != rank || dst_box.rank() != rank) {
        return argument_error(kFunction, absl::StrCat("region ", region.to_string(), ", src_box ",
                                                      src_box.to_string(), " and dst_box ",
                                                      dst_box.to_string(), " differ in rank"));
    }
    for (int dim = 0; dim < rank; ++dim) {
        if (region[dim].lower > region[dim].upper) {
            return argument_error(kFunction,
                                  absl::StrCat("region ", region.to_string(),
                                               " has a negative extent in dimension ", dim));
        }
    }
    if (!src_box.contains(region)) {
        return argument_error(kFunction,
                              absl::StrCat("region ", region.to_string(), " is not inside src_box ",
                                           src_box.to_string()));
    }
    if (!dst_box.contains(region)) {
        return argument_error(kFunction,
                              absl::StrCat("region ", region.to_string(), " is not inside dst_box ",
                                           dst_box.to_string()));
    }
    if (region.volume() == 0) {
        return absl::OkStatus();
    }
    if (src == nullptr || dst == nullptr) {
        return argument_error(kFunction, src == nullptr ? "src is null" : "dst is null");
    }
    return run_copy(kFunction, region_copy(src_box, dst_box, region, element_bytes), src, dst,
                    stream);
}

absl::Status enqueue_permute(const void* src, absl::Span<const int64_t> src_dims,
                             absl::Span<const int> perm, int64_t element_bytes, void* dst,
                             cudaStream_t stream) {
    constexpr absl::string_view kFunction = "enqueue_permute";
    EINSUMMABLE_RETURN_IF_ERROR(check_element_bytes(kFunction, element_bytes));
    const auto rank = static_cast<int>(src_dims.size());
    if (rank > kMaxCopyRank) {
        return argument_error(kFunction,
                              absl::StrCat("src_dims has rank ", rank, "; at most ", kMaxCopyRank));
    }
    if (perm.size() != src_dims.size()) {
        return argument_error(kFunction,
                              absl::StrCat("perm [", absl::StrJoin(perm, ","), "] has ",
                                           perm.size(), " entries for src_dims of rank ", rank));
    }
    std::vector<bool> used(static_cast<size_t>(rank), false);
    for (int dim = 0; dim < rank; ++dim) {
        if (perm[dim] < 0 || perm[dim] >= rank || used[static_cast<size_t>(perm[dim])]) {
            return argument_error(kFunction,
                                  absl::StrCat("perm [", absl::StrJoin(perm, ","),
                                               "] is not a permutation of 0..", rank - 1));
        }
        used[static_cast<size_t>(perm[dim])] = true;
    }
    int64_t volume = 1;
    for (int dim = 0; dim < rank; ++dim) {
        if (src_dims[dim] < 0) {
            return argument_error(kFunction,
                                  absl::StrCat("src_dims [", absl::StrJoin(src_dims, ","),
                                               "] has a negative extent"));
        }
        volume *= src_dims[dim];
    }
    if (volume == 0) {
        return absl::OkStatus();
    }
    if (src == nullptr || dst == nullptr) {
        return argument_error(kFunction, src == nullptr ? "src is null" : "dst is null");
    }
    if (overlaps(src, dst, volume * element_bytes)) {
        return argument_error(kFunction, "src and dst overlap");
    }
    return run_copy(kFunction, permute_copy(src_dims.data(), perm.data(), rank, element_bytes), src,
                    dst, stream);
}

} // namespace einsummable::kernels::cuda
