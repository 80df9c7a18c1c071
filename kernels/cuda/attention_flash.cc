// prepare_flash_attention (attention_flash.h): checks the blocks as kernels/cpu/attention_f32.cc
// does, cuts the query block's rows into work items that never cross a sequence end, each with
// the keys of the key block it attends to (flash_work_items), picks the
// largest tiles that fit the device's shared memory, and uploads the work list; enqueue() only
// launches (attention_flash.cu). Paged attention's items cover each sequence's places, which the
// kernel maps to pool rows through the page table (input 4) at run time. Not registered:
// attention.cc tries cuDNN first and falls back to this. Tests:
// tests/unit/kernels/cuda_rowwise_attention_test.cc.

#include "kernels/cuda/attention_flash.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/attention_flash_launch.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_table.h"

namespace einsummable::kernels::cuda {
namespace {

// Query rows per CTA and keys per tile, largest first: the first pair whose shared memory
// fits the device is taken.
constexpr std::pair<int, int> kTiles[] = {{64, 64}, {64, 32}, {32, 32}, {32, 16},
                                          {16, 16}, {16, 8},  {8, 8}};

class FlashAttentionKernel final : public PreparedKernel {
public:
    FlashAttentionKernel(std::string op, std::string description, ir::DType dtype,
                         FlashAttentionArgs args, DeviceTable items, bool stats)
        : operator_(std::move(op)), description_(std::move(description)), dtype_(dtype),
          args_(args), items_(std::move(items)), stats_(stats) {
        args_.items = items_.as<FlashWorkItem>();
    }

    int64_t scratch_bytes() const override { return 0; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        const size_t inputs = args_.page_table_bytes > 0 ? 5 : args_.key_lengths_bytes > 0 ? 4 : 3;
        if (launch.inputs.size() != inputs || launch.outputs.size() != 1) {
            return absl::InvalidArgumentError(
                absl::StrCat(operator_, ": ", description_, " takes ", inputs,
                             " inputs and 1 output, the "
                             "launch has ",
                             launch.inputs.size(), " and ", launch.outputs.size()));
        }
        FlashAttentionArgs args = args_;
        args.q = launch.inputs[0];
        args.k = launch.inputs[1];
        args.v = launch.inputs[2];
        args.key_lengths = inputs >= 4 ? launch.inputs[3] : nullptr;
        args.page_table = inputs == 5 ? launch.inputs[4] : nullptr;
        args.out = launch.outputs[0];
        if (stats_) {
            if (launch.output_stats.empty() || launch.output_stats[0] == nullptr) {
                return absl::InvalidArgumentError(
                    absl::StrCat(operator_, ": ", description_,
                                 " writes a partial result; the launch gives no statistics"));
            }
            args.lse = static_cast<float*>(launch.output_stats[0]);
        }
        return cuda_status(launch_flash_attention(dtype_, args, launch.stream),
                           absl::StrCat(operator_, ": ", description_));
    }

