#pragma once

#include <array>
#include <cstddef>
#include <vector>

namespace einsummable::kernels::cpu {

// Thread-local temporaries that only grow, so a kernel allocates nothing per call in steady
// state (kernels.h). Each kernel uses its own slots; a slot's contents do not survive a call
// into another kernel that uses the same slot.
enum class ScratchSlot {
    contraction_lhs,  // packed [batch, m, k] operand
    contraction_rhs,  // packed [batch, k, n] operand
    contraction_out,  // [batch, m, n] result before its permutation into the output
    invariant_a,      // rows of op(A) packed for gemm_invariant
    invariant_b,      // op(B) packed into panels for gemm_invariant
    einsum_line,      // joined values of one inner line before aggregation
    einsum_loops,     // loop extents and strides of the strided einsum loop
    row_stats_a,      // per-column statistics of a strided softmax; rope's cosines
    row_stats_b,      // second statistics array; rope's sines
    attention_query,  // packed query rows of one kv head
    attention_scores, // score tile
    attention_acc,    // running weighted sums of values
    attention_stats,  // running maxima and denominators
    attention_values, // one key tile's weighted values (batch-invariant mode)
    count,
};

// At least `size` elements of type T in this thread's slot; the contents are unspecified.
template <typename T>
T* scratch(ScratchSlot slot, size_t size) {
    thread_local std::array<std::vector<T>, static_cast<size_t>(ScratchSlot::count)> buffers;
    std::vector<T>& buffer = buffers[static_cast<size_t>(slot)];
    if (buffer.size() < size) {
        buffer.resize(size);
    }
    return buffer.data();
}

} // namespace einsummable::kernels::cpu
