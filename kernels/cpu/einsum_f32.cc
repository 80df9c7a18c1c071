// f32 einsum: contractions through gemm (contraction.h), everything else through one
// strided loop over the joined index space whose innermost line is a tight loop specialised for
// the join function and for contiguous or broadcast operands.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/scalar_op.h"
#include "compiler/support/status_macros.h"
#include "kernels/cpu/contraction.h"
#include "kernels/cpu/f32_ops.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cpu {

namespace {

constexpr int kMaxLoops = 64;       // at most 52 distinct index letters
constexpr int64_t kLineChunk = 256; // joined values buffered per aggregation step

// The joined index space as nested loops, outermost first. Operands are the inputs then the
// output; strides are in elements, 0 where an operand does not carry the loop's index.
struct LoopNest {
    int num_loops = 0;
    int num_operands = 0;
    std::array<int64_t, kMaxLoops> extent{};
    int64_t* strides = nullptr; // [operand * kMaxLoops + loop]
    int64_t* offsets = nullptr; // [operand], the odometer's current offsets, then as many spare

    int64_t& stride(int operand, int loop) { return strides[operand * kMaxLoops + loop]; }
    int64_t stride(int operand, int loop) const { return strides[operand * kMaxLoops + loop]; }
};

// Calls visit(offsets) for every combination of the outermost `depth` loops: offsets[operand]
// is where the remaining loops start in each operand.
template <typename Visit>
void for_each_outer(LoopNest& nest, int depth, Visit&& visit) {
    std::array<int64_t, kMaxLoops> counter{};
    std::fill(nest.offsets, nest.offsets + nest.num_operands, 0);
    while (true) {
        visit(static_cast<const int64_t*>(nest.offsets));
        int loop = depth - 1;
        for (; loop >= 0; --loop) {
            for (int operand = 0; operand < nest.num_operands; ++operand) {
                nest.offsets[operand] += nest.stride(operand, loop);
            }
            if (++counter[loop] < nest.extent[loop]) {
                break;
            }
            for (int operand = 0; operand < nest.num_operands; ++operand) {
                nest.offsets[operand] -= nest.stride(operand, loop) * nest.extent[loop];
            }
            counter[loop] = 0;
        }
        if (loop < 0) {
            return;
        }
    }
}

// Calls line(offsets, n) for every innermost line of the nest: offsets[operand] is where the
// line starts in each operand, n its length (strides: those of the innermost loop).
template <typename Line>
void for_each_line(LoopNest& nest, Line&& line) {
    const int64_t length = nest.extent[nest.num_loops - 1];
    for_each_outer(nest, nest.num_loops - 1,
                   [&](const int64_t* offsets) { line(offsets, length); });
}

// Whether the innermost loop strides through some operand that the loop around it walks
// contiguously (a transpose). Lines are then visited in square tiles of the two loops, so the
// cache lines of both layouts are reused.
bool wants_tiles(const LoopNest& nest) {
    if (nest.num_loops < 2) {
        return false;
    }
    const int inner = nest.num_loops - 1;
    for (int operand = 0; operand < nest.num_operands; ++operand) {
        if (nest.stride(operand, inner) > 1 && nest.stride(operand, inner - 1) == 1) {
            return true;
        }
    }
    return false;
}

// Orders the loops so that the ones with the smallest strides (summed over the operands) are
// innermost, then merges neighbours that every operand walks contiguously, so element-wise ops
// over identical layouts become one long line.
void order_and_merge(LoopNest& nest) {
    std::array<int, kMaxLoops> order{};
    std::array<int64_t, kMaxLoops> weight{};
    for (int loop = 0; loop < nest.num_loops; ++loop) {
        order[loop] = loop;
        for (int operand = 0; operand < nest.num_operands; ++operand) {
            weight[loop] += nest.stride(operand, loop);
        }
    }
    std::stable_sort(order.begin(), order.begin() + nest.num_loops,
                     [&](int a, int b) { return weight[a] > weight[b]; });
    std::array<int64_t, kMaxLoops> extent{};
    for (int loop = 0; loop < nest.num_loops; ++loop) {
        extent[loop] = nest.extent[order[loop]];
    }
    nest.extent = extent;
    for (int operand = 0; operand < nest.num_operands; ++operand) {
        std::array<int64_t, kMaxLoops> row{};
        for (int loop = 0; loop < nest.num_loops; ++loop) {
            row[loop] = nest.stride(operand, order[loop]);
        }
        std::copy(row.begin(), row.begin() + nest.num_loops, &nest.stride(operand, 0));
    }

    // Merge loop `outer` into the loop inside it when every operand's stride for `outer` is the
    // inner loop's stride times its extent.
    int merged = nest.num_loops - 1; // index of the current innermost merged loop
    for (int outer = nest.num_loops - 2; outer >= 0; --outer) {
        bool contiguous = true;
        for (int operand = 0; operand < nest.num_operands && contiguous; ++operand) {
            contiguous =
                nest.stride(operand, outer) == nest.stride(operand, merged) * nest.extent[merged];
        }
        if (!contiguous) {
            break;
        }
        nest.extent[merged] *= nest.extent[outer];
        nest.extent[outer] = 1;
    }
    // Drop the loops merged away (extent 1 now), keeping the order.
    int kept = 0;
    for (int loop = 0; loop < nest.num_loops; ++loop) {
        if (nest.extent[loop] == 1 && loop != nest.num_loops - 1) {
            continue;
        }
        nest.extent[kept] = nest.extent[loop];
        for (int operand = 0; operand < nest.num_operands; ++operand) {
            nest.stride(operand, kept) = nest.stride(operand, loop);
        }
        ++kept;
    }
    nest.num_loops = kept;
}

// ---- join functions -------------------------------------------------------------------------

// The exponential of the CPU's exp-based joins: vector_math.h's, which GCC vectorises (libm's
// expf it would call element by element).
struct FastExp {
    float operator()(float x) const { return fast_exp(x); }
};

// Calls body(f) with f the float function of `op` (unary), switching once outside the loops.
// The formulas are the ones the CUDA kernels share (kernels/scalar_math.h).
template <typename Body>
void with_unary(const ir::ScalarOp& op, Body&& body) {
    namespace sm = scalar_math;
    const float c = static_cast<float>(op.constant);
    switch (op.fn) {
    case ir::ScalarFn::neg:
        return body([](float x) { return sm::neg(x); });
    case ir::ScalarFn::abs:
        return body([](float x) { return sm::abs(x); });
    case ir::ScalarFn::relu:
        return body([](float x) { return sm::relu(x); });
    case ir::ScalarFn::gelu:
        return body([](float x) { return sm::gelu(x); });
    case ir::ScalarFn::silu:
        return body([](float x) { return sm::silu(x, FastExp()); });
    case ir::ScalarFn::sigmoid:
        return body([](float x) { return sm::sigmoid(x, FastExp()); });
    case ir::ScalarFn::tanh:
        return body([](float x) { return sm::tanh(x); });
    case ir::ScalarFn::exp:
        return body([](float x) { return sm::exp(x, FastExp()); });
    case ir::ScalarFn::log:
        return body([](float x) { return sm::log(x); });
    case ir::ScalarFn::sqrt:
        return body([](float x) { return sm::sqrt(x); });
    case ir::ScalarFn::rsqrt:
        return body([](float x) { return sm::rsqrt(x); });
    case ir::ScalarFn::square:
        return body([](float x) { return sm::square(x); });
    case ir::ScalarFn::reciprocal:
        return body([](float x) { return sm::reciprocal(x); });
    case ir::ScalarFn::scale:
        return body([c](float x) { return sm::scale(x, c); });
    case ir::ScalarFn::add_scalar:
        return body([c](float x) { return sm::add_scalar(x, c); });
    case ir::ScalarFn::pow_scalar:
        return body([c](float x) { return sm::pow_scalar(x, c); });
    case ir::ScalarFn::leaky_relu:
        return body([c](float x) { return sm::leaky_relu(x, c); });
    default: // identity (binary functions never reach a one-input einsum)
        return body([](float x) { return x; });
    }
}

template <typename Body>
void with_binary(const ir::ScalarOp& op, Body&& body) {
    namespace sm = scalar_math;
    switch (op.fn) {
    case ir::ScalarFn::add:
        return body([](float x, float y) { return sm::add(x, y); });
    case ir::ScalarFn::sub:
        return body([](float x, float y) { return sm::sub(x, y); });
    case ir::ScalarFn::div:
        return body([](float x, float y) { return sm::div(x, y); });
    case ir::ScalarFn::max:
        return body([](float x, float y) { return sm::max(x, y); });
    case ir::ScalarFn::min:
        return body([](float x, float y) { return sm::min(x, y); });
    default: // mul (unary functions never reach a two-input einsum)
        return body([](float x, float y) { return sm::mul(x, y); });
    }
}

// ---- line kernels ---------------------------------------------------------------------------

template <typename F>
void unary_line(F f, const float* x, int64_t sx, float* y, int64_t sy, int64_t n) {
    if (sx == 1 && sy == 1) {
        for (int64_t t = 0; t < n; ++t) {
            y[t] = f(x[t]);
        }
    } else if (sx == 0 && sy == 1) {
        std::fill(y, y + n, f(x[0]));
    } else {
        for (int64_t t = 0; t < n; ++t) {
            y[t * sy] = f(x[t * sx]);
        }
    }
}

template <typename F>
void binary_line(F f, const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t sy,
                 int64_t n) {
    if (sy == 1 && sa == 1 && sb == 1) {
        for (int64_t t = 0; t < n; ++t) {
            y[t] = f(a[t], b[t]);
        }
    } else if (sy == 1 && sa == 1 && sb == 0) {
        const float bv = b[0];
        for (int64_t t = 0; t < n; ++t) {
            y[t] = f(a[t], bv);
        }
    } else if (sy == 1 && sa == 0 && sb == 1) {
        const float av = a[0];
        for (int64_t t = 0; t < n; ++t) {
            y[t] = f(av, b[t]);
        }
    } else {
        for (int64_t t = 0; t < n; ++t) {
            y[t * sy] = f(a[t * sa], b[t * sb]);
        }
    }
}

// y[t·sy] = x0[t] · x1[t] · ... from `start` on along the innermost loop, multiplied in operand
// order as the reference does.
void product_line(absl::Span<const float* const> inputs, const LoopNest& nest,
                  const int64_t* offsets, int64_t start, float* y, int64_t sy, int64_t n) {
    const int inner = nest.num_loops - 1;
    for (size_t input_idx = 0; input_idx < inputs.size(); ++input_idx) {
        const int64_t sx = nest.stride(static_cast<int>(input_idx), inner);
        const float* x = inputs[input_idx] + offsets[input_idx] + start * sx;
        if (input_idx == 0) {
            for (int64_t t = 0; t < n; ++t) {
                y[t * sy] = x[t * sx];
            }
        } else {
            for (int64_t t = 0; t < n; ++t) {
                y[t * sy] *= x[t * sx];
            }
        }
    }
}

// ---- aggregation ----------------------------------------------------------------------------

// any_order: whether the ⊕ gives the same value in any order (max and min, which give NaN when
// any value is NaN; not sum, whose rounding follows the order).
struct SumAgg {
    static constexpr float identity = 0.0f;
    static constexpr bool any_order = false;
    float operator()(float a, float b) const { return a + b; }
};
struct MaxAgg {
    static constexpr float identity = -std::numeric_limits<float>::infinity();
    static constexpr bool any_order = true;
    float operator()(float a, float b) const { return scalar_math::max(a, b); }
};
struct MinAgg {
    static constexpr float identity = std::numeric_limits<float>::infinity();
    static constexpr bool any_order = true;
    float operator()(float a, float b) const { return scalar_math::min(a, b); }
};

template <typename Body>
void with_agg(ir::AggOp agg, Body&& body) {
    switch (agg) {
    case ir::AggOp::max:
        return body(MaxAgg{});
    case ir::AggOp::min:
        return body(MinAgg{});
    default:
        return body(SumAgg{});
    }
}

// ⊕ of values[0, n). Sum adds in order, as the reference does; max and min fold in independent
// lanes, which vectorise where one running value is a chain of NaN-keeping compare-and-selects.
template <typename Agg>
float fold_line(Agg agg, const float* values, int64_t n) {
    float folded = Agg::identity;
    int64_t t = 0;
    if constexpr (Agg::any_order) {
        float lanes[kReductionLanes];
        std::fill(lanes, lanes + kReductionLanes, Agg::identity);
        for (; t + kReductionLanes <= n; t += kReductionLanes) {
            for (int lane = 0; lane < kReductionLanes; ++lane) {
                lanes[lane] = agg(lanes[lane], values[t + lane]);
            }
        }
        for (float lane : lanes) {
            folded = agg(folded, lane);
        }
    }
    for (; t < n; ++t) {
        folded = agg(folded, values[t]);
    }
    return folded;
}

// y[t·sy] = y[t·sy] ⊕ values[t]; with sy == 0 the line folds into one element.
template <typename Agg>
void combine_line(Agg agg, const float* values, float* y, int64_t sy, int64_t n) {
    if (sy == 0) {
        y[0] = agg(y[0], fold_line(agg, values, n));
    } else if (sy == 1) {
        for (int64_t t = 0; t < n; ++t) {
            y[t] = agg(y[t], values[t]);
        }
    } else {
        for (int64_t t = 0; t < n; ++t) {
            y[t * sy] = agg(y[t * sy], values[t]);
        }
    }
}

// Writes the joined values of one line (offsets from the nest) into y with stride sy.
template <typename JoinLine>
void run_lines(LoopNest& nest, bool reduces, ir::AggOp agg, float* output, int64_t output_size,
               JoinLine&& join_line) {
    const int out_operand = nest.num_operands - 1;
    const int inner = nest.num_loops - 1;
    const int64_t sy = nest.stride(out_operand, inner);
    if (!reduces && wants_tiles(nest)) {
        constexpr int64_t kTile = 32;
        const int64_t rows = nest.extent[inner - 1];
        const int64_t cols = nest.extent[inner];
        int64_t* shifted = nest.offsets + nest.num_operands;
        for_each_outer(nest, nest.num_loops - 2, [&](const int64_t* offsets) {
            for (int64_t row_begin = 0; row_begin < rows; row_begin += kTile) {
                const int64_t row_end = std::min(rows, row_begin + kTile);
                for (int64_t col_begin = 0; col_begin < cols; col_begin += kTile) {
                    const int64_t n = std::min(kTile, cols - col_begin);
                    for (int64_t row = row_begin; row < row_end; ++row) {
                        for (int operand = 0; operand < nest.num_operands; ++operand) {
                            shifted[operand] =
                                offsets[operand] + row * nest.stride(operand, inner - 1);
                        }
                        join_line(static_cast<const int64_t*>(shifted), col_begin,
                                  output + shifted[out_operand] + col_begin * sy, sy, n);
                    }
                }
            }
        });
        return;
    }
    if (!reduces) {
        for_each_line(nest, [&](const int64_t* offsets, int64_t n) {
            join_line(offsets, 0, output + offsets[out_operand], sy, n);
        });
        return;
    }
    float* line = scratch<float>(ScratchSlot::einsum_line, kLineChunk);
    with_agg(agg, [&](auto agg_fn) {
        using Agg = decltype(agg_fn);
        std::fill(output, output + output_size, Agg::identity);
        for_each_line(nest, [&](const int64_t* offsets, int64_t n) {
            for (int64_t start = 0; start < n; start += kLineChunk) {
                const int64_t chunk = std::min(kLineChunk, n - start);
                join_line(offsets, start, line, 1, chunk);
                combine_line(agg_fn, line, output + offsets[out_operand] + start * sy, sy, chunk);
            }
        });
    });
}

void run_strided(const ir::Einsum& einsum, const IndexExtents& extents,
                 absl::Span<const float* const> inputs, float* output, int64_t output_size) {
    const std::string& out_term = einsum.output_term();
    // Output letters first, then the reduced ones (the reference's loop order).
    std::array<char, kMaxLoops> letters{};
    int num_letters = 0;
    for (char c : out_term) {
        letters[num_letters++] = c;
    }
    for (char c : einsum.indices()) {
        if (out_term.find(c) == std::string::npos) {
            letters[num_letters++] = c;
        }
    }
    for (int idx = 0; idx < num_letters; ++idx) {
        if (extents[static_cast<unsigned char>(letters[idx])] == 0) {
            std::fill(output, output + output_size, 0.0f); // the aggregate over no points
            return;
        }
    }

    LoopNest nest;
    nest.num_operands = static_cast<int>(inputs.size()) + 1;
    // Strides, then the odometer's offsets and the tiles' shifted offsets (kMaxLoops + 2 rows).
    int64_t* table = scratch<int64_t>(ScratchSlot::einsum_loops,
                                      static_cast<size_t>(nest.num_operands) * (kMaxLoops + 2));
    nest.strides = table;
    nest.offsets = table + static_cast<size_t>(nest.num_operands) * kMaxLoops;
    std::fill(nest.strides, nest.offsets, 0);
    // Row-major strides of each letter in each operand.
    std::array<int64_t, 128> letter_stride{};
    auto term_strides = [&](const std::string& term) {
        letter_stride.fill(0);
        int64_t stride = 1;
        for (int dim = static_cast<int>(term.size()) - 1; dim >= 0; --dim) {
            letter_stride[static_cast<unsigned char>(term[dim])] = stride;
            stride *= extents[static_cast<unsigned char>(term[dim])];
        }
    };
    // Loops of extent 1 change nothing and are left out (a single point keeps one loop).
    std::array<char, kMaxLoops> loop_letter{};
    for (int idx = 0; idx < num_letters; ++idx) {
        const int64_t extent = extents[static_cast<unsigned char>(letters[idx])];
        if (extent > 1) {
            loop_letter[nest.num_loops] = letters[idx];
            nest.extent[nest.num_loops++] = extent;
        }
    }
    if (nest.num_loops == 0) {
        nest.extent[nest.num_loops++] = 1;
    }
    for (int operand = 0; operand < nest.num_operands; ++operand) {
        const std::string& term = operand + 1 == nest.num_operands
                                      ? out_term
                                      : einsum.input_terms()[static_cast<size_t>(operand)];
        term_strides(term);
        for (int loop = 0; loop < nest.num_loops; ++loop) {
            nest.stride(operand, loop) =
                nest.extent[loop] > 1 ? letter_stride[static_cast<unsigned char>(loop_letter[loop])]
                                      : 0;
        }
    }
    // A reduction is a loop the output does not advance along.
    const int out_operand = nest.num_operands - 1;
    bool reduces = false;
    for (int loop = 0; loop < nest.num_loops; ++loop) {
        reduces = reduces || (nest.extent[loop] > 1 && nest.stride(out_operand, loop) == 0);
    }
    order_and_merge(nest);
    const int inner = nest.num_loops - 1;

    if (inputs.size() == 1) {
        const int64_t sx = nest.stride(0, inner);
        with_unary(einsum.join(), [&](auto f) {
            run_lines(nest, reduces, einsum.agg(), output, output_size,
                      [&](const int64_t* offsets, int64_t start, float* y, int64_t sy, int64_t n) {
                          unary_line(f, inputs[0] + offsets[0] + start * sx, sx, y, sy, n);
                      });
        });
    } else if (inputs.size() == 2) {
        const int64_t sa = nest.stride(0, inner);
        const int64_t sb = nest.stride(1, inner);
        with_binary(einsum.join(), [&](auto f) {
            run_lines(nest, reduces, einsum.agg(), output, output_size,
                      [&](const int64_t* offsets, int64_t start, float* y, int64_t sy, int64_t n) {
                          binary_line(f, inputs[0] + offsets[0] + start * sa, sa,
                                      inputs[1] + offsets[1] + start * sb, sb, y, sy, n);
                      });
        });
    } else {
        // Three or more operands: only mul (Einsum::make).
        run_lines(nest, reduces, einsum.agg(), output, output_size,
                  [&](const int64_t* offsets, int64_t start, float* y, int64_t sy, int64_t n) {
                      product_line(inputs, nest, offsets, start, y, sy, n);
                  });
    }
}

absl::Status run_einsum_f32(const ir::Einsum& op, const ir::FunctionSpec& function,
                            F32Inputs inputs, F32Outputs outputs) {
    float* output = outputs[0];
    // Every index has one extent across the operands (the loops rely on it).
    EINSUMMABLE_ASSIGN_OR_RETURN(const IndexExtents extents, checked_index_extents(op, function));
    const int64_t output_size = function.outputs[0].volume();
    if (std::optional<ContractionPlan> plan = plan_contraction(op);
        plan && fits_gemm(*plan, extents)) {
        return run_contraction<float>(*plan, op, extents, inputs[0], inputs[1], output);
    }
    run_strided(op, extents, inputs, output, output_size);
    return absl::OkStatus();
}

[[maybe_unused]] const bool kRegistered = register_cpu_kernel<ir::Einsum>(&run_einsum_f32);

} // namespace
} // namespace einsummable::kernels::cpu