    std::string describe() const override { return description_; }

private:
    std::string operator_;
    std::string description_;
    ir::DType dtype_;
    FlashAttentionArgs args_;
    DeviceTable items_;
    bool stats_;
};

// The attribute `scale` as Attention::make normalised it (always present).
double scale_attribute(const ir::Attention& op, int64_t head_dim) {
    const auto& values = op.attributes().values();
    if (auto it = values.find("scale"); it != values.end()) {
        if (const double* scale = std::get_if<double>(&it->second)) {
            return *scale;
        }
        if (const int64_t* int_scale = std::get_if<int64_t>(&it->second)) {
            return static_cast<double>(*int_scale);
        }
    }
    return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

} // namespace

absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_flash_attention(const KernelRequest& request) {
    if (request.op == nullptr || request.function == nullptr || request.libraries == nullptr) {
        return absl::InvalidArgumentError("prepare_flash_attention needs an operator, a function "
                                          "spec and the device's libraries");
    }
    const auto* op = dynamic_cast<const ir::Attention*>(request.op);
    if (op == nullptr) {
        return request_error(*request.op, "the flash attention kernel takes attention only");
    }
    const ir::FunctionSpec& function = *request.function;
    const size_t inputs = op->input_types().size();
    if (function.inputs.size() != inputs || function.outputs.size() != 1 ||
        request.input_dtypes.size() != inputs || request.output_dtypes.size() != 1) {
        return request_error(*op, absl::StrCat("flash attention needs ", inputs,
                                               " input and 1 output blocks and dtypes"));
    }
    if (inputs >= 4 && !ir::is_integer(request.input_dtypes[3])) {
        return request_error(*op, "flash attention reads key_lengths as i32 or i64");
    }
    if (inputs == 5 && !ir::is_integer(request.input_dtypes[4])) {
        return request_error(*op, "flash attention reads page_table as i32 or i64");
    }
    const ir::DType dtype = request.input_dtypes[0];
    for (ir::DType other :
         {request.input_dtypes[1], request.input_dtypes[2], request.output_dtypes[0]}) {
        if (other != dtype) {
            return request_error(
                *op,
                absl::StrCat("flash attention needs q, k, v and the output in one dtype; q "
                             "is ",
                             ir::dtype_name(dtype), ", another block ", ir::dtype_name(other)));
        }
    }
    const ir::Box& q = function.inputs[0];
    const ir::Box& k = function.inputs[1];
    const ir::Box& v = function.inputs[2];
    const ir::Box& out = function.outputs[0];
    const int64_t group = op->group_size();
    if (!op->has_spec_layout(function)) {
        return request_error(*op, absl::StrCat("blocks q ", q.to_string(), ", k ", k.to_string(),
                                               ", v ", v.to_string(), " -> ", out.to_string(),
                                               " are not a function spec of this attention"));
    }
    const ir::Interval rows = q[0];
    const ir::Interval keys = k[0];
    const int64_t heads_q = q[1].size();
    const int64_t head_dim = q[2].size();
    const int64_t value_dim = v[2].size();
    constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max();
    // Positions in key rows (a work item's position_base plus its fill) fit in int32 too, and
    // so do a paged sequence's places.
    const int64_t capacity = op->pages_per_sequence() * op->page_size();
    if (rows.size() > kMaxRows || keys.size() > kMaxRows ||
        std::abs(rows.lower - keys.lower) > kMaxRows / 4 ||
        op->input_types()[1].dims[0].size > kMaxRows / 4 || capacity > kMaxRows / 4 ||
        op->input_types()[0].dims[0].size > kMaxRows / 4 || heads_q > kFlashMaxHeads ||
        head_dim > std::numeric_limits<int32_t>::max() ||
        value_dim > std::numeric_limits<int32_t>::max()) {
        return request_error(*op, absl::StrCat("block ", q.to_string(), " -> ", out.to_string(),
                                               " with keys ", k.to_string(),
                                               " is too large for the flash attention kernel "
                                               "(at most 2^31 - 1 rows and ",
                                               kFlashMaxHeads, " query heads)"));
    }

    int max_shared = 0;
    EINSUMMABLE_RETURN_IF_ERROR(cuda_status(
        cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               request.libraries->physical_device()),
        absl::StrCat(op->describe(), ": cudaDeviceGetAttribute(shared memory per block)")));
    int block_m = 0;
    int block_n = 0;
    for (const auto& [m, n] : kTiles) {
        if (flash_shared_bytes(dtype, m, n, static_cast<int>(head_dim), static_cast<int>(value_dim),
                               op->has_pages()) <= max_shared) {
            block_m = m;
            block_n = n;
            break;
        }
    }
    if (block_m == 0) {
        return request_error(
            *op, absl::StrCat("head dimensions ", head_dim, " and ", value_dim, " in ",
                              ir::dtype_name(dtype), " need more than the device's ", max_shared,
                              " bytes of shared memory per block in the flash attention kernel"));
    }
    // The attribute is a cap shared by every kernel of this dtype on the device: raising it to
    // the device's limit, not to this kernel's need, keeps a later, smaller kernel from lowering
    // it under one prepared earlier.
    EINSUMMABLE_RETURN_IF_ERROR(
        cuda_status(configure_flash_attention(dtype, max_shared),
                    absl::StrCat(op->describe(), ": cudaFuncSetAttribute(", max_shared,
                                 " bytes of dynamic shared memory)")));

    const std::vector<FlashWorkItem> items = flash_work_items(*op, function, block_m);
    EINSUMMABLE_ASSIGN_OR_RETURN(
        DeviceTable table,
        DeviceTable::upload(items.data(), items.size() * sizeof(FlashWorkItem),
                            absl::StrCat(op->describe(), ": flash attention work list")));

