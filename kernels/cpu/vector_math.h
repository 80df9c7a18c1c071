#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace einsummable::kernels::cpu {

// exp(x) in float without a libm call, so loops over it vectorise (softmax, attention, silu,
// sigmoid and exp joins spend most of their time here). Cody–Waite range reduction
// x = n·ln2 + r with |r| <= ln2/2 and Cephes' degree-6 polynomial for exp(r); 2^n is applied as
// two normal powers of two, so results underflow through the subnormals to 0 and overflow to
// +inf as std::exp's do, and NaN stays NaN. Within a few ulp of std::exp
// (tests/unit/kernels/cpu_f32_kernels_test.cc). Only two clamps, no branches: with
// -fno-trapping-math (kernels/cpu/CMakeLists.txt) GCC vectorises loops that call it.
inline float fast_exp(float x) {
    constexpr float kLog2e = 1.44269504088896341f;
    constexpr float kLn2Hi = 0.693359375f; // ln 2 split so n·kLn2Hi is exact
    constexpr float kLn2Lo = -2.12194440e-4f;
    constexpr float kShifter = 12582912.0f; // 1.5·2^23: adding it rounds to an integer
    // exp(89) overflows and exp(-110) underflows to 0 through this path, so clamping there
    // changes no result but keeps n within [-159, 128]. Comparisons with NaN are false, so
    // NaN passes through.
    x = x > 89.0f ? 89.0f : x;
    x = x < -110.0f ? -110.0f : x;
    const float shifted = x * kLog2e + kShifter;
    const float n = shifted - kShifter;
    // n as an integer: the low mantissa bits of `shifted` (two's complement).
    const auto n_int =
        static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kShifter));
    float r = x - n * kLn2Hi;
    r = r - n * kLn2Lo;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t half = n_int >> 1;
    const float scale_a = std::bit_cast<float>(static_cast<uint32_t>(half + 127) << 23);
    const float scale_b = std::bit_cast<float>(static_cast<uint32_t>(n_int - half + 127) << 23);
    return p * scale_a * scale_b;
}

// Row reductions in independent lanes, so they vectorise without reassociating a single
// running value (which the compiler may not do for floating point).
constexpr int kReductionLanes = 8;

// The largest of x[0, n); -inf when n == 0. NaN values are skipped (one compare and select per
// element; keeping NaN took 1.6x the time of a causal attention and 1.15x a softmax's): softmax
// and attention see a NaN through the sum of exp(x - max) instead, and attention checks the one
// case that sum misses, a maximum of -inf (attention_f32.cc).
inline float max_of(const float* x, int64_t n) {
    float lanes[kReductionLanes];
    std::fill(lanes, lanes + kReductionLanes, -std::numeric_limits<float>::infinity());
    int64_t t = 0;
    for (; t + kReductionLanes <= n; t += kReductionLanes) {
        for (int lane = 0; lane < kReductionLanes; ++lane) {
            lanes[lane] = x[t + lane] > lanes[lane] ? x[t + lane] : lanes[lane];
        }
    }
    float max = -std::numeric_limits<float>::infinity();
    for (float lane : lanes) {
        max = std::max(max, lane);
    }
    for (; t < n; ++t) {
        max = std::max(max, x[t]);
    }
    return max;
}

// Whether every one of x[0, n) is finite: x - x is 0 for finite x and NaN for ±inf and NaN,
// and NaN sticks in a sum (no branch per element, so the loop vectorises).
inline bool all_finite(const float* x, int64_t n) {
    float lanes[kReductionLanes] = {};
    int64_t t = 0;
    for (; t + kReductionLanes <= n; t += kReductionLanes) {
        for (int lane = 0; lane < kReductionLanes; ++lane) {
            lanes[lane] += x[t + lane] - x[t + lane];
        }
    }
    float sum = 0.0f;
    for (float lane : lanes) {
        sum += lane;
    }
    for (; t < n; ++t) {
        sum += x[t] - x[t];
    }
    return sum == 0.0f;
}

// sum over t < n of f(x[t]), accumulated in double.
template <typename F>
double sum_of(const float* x, int64_t n, F f) {
    double lanes[kReductionLanes] = {};
    int64_t t = 0;
    for (; t + kReductionLanes <= n; t += kReductionLanes) {
        for (int lane = 0; lane < kReductionLanes; ++lane) {
            lanes[lane] += f(static_cast<double>(x[t + lane]));
        }
    }
    double sum = 0.0;
    for (double lane : lanes) {
        sum += lane;
    }
    for (; t < n; ++t) {
        sum += f(static_cast<double>(x[t]));
    }
    return sum;
}

inline double sum_of(const float* x, int64_t n) {
    return sum_of(x, n, [](double value) { return value; });
}

} // namespace einsummable::kernels::cpu
