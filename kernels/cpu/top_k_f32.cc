// The f32 kernel of top_k, matching ir::TopK's reference (compiler/ir/ops/top_k.cc): per row of
// the block, its k best (value, absolute index) pairs, best first by argmax's rule (larger, NaN
// larger than any number, ties to the smaller index), padded with (-inf, vocab) where the block
// holds fewer than k columns. A heap of the k best so far, its root the worst of them: one
// comparison per element that does not enter it, O(width · log k) at worst.

#include <algorithm>
#include <limits>
#include <vector>

#include "compiler/ir/ops/top_k.h"
#include "kernels/cpu/f32_ops.h"
#include "kernels/cpu/kernels.h"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cpu {

namespace {

struct Pair {
    float value;
    int64_t index;
};

bool better(const Pair& a, const Pair& b) {
    return scalar_math::arg_max_wins(a.value, a.index, b.value, b.index);
}

absl::Status run_top_k_f32(const ir::TopK& op, const ir::FunctionSpec& function, F32Inputs inputs,
                           F32Outputs outputs) {
    if (absl::Status status = op.check_blocks_line_up(function); !status.ok()) {
        return block_error(op, status.message());
    }
    const ir::Box& x = function.inputs[0];
    const int last = x.rank() - 1;
    const int64_t width = x[last].size();
    const int64_t first = x[last].lower;
    const int64_t k = op.k();
    const int64_t rows = function.outputs[0].volume() / (2 * k);
    thread_local std::vector<Pair> heap;
    for (int64_t row = 0; row < rows; ++row) {
        const float* values = inputs[0] + row * width;
        heap.clear();
        // The heap's order puts the worst kept pair at its root.
        for (int64_t idx = 0; idx < width; ++idx) {
            const Pair candidate{values[idx], first + idx};
            if (static_cast<int64_t>(heap.size()) < k) {
                heap.push_back(candidate);
                std::push_heap(heap.begin(), heap.end(), better);
            } else if (better(candidate, heap.front())) {
                std::pop_heap(heap.begin(), heap.end(), better);
                heap.back() = candidate;
                std::push_heap(heap.begin(), heap.end(), better);
            }
        }
        std::sort_heap(heap.begin(), heap.end(), better); // best first
        float* out = outputs[0] + row * 2 * k;
        for (int64_t slot = 0; slot < k; ++slot) {
            const bool real = slot < static_cast<int64_t>(heap.size());
            out[2 * slot] = real ? heap[slot].value : -std::numeric_limits<float>::infinity();
            out[2 * slot + 1] = static_cast<float>(real ? heap[slot].index : op.vocab());
        }
    }
    return absl::OkStatus();
}

[[maybe_unused]] const bool kRegistered = register_cpu_kernel<ir::TopK>(&run_top_k_f32);

} // namespace

void aggregate_top_k_f32(absl::Span<const float* const> parts, float* out, int64_t rows,
                         int64_t k) {
    if (parts.empty()) {
        return;
    }
    const int64_t n = rows * 2 * k;
    std::copy(parts[0], parts[0] + n, out);
    thread_local std::vector<float> merged;
    merged.resize(static_cast<size_t>(2 * k));
    for (size_t part = 1; part < parts.size(); ++part) {
        for (int64_t row = 0; row < rows; ++row) {
            float* a = out + row * 2 * k;
            const float* b = parts[part] + row * 2 * k;
            int64_t ia = 0;
            int64_t ib = 0;
            for (int64_t slot = 0; slot < k; ++slot) {
                const bool take_b =
                    scalar_math::arg_max_wins(b[2 * ib], b[2 * ib + 1], a[2 * ia], a[2 * ia + 1]);
                const float* pick = take_b ? b + 2 * ib++ : a + 2 * ia++;
                merged[2 * slot] = pick[0];
                merged[2 * slot + 1] = pick[1];
            }
            std::copy(merged.begin(), merged.end(), a);
        }
    }
}

} // namespace einsummable::kernels::cpu