    FlashAttentionArgs args;
    args.num_items = static_cast<int64_t>(items.size());
    args.heads_q = static_cast<int>(heads_q);
    args.group = static_cast<int>(group);
    args.head_dim = static_cast<int>(head_dim);
    args.value_dim = static_cast<int>(value_dim);
    args.scale = scale_attribute(*op, head_dim);
    args.causal = op->causal();
    args.key_lengths_bytes =
        inputs >= 4 ? static_cast<int>(ir::dtype_size(request.input_dtypes[3])) : 0;
    if (op->has_pages()) {
        args.page_table_bytes = static_cast<int>(ir::dtype_size(request.input_dtypes[4]));
        args.page_size = static_cast<int>(op->page_size());
        args.pages_per_sequence = static_cast<int>(op->pages_per_sequence());
        args.key_block_begin = keys.lower;
        args.key_block_rows = keys.size();
    }
    args.block_m = block_m;
    args.block_n = block_n;
    const bool stats = request.stats_for(0);
    std::string description = absl::StrCat(
        "cuda flash attention ", ir::dtype_name(dtype), " rows=", rows.size(),
        keys == rows ? "" : absl::StrCat(" keys=", keys.to_string()),
        op->has_pages() ? absl::StrCat(" pages of ", op->page_size()) : "", stats ? " partial" : "",
        " heads_q=", heads_q, " group=", group, " d=", head_dim, " d_v=", value_dim,
        op->causal() ? " causal" : "", " tiles=", block_m, "x", block_n, " items=", items.size());
    return std::make_unique<FlashAttentionKernel>(op->describe(), std::move(description), dtype,
                                                  args, std::move(table), stats);
}

std::vector<FlashWorkItem> flash_work_items(const ir::Attention& op,
                                            const ir::FunctionSpec& function, int block_m) {
    // Segments: the parts of packed sequences inside the query block's rows, each attending to
    // the keys of its own sequence that the key block holds (as the CPU kernel does), cut into
    // tiles of block_m; a causal tile's keys end after its last query.
    const ir::Interval rows = function.inputs[0][0];
    const ir::Interval keys = function.inputs[1][0];
    std::vector<FlashWorkItem> items;
    if (function.outputs[0].volume() == 0) {
        return items;
    }
    const std::vector<int64_t>& query_ends = op.sequence_ends();
    for (const ir::Attention::Segment& segment : op.segments(rows)) {
        // The segment's sequence: its index, region capacity, and where its keys and queries
        // end in block rows (the kernel ends the keys at the run-time fill).
        const auto sequence = static_cast<int32_t>(segment.sequence);
        const int64_t query_end = query_ends[sequence];
        const int64_t capacity = segment.key_end - segment.key_begin;
        if (op.has_pages()) {
            // Any place of the sequence may lie in the key block (the page table says at run
            // time), so a tile's keys are its sequence's places, counted from 0, up to its last
            // query's when causal; none where the block holds no row.
            for (int64_t tile = segment.queries.lower; tile < segment.queries.upper;
                 tile += block_m) {
                const int64_t tile_end = std::min<int64_t>(tile + block_m, segment.queries.upper);
                const ir::Interval places =
                    keys.empty() ? ir::Interval{segment.key_begin, segment.key_begin}
                                 : segment.keys_of(tile_end - 1, op.causal(),
                                                   {segment.key_begin, segment.key_end});
                items.push_back({static_cast<int32_t>(tile - rows.lower),
                                 static_cast<int32_t>(tile_end - rows.lower),
                                 static_cast<int32_t>(places.lower - segment.key_begin),
                                 static_cast<int32_t>(places.upper - segment.key_begin), sequence,
                                 static_cast<int32_t>(capacity), 0,
                                 static_cast<int32_t>(rows.lower - query_end)});
            }
            continue;
        }
        for (int64_t tile = segment.queries.lower; tile < segment.queries.upper; tile += block_m) {
            const int64_t tile_end = std::min<int64_t>(tile + block_m, segment.queries.upper);
            const ir::Interval tile_keys = segment.keys_of(tile_end - 1, op.causal(), keys);
            items.push_back(
                {static_cast<int32_t>(tile - rows.lower),
                 static_cast<int32_t>(tile_end - rows.lower),
                 static_cast<int32_t>(tile_keys.lower - keys.lower),
                 static_cast<int32_t>(tile_keys.upper - keys.lower), sequence,
                 static_cast<int32_t>(capacity),
                 static_cast<int32_t>(segment.key_begin - keys.lower),
                 static_cast<int32_t>(rows.lower - keys.lower + segment.key_begin - query_end)});
        }
    }
    return items;
}

} // namespace einsummable::kernels::cuda
