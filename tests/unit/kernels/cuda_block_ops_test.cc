// The CUDA block operations (kernels/cuda/block_ops.h) against their host counterparts: aggregate
// against kernels::cpu::aggregate_f32 bit for bit in f16, bf16 and f32 (both compute in f32 in
// part order) and against the same folds in double in f64 (computed in f64), region copies
// against ir::copy_region and permutations against an index-by-index host permute, on seeded
// random shapes of rank 1 to 6 in every element size, with aligned and misaligned pointers; the
// log-sum-exp and arg-max combines against the CPU backend's, and the top-k merge against
// ir::merge_top_k folded over its parts. GPU tests skip without a GPU. The copy plans also run
// anywhere through the copy kernel's own per-element code on the host (emulate_strided_copy), and
// so do the argument checks, which fail before any CUDA call. Replay a failure with the
// EINSUMMABLE_TEST_SEED that seed_for prints.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/dense_block.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/partial_block.h"
#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/argmax_launch.h"
#include "kernels/cuda/block_ops.h"
#include "kernels/cuda/block_ops_launch.h"
#include "kernels/cuda/top_k_launch.h"
#include "tests/unit/ir/random_cases.h"
#include "tests/unit/kernels/cuda_kernel_harness.h"

namespace einsummable::kernels::cuda {
namespace {

namespace harness = ::einsummable::kernels::cuda::testing;

using ir::Box;
using ir::DType;
using ir::Interval;

const std::vector<DType> kDTypes = {DType::f16, DType::bf16, DType::f32, DType::f64};

using ::einsummable::kernels::cuda::testing::seed_for;

int64_t uniform(std::mt19937_64& rng, int64_t low, int64_t high) { // inclusive
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
}

// One device allocation, freed on destruction; `slack` spare bytes after `bytes` so that a
// pointer can start misaligned inside it.
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes) {
        const cudaError_t error = cudaMalloc(&data_, bytes + 64);
        EXPECT_EQ(error, cudaSuccess) << "cudaMalloc: " << cudaGetErrorString(error);
        if (error != cudaSuccess) {
            data_ = nullptr;
        }
    }
    ~DeviceBuffer() {
        if (data_ != nullptr) {
            cudaFree(data_);
        }
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    std::byte* at(size_t offset) const { return static_cast<std::byte*>(data_) + offset; }

private:
    void* data_ = nullptr;
};

void upload(std::byte* device, const std::vector<std::byte>& host) {
    ASSERT_EQ(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

std::vector<std::byte> download(const std::byte* device, size_t bytes) {
    std::vector<std::byte> host(bytes);
    EXPECT_EQ(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
}

std::vector<std::byte> random_bytes(std::mt19937_64& rng, size_t count) {
    std::vector<std::byte> bytes(count);
    for (std::byte& byte : bytes) {
        byte = static_cast<std::byte>(uniform(rng, 0, 255));
    }
    return bytes;
}

// Runs `enqueue` on a fresh stream and waits for it.
template <typename Enqueue>
absl::Status run_on_stream(Enqueue&& enqueue) {
    cudaStream_t stream = nullptr;
    if (cudaStreamCreate(&stream) != cudaSuccess) {
        return absl::InternalError("cudaStreamCreate failed");
    }
    absl::Status status = enqueue(stream);
    const cudaError_t sync = cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    if (status.ok() && sync != cudaSuccess) {
        status =
            absl::InternalError(absl::StrCat("cudaStreamSynchronize: ", cudaGetErrorString(sync)));
    }
    return status;
}

// ---- aggregate ------------------------------------------------------------------------------

std::vector<float> random_values(std::mt19937_64& rng, int64_t n, bool specials) {
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    std::vector<float> values(static_cast<size_t>(n));
    for (float& value : values) {
        value = dist(rng);
        // A few NaN, infinities and signed zeros, where max and min must pick the operand the
        // CPU's std::max/std::min pick.
        if (specials && uniform(rng, 0, 40) == 0) {
            const float kSpecials[] = {std::numeric_limits<float>::quiet_NaN(),
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(), 0.0f, -0.0f};
            value = kSpecials[uniform(rng, 0, 4)];
        }
    }
    return values;
}

bool same_value(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(float)) == 0;
}

TEST(CudaBlockOpsTest, AggregateMatchesCpuInEveryDtype) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("aggregate");
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> sizes = {1, 7, 8, 9, 31, 1000, 4099, 100003};
    for (DType dtype : kDTypes) {
        const auto element_bytes = static_cast<size_t>(ir::dtype_size(dtype));
        for (ir::AggOp op : {ir::AggOp::sum, ir::AggOp::max, ir::AggOp::min, ir::AggOp::none}) {
            for (int trial = 0; trial < 12; ++trial) {
                const int64_t n = sizes[static_cast<size_t>(uniform(rng, 0, 7))];
                const int num_parts = static_cast<int>(uniform(rng, 1, 24));
                // Half the trials start every block one element past 16-byte alignment, which
                // takes the kernel's element-wise path instead of its 16-byte one.
                const size_t shift = trial % 2 == 0 ? 0 : element_bytes;
                SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " ", ir::agg_op_name(op), " n=", n,
                                          " parts=", num_parts, " shift=", shift));
                const bool specials = op != ir::AggOp::sum;
                std::vector<std::vector<float>> parts;
                std::vector<std::unique_ptr<DeviceBuffer>> buffers;
                std::vector<const void*> device_parts;
                for (int part = 0; part < num_parts; ++part) {
                    parts.push_back(harness::round_to(dtype, {random_values(rng, n, specials)})[0]);
                    std::vector<std::byte> bytes(static_cast<size_t>(n) * element_bytes);
                    ir::from_f32(dtype, parts.back().data(), bytes.data(), n);
                    buffers.push_back(std::make_unique<DeviceBuffer>(bytes.size()));
                    upload(buffers.back()->at(shift), bytes);
                    device_parts.push_back(buffers.back()->at(shift));
                }
                DeviceBuffer out(static_cast<size_t>(n) * element_bytes);
                ASSERT_TRUE(run_on_stream([&](cudaStream_t stream) {
                                return enqueue_aggregate(op, dtype, device_parts, out.at(shift), n,
                                                         stream);
                            }).ok());
                const std::vector<std::byte> got_bytes =
                    download(out.at(shift), static_cast<size_t>(n) * element_bytes);
                if (dtype == DType::f64) {
                    // The GPU computes f64 in f64: the same folds in double on the host, exactly.
                    std::vector<double> got(static_cast<size_t>(n));
                    std::memcpy(got.data(), got_bytes.data(), got_bytes.size());
                    for (int64_t idx = 0; idx < n; ++idx) {
                        const auto at = static_cast<size_t>(idx);
                        double expected = parts[0][at];
                        for (int part = 1; part < num_parts && op != ir::AggOp::none; ++part) {
                            expected =
                                ir::aggregate(op, expected, parts[static_cast<size_t>(part)][at]);
                        }
                        ASSERT_TRUE((std::isnan(got[at]) && std::isnan(expected)) ||
                                    std::memcmp(&got[at], &expected, sizeof(double)) == 0)
                            << "element " << idx << ": cuda " << got[at] << ", host " << expected;
                    }
                    continue;
                }
                std::vector<float> got(static_cast<size_t>(n));
                ir::to_f32(dtype, got_bytes.data(), got.data(), n);
                // f16, bf16 and f32 compute in f32 in part order, as aggregate_f32 does, and
                // round once: bit for bit the CPU's answer.
                std::vector<const float*> cpu_parts;
                for (const std::vector<float>& part : parts) {
                    cpu_parts.push_back(part.data());
                }
                std::vector<float> expected(static_cast<size_t>(n));
                cpu::aggregate_f32(op, cpu_parts, expected.data(), n);
                expected = harness::round_to(dtype, {expected})[0];
                for (int64_t idx = 0; idx < n; ++idx) {
                    ASSERT_TRUE(same_value(got[static_cast<size_t>(idx)],
                                           expected[static_cast<size_t>(idx)]))
                        << "element " << idx << ": cuda " << got[static_cast<size_t>(idx)]
                        << ", cpu " << expected[static_cast<size_t>(idx)];
                }
            }
        }
    }
}

// More parts than one launch takes (a k-way split over many devices): the launches chain through
// out, still in part order, so f32 stays bit for bit the CPU's aggregate_f32.
TEST(CudaBlockOpsTest, AggregateOfMorePartsThanOneLaunchTakesMatchesCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("aggregate-many");
    std::mt19937_64 rng(seed);
    const int64_t n = 1001;
    const int num_parts = 2 * kMaxAggregatePartsPerLaunch + 37;
    for (ir::AggOp op : {ir::AggOp::sum, ir::AggOp::max}) {
        std::vector<std::vector<float>> parts;
        std::vector<std::unique_ptr<DeviceBuffer>> buffers;
        std::vector<const void*> device_parts;
        for (int part = 0; part < num_parts; ++part) {
            parts.push_back(random_values(rng, n, false));
            std::vector<std::byte> bytes(static_cast<size_t>(n) * sizeof(float));
            std::memcpy(bytes.data(), parts.back().data(), bytes.size());
            buffers.push_back(std::make_unique<DeviceBuffer>(bytes.size()));
            upload(buffers.back()->at(0), bytes);
            device_parts.push_back(buffers.back()->at(0));
        }
        DeviceBuffer out(static_cast<size_t>(n) * sizeof(float));
        ASSERT_TRUE(run_on_stream([&](cudaStream_t stream) {
                        return enqueue_aggregate(op, DType::f32, device_parts, out.at(0), n,
                                                 stream);
                    }).ok());
        const std::vector<std::byte> got_bytes =
            download(out.at(0), static_cast<size_t>(n) * sizeof(float));
        std::vector<float> got(static_cast<size_t>(n));
        std::memcpy(got.data(), got_bytes.data(), got_bytes.size());
        std::vector<const float*> cpu_parts;
        for (const std::vector<float>& part : parts) {
            cpu_parts.push_back(part.data());
        }
        std::vector<float> expected(static_cast<size_t>(n));
        cpu::aggregate_f32(op, cpu_parts, expected.data(), n);
        for (int64_t idx = 0; idx < n; ++idx) {
            ASSERT_TRUE(
                same_value(got[static_cast<size_t>(idx)], expected[static_cast<size_t>(idx)]))
                << ir::agg_op_name(op) << " element " << idx;
        }
    }
}

TEST(CudaBlockOpsTest, AggregateRefusesBadArgumentsBeforeAnyLaunch) {
    float host[4] = {};
    const void* part = &host[0];
    absl::Status status = enqueue_aggregate(ir::AggOp::sum, DType::f32, {}, &host[2], 1, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "parts")) << status;

    const void* one[] = {part};
    status = enqueue_aggregate(ir::AggOp::sum, DType::f32, one, &host[2], -1, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "n is negative")) << status;

    status = enqueue_aggregate(ir::AggOp::max, DType::f32, one, nullptr, 1, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "out is null")) << status;

    const void* with_null[] = {part, nullptr};
    status = enqueue_aggregate(ir::AggOp::min, DType::f32, with_null, &host[2], 1, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "parts[1] is null")) << status;

    // out = host[1..3) overlaps part 0 = host[0..2).
    status = enqueue_aggregate(ir::AggOp::sum, DType::f32, one, &host[1], 2, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "overlaps parts[0]")) << status;

    // Nothing to do: no launch, no pointer needed.
    const void* null_part[] = {nullptr};
    EXPECT_TRUE(enqueue_aggregate(ir::AggOp::sum, DType::f16, null_part, nullptr, 0, nullptr).ok());
}

// ---- log-sum-exp combine ----------------------------------------------------------------------

// Partial results of `vectors` rows of `width`: values in [-4, 4), statistics in [-3, 3) with
// some rows of some parts holding nothing (-inf, values 0), and every part empty on row 0.
// With `non_finite`, also rows that saw only -inf scores (-inf, values NaN), rows
// with a NaN or +inf score (NaN, values NaN) and values that are infinite.
struct Partials {
    std::vector<std::vector<float>> values;
    std::vector<std::vector<float>> lse;
};

Partials random_partials(std::mt19937_64& rng, int num_parts, int64_t vectors, int64_t width,
                         bool non_finite = false) {
    std::uniform_real_distribution<float> stat(-3.0f, 3.0f);
    constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
    constexpr float kInf = std::numeric_limits<float>::infinity();
    Partials partials;
    for (int part = 0; part < num_parts; ++part) {
        std::vector<float> values = random_values(rng, vectors * width, false);
        std::vector<float> lse(static_cast<size_t>(vectors));
        for (int64_t row = 0; row < vectors; ++row) {
            const bool empty = row == 0 || uniform(rng, 0, 5) == 0;
            lse[static_cast<size_t>(row)] = empty ? -kInf : stat(rng);
            if (empty) {
                std::fill_n(values.begin() + row * width, width, 0.0f);
            }
            const int64_t special = non_finite ? uniform(rng, 0, 12) : 12;
            if (special == 0) { // only -inf scores
                lse[static_cast<size_t>(row)] = -kInf;
                std::fill_n(values.begin() + row * width, width, kNaN);
            } else if (special == 1) { // a NaN or +inf score
                lse[static_cast<size_t>(row)] = kNaN;
                std::fill_n(values.begin() + row * width, width, kNaN);
            } else if (special == 2 && !empty) { // an infinite value
                values[static_cast<size_t>(row * width + uniform(rng, 0, width - 1))] =
                    uniform(rng, 0, 1) == 0 ? kInf : -kInf;
            }
        }
        partials.values.push_back(std::move(values));
        partials.lse.push_back(std::move(lse));
    }
    return partials;
}

std::vector<const float*> pointers(const std::vector<std::vector<float>>& blocks) {
    std::vector<const float*> out;
    for (const std::vector<float>& block : blocks) {
        out.push_back(block.data());
    }
    return out;
}

// The device combine's host emulation and the CPU backend's combine of the same partials.
struct HostCombines {
    std::vector<float> got, got_lse, expected, expected_lse;
};
HostCombines combine_on_host(const Partials& partials, int num_parts, int64_t vectors,
                             int64_t width) {
    const std::vector<const float*> values = pointers(partials.values);
    const std::vector<const float*> lse = pointers(partials.lse);
    HostCombines out{std::vector<float>(static_cast<size_t>(vectors * width)),
                     std::vector<float>(static_cast<size_t>(vectors)),
                     std::vector<float>(static_cast<size_t>(vectors * width)),
                     std::vector<float>(static_cast<size_t>(vectors))};
    emulate_aggregate_log_sum_exp(values.data(), lse.data(), num_parts, out.got.data(),
                                  out.got_lse.data(), vectors, width);
    cpu::aggregate_log_sum_exp_f32(values, lse, out.expected.data(), out.expected_lse.data(),
                                   vectors, width);
    return out;
}

// The device combine's arithmetic, run on the host, is the CPU backend's.
TEST(CudaBlockOpsTest, EmulatedLogSumExpCombineMatchesCpu) {
    const uint64_t seed = seed_for("log-sum-exp emulated");
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 20; ++trial) {
        const int num_parts = static_cast<int>(uniform(rng, 1, 20));
        const int64_t vectors = uniform(rng, 1, 40);
        const int64_t width = uniform(rng, 1, 17);
        SCOPED_TRACE(absl::StrCat("parts=", num_parts, " vectors=", vectors, " width=", width));
        const Partials partials = random_partials(rng, num_parts, vectors, width);
        const auto [got, got_lse, expected, expected_lse] =
            combine_on_host(partials, num_parts, vectors, width);
        for (size_t idx = 0; idx < got.size(); ++idx) {
            ASSERT_NEAR(got[idx], expected[idx], 1e-6 * (1.0 + std::abs(expected[idx])))
                << "element " << idx;
        }
        for (size_t row = 0; row < got_lse.size(); ++row) {
            ASSERT_TRUE(got_lse[row] == expected_lse[row] ||
                        std::abs(got_lse[row] - expected_lse[row]) <= 1e-6)
                << "row " << row << ": " << got_lse[row] << " vs " << expected_lse[row];
        }
        EXPECT_EQ(got_lse[0], -std::numeric_limits<float>::infinity());
    }
}

// NaN and -inf statistics and non-finite values combine on the host emulation as on
// the CPU backend: NaN where it is NaN, the same infinities.
TEST(CudaBlockOpsTest, EmulatedLogSumExpCombineOfNonFiniteStatisticsMatchesCpu) {
    const uint64_t seed = seed_for("log-sum-exp emulated non-finite");
    std::mt19937_64 rng(seed);
    int nan_rows = 0;
    for (int trial = 0; trial < 20; ++trial) {
        const int num_parts = static_cast<int>(uniform(rng, 1, 6));
        const int64_t vectors = uniform(rng, 1, 40);
        const int64_t width = uniform(rng, 1, 9);
        SCOPED_TRACE(absl::StrCat("seed ", seed, " parts=", num_parts, " vectors=", vectors,
                                  " width=", width));
        const Partials partials = random_partials(rng, num_parts, vectors, width, true);
        const auto [got, got_lse, expected, expected_lse] =
            combine_on_host(partials, num_parts, vectors, width);
        EXPECT_LE(harness::worst_error({got, got_lse}, {expected, expected_lse}, 1e-6, 1e-6), 1.0)
            << harness::first_mismatch({got, got_lse}, {expected, expected_lse}, {1e-6, 1e-6});
        for (float value : expected_lse) {
            nan_rows += std::isnan(value) ? 1 : 0;
        }
    }
    EXPECT_GT(nan_rows, 0);
}

// On the GPU, in every dtype, with and without output statistics, and with more parts than one
// launch takes (folded through out and its statistics); then with non-finite statistics and
// values.
TEST(CudaBlockOpsTest, LogSumExpCombineMatchesCpuInEveryDtype) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("log-sum-exp");
    std::mt19937_64 rng(seed);
    const std::vector<int> part_counts = {1, 2, 7, kMaxLogSumExpParts, 2 * kMaxLogSumExpParts + 5};
    for (DType dtype : kDTypes) {
        const auto element_bytes = static_cast<size_t>(ir::dtype_size(dtype));
        for (int num_parts : part_counts) {
            for (int variant = 0; variant < 3; ++variant) {
                const bool with_stats = variant != 1;
                const bool non_finite = variant == 2;
                if (!with_stats && num_parts > kMaxLogSumExpParts) {
                    continue; // refused: AggregateRefusesBadArguments checks it
                }
                const int64_t vectors = uniform(rng, 1, 300);
                const int64_t width = uniform(rng, 1, 130);
                SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " parts=", num_parts,
                                          " vectors=", vectors, " width=", width,
                                          with_stats ? " with stats" : "",
                                          non_finite ? " non-finite" : ""));
                Partials partials = random_partials(rng, num_parts, vectors, width, non_finite);
                std::vector<std::unique_ptr<DeviceBuffer>> buffers;
                std::vector<const void*> device_values;
                std::vector<const float*> device_lse;
                const size_t bytes = static_cast<size_t>(vectors * width) * element_bytes;
                for (int part = 0; part < num_parts; ++part) {
                    std::vector<float>& values = partials.values[static_cast<size_t>(part)];
                    values = harness::round_to(dtype, {values})[0];
                    std::vector<std::byte> stored(bytes);
                    ir::from_f32(dtype, values.data(), stored.data(), vectors * width);
                    buffers.push_back(std::make_unique<DeviceBuffer>(bytes));
                    upload(buffers.back()->at(0), stored);
                    device_values.push_back(buffers.back()->at(0));
                    std::vector<std::byte> lse(static_cast<size_t>(vectors) * sizeof(float));
                    std::memcpy(lse.data(), partials.lse[static_cast<size_t>(part)].data(),
                                lse.size());
                    buffers.push_back(std::make_unique<DeviceBuffer>(lse.size()));
                    upload(buffers.back()->at(0), lse);
                    device_lse.push_back(reinterpret_cast<const float*>(buffers.back()->at(0)));
                }
                DeviceBuffer out(bytes);
                DeviceBuffer out_lse(static_cast<size_t>(vectors) * sizeof(float));
                float* out_stats = with_stats ? reinterpret_cast<float*>(out_lse.at(0)) : nullptr;
                const absl::Status status = run_on_stream([&](cudaStream_t stream) {
                    return enqueue_aggregate_log_sum_exp(dtype, device_values, device_lse,
                                                         out.at(0), out_stats, vectors, width,
                                                         stream);
                });
                ASSERT_TRUE(status.ok()) << status;
                std::vector<float> got(static_cast<size_t>(vectors * width));
                ir::to_f32(dtype, download(out.at(0), bytes).data(), got.data(), vectors * width);
                std::vector<float> expected(got.size());
                std::vector<float> expected_lse(static_cast<size_t>(vectors));
                cpu::aggregate_log_sum_exp_f32(pointers(partials.values), pointers(partials.lse),
                                               expected.data(), expected_lse.data(), vectors,
                                               width);
                expected = harness::round_to(dtype, {expected})[0];
                const harness::Tolerance tolerance = harness::tolerance_for(dtype);
                EXPECT_LE(harness::worst_error({got}, {expected}, tolerance.atol, tolerance.rtol),
                          1.0)
                    << harness::first_mismatch({got}, {expected}, tolerance);
                if (with_stats) {
                    std::vector<float> got_lse(static_cast<size_t>(vectors));
                    const std::vector<std::byte> lse_bytes =
                        download(out_lse.at(0), got_lse.size() * sizeof(float));
                    std::memcpy(got_lse.data(), lse_bytes.data(), lse_bytes.size());
                    EXPECT_LE(harness::worst_error({got_lse}, {expected_lse}, 1e-5, 1e-5), 1.0)
                        << harness::first_mismatch({got_lse}, {expected_lse}, {1e-5, 1e-5});
                }
            }
        }
    }
}

// ---- arg-max combine --------------------------------------------------------------------------

// Index parts (int64) with their f32 statistics — ties, NaN and infinities among them — combined
// on the device give the CPU backend's aggregate_arg_max_f32, with and without output
// statistics, for part counts up to and past one launch's.
TEST(CudaBlockOpsTest, ArgMaxCombineMatchesCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("arg-max");
    std::mt19937_64 rng(seed);
    const float kValues[] = {1.0f,
                             2.0f,
                             2.0f,
                             -1.0f,
                             std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()};
    for (int num_parts : {1, 2, 9, kMaxArgMaxParts, 2 * kMaxArgMaxParts + 3}) {
        for (bool with_stats : {true, false}) {
            if (!with_stats && num_parts > kMaxArgMaxParts) {
                continue; // refused: ArgMaxCombineRefusesBadArguments checks it
            }
            const int64_t vectors = uniform(rng, 1, 300);
            SCOPED_TRACE(absl::StrCat("seed ", seed, " parts=", num_parts, " vectors=", vectors,
                                      with_stats ? " with stats" : ""));
            std::vector<std::vector<float>> indices(num_parts), stats(num_parts);
            std::vector<std::unique_ptr<DeviceBuffer>> buffers;
            std::vector<const void*> device_indices;
            std::vector<const float*> device_stats;
            for (int part = 0; part < num_parts; ++part) {
                std::vector<int64_t> ids(static_cast<size_t>(vectors));
                for (int64_t v = 0; v < vectors; ++v) {
                    ids[v] = uniform(rng, 0, 1000);
                    indices[part].push_back(static_cast<float>(ids[v]));
                    stats[part].push_back(kValues[uniform(rng, 0, 6)]);
                }
                std::vector<std::byte> id_bytes(ids.size() * sizeof(int64_t));
                std::memcpy(id_bytes.data(), ids.data(), id_bytes.size());
                buffers.push_back(std::make_unique<DeviceBuffer>(id_bytes.size()));
                upload(buffers.back()->at(0), id_bytes);
                device_indices.push_back(buffers.back()->at(0));
                std::vector<std::byte> stat_bytes(stats[part].size() * sizeof(float));
                std::memcpy(stat_bytes.data(), stats[part].data(), stat_bytes.size());
                buffers.push_back(std::make_unique<DeviceBuffer>(stat_bytes.size()));
                upload(buffers.back()->at(0), stat_bytes);
                device_stats.push_back(reinterpret_cast<const float*>(buffers.back()->at(0)));
            }
            DeviceBuffer out(static_cast<size_t>(vectors) * sizeof(int64_t));
            DeviceBuffer out_stats(static_cast<size_t>(vectors) * sizeof(float));
            float* out_stats_ptr = with_stats ? reinterpret_cast<float*>(out_stats.at(0)) : nullptr;
            const absl::Status status = run_on_stream([&](cudaStream_t stream) {
                return enqueue_aggregate_arg_max(device_indices, device_stats, out.at(0),
                                                 out_stats_ptr, vectors, stream);
            });
            ASSERT_TRUE(status.ok()) << status;
            std::vector<float> expected(static_cast<size_t>(vectors));
            std::vector<float> expected_stats(static_cast<size_t>(vectors));
            cpu::aggregate_arg_max_f32(pointers(indices), pointers(stats), expected.data(),
                                       expected_stats.data(), vectors);
            std::vector<int64_t> got(static_cast<size_t>(vectors));
            const std::vector<std::byte> got_bytes = download(out.at(0), got.size() * 8);
            std::memcpy(got.data(), got_bytes.data(), got_bytes.size());
            std::vector<float> got_stats(static_cast<size_t>(vectors));
            const std::vector<std::byte> stat_bytes = download(out_stats.at(0), got.size() * 4);
            std::memcpy(got_stats.data(), stat_bytes.data(), stat_bytes.size());
            for (int64_t v = 0; v < vectors; ++v) {
                EXPECT_EQ(static_cast<float>(got[v]), expected[v]) << "vector " << v;
                if (with_stats) {
                    EXPECT_TRUE(same_value(got_stats[v], expected_stats[v])) << "vector " << v;
                }
            }
        }
    }
}

TEST(CudaBlockOpsTest, ArgMaxCombineRefusesBadArgumentsBeforeAnyLaunch) {
    int64_t host[4] = {};
    float stats[4] = {};
    const void* one[] = {&host[0]};
    const float* one_stats[] = {&stats[0]};
    absl::Status status = enqueue_aggregate_arg_max({}, {}, &host[2], nullptr, 1, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "at least one")) << status;
    status = enqueue_aggregate_arg_max(one, {}, &host[2], nullptr, 1, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "1 parts and 0 statistics")) << status;
    status = enqueue_aggregate_arg_max(one, one_stats, nullptr, nullptr, 1, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "out is null")) << status;
    status = enqueue_aggregate_arg_max(one, one_stats, &host[1], nullptr, 2, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "overlaps parts[0]")) << status;
    std::vector<const void*> many(kMaxArgMaxParts + 1, &host[0]);
    std::vector<const float*> many_stats(kMaxArgMaxParts + 1, &stats[0]);
    status = enqueue_aggregate_arg_max(many, many_stats, &host[2], nullptr, 1, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "without output statistics")) << status;
    EXPECT_TRUE(enqueue_aggregate_arg_max(one, one_stats, nullptr, nullptr, 0, nullptr).ok());
}

// ---- top-k merge --------------------------------------------------------------------------

// One part of a top_k split along the vocabulary, as the kernels write it: per row, the k best
// (value, absolute index) pairs of `width` random columns from `first`, best first by argmax's
// rule, padded with (-inf, vocab) — values small integers (ties within and across parts), NaN,
// infinities and signed zeros among them.
ir::HostTensor random_top_k_part(std::mt19937_64& rng, int64_t rows, int64_t k, int64_t width,
                                 int64_t first, int64_t vocab) {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    const double kSpecials[] = {std::numeric_limits<double>::quiet_NaN(), kInf, -kInf, 0.0, -0.0};
    ir::HostTensor pairs(Box({{0, rows}, {0, k}, {0, 2}}));
    std::vector<double> values(static_cast<size_t>(width));
    std::vector<int64_t> order(static_cast<size_t>(width));
    for (int64_t row = 0; row < rows; ++row) {
        for (double& value : values) {
            value = uniform(rng, 0, 12) == 0 ? kSpecials[uniform(rng, 0, 4)]
                                             : static_cast<double>(uniform(rng, -6, 6));
        }
        std::iota(order.begin(), order.end(), int64_t{0});
        const int64_t kept = std::min(width, k);
        std::partial_sort(order.begin(), order.begin() + kept, order.end(),
                          [&](int64_t a, int64_t b) {
                              return ir::arg_max_wins(values[a], static_cast<double>(a), values[b],
                                                      static_cast<double>(b));
                          });
        double* out = pairs.data() + row * 2 * k;
        for (int64_t slot = 0; slot < k; ++slot) {
            const bool real = slot < kept;
            out[2 * slot] = real ? values[order[slot]] : -kInf;
            out[2 * slot + 1] = static_cast<double>(real ? first + order[slot] : vocab);
        }
    }
    return pairs;
}

std::vector<std::byte> to_bytes(DType dtype, const ir::HostTensor& tensor) {
    std::vector<std::byte> bytes(static_cast<size_t>(tensor.size() * ir::dtype_size(dtype)));
    if (dtype == DType::f64) {
        std::memcpy(bytes.data(), tensor.data(), bytes.size());
    } else {
        std::vector<float> values(tensor.data(), tensor.data() + tensor.size());
        std::memcpy(bytes.data(), values.data(), bytes.size());
    }
    return bytes;
}

bool same_pair_value(DType dtype, const std::byte* got, double expected) {
    if (dtype == DType::f64) {
        double value = 0;
        std::memcpy(&value, got, sizeof value);
        return (std::isnan(value) && std::isnan(expected)) ||
               std::memcmp(&value, &expected, sizeof value) == 0;
    }
    float value = 0;
    std::memcpy(&value, got, sizeof value);
    return same_value(value, static_cast<float>(expected));
}

// Parts of top_k over disjoint vocabulary blocks (some narrower than k: padded) merged on the
// device give ir::merge_top_k folded over them in part order, bit for bit, in f32 and f64, for
// k from 1 to kMaxTopK, part counts up to and past one launch's, into an output of its own and
// in place over parts[0].
TEST(CudaBlockOpsTest, TopKMergeMatchesMergeTopKFolded) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("top-k merge");
    std::mt19937_64 rng(seed);
    struct Case {
        int64_t k;
        int num_parts;
    };
    for (DType dtype : {DType::f32, DType::f64}) {
        for (const Case& c :
             {Case{1, 1}, Case{1, 7}, Case{5, 2}, Case{5, 9}, Case{64, 3}, Case{37, kMaxTopKParts},
              Case{3, 2 * kMaxTopKParts + 3}, Case{kMaxTopK, 2}, Case{kMaxTopK, 5}}) {
            for (bool in_place : {false, true}) {
                const int64_t rows = uniform(rng, 1, 40);
                const int64_t element_bytes = ir::dtype_size(dtype);
                const size_t bytes = static_cast<size_t>(rows * 2 * c.k * element_bytes);
                SCOPED_TRACE(absl::StrCat("seed ", seed, " ", ir::dtype_name(dtype), " k=", c.k,
                                          " parts=", c.num_parts, " rows=", rows,
                                          in_place ? " in place" : ""));
                std::vector<int64_t> widths;
                int64_t vocab = 0;
                for (int part = 0; part < c.num_parts; ++part) {
                    widths.push_back(uniform(rng, 0, 2 * c.k));
                    vocab += widths.back();
                }
                std::vector<ir::HostTensor> parts;
                std::vector<std::unique_ptr<DeviceBuffer>> buffers;
                std::vector<const void*> device_parts;
                int64_t first = 0;
                for (int part = 0; part < c.num_parts; ++part) {
                    parts.push_back(random_top_k_part(rng, rows, c.k, widths[part], first, vocab));
                    first += widths[part];
                    buffers.push_back(std::make_unique<DeviceBuffer>(bytes));
                    upload(buffers.back()->at(0), to_bytes(dtype, parts.back()));
                    device_parts.push_back(buffers.back()->at(0));
                }
                // The parts in a shuffled order of their vocabulary blocks: the merge does not
                // rely on the blocks' order.
                std::vector<size_t> order(parts.size());
                std::iota(order.begin(), order.end(), size_t{0});
                std::shuffle(order.begin(), order.end(), rng);
                std::vector<const void*> shuffled;
                for (size_t idx : order) {
                    shuffled.push_back(device_parts[idx]);
                }
                DeviceBuffer own_out(bytes);
                void* out = in_place ? const_cast<void*>(shuffled[0]) : own_out.at(0);
                const absl::Status status = run_on_stream([&](cudaStream_t stream) {
                    return enqueue_aggregate_top_k(dtype, shuffled, out, rows, c.k, stream);
                });
                ASSERT_TRUE(status.ok()) << status;
                absl::StatusOr<ir::HostTensor> expected = parts[order[0]];
                for (size_t idx = 1; idx < order.size(); ++idx) {
                    expected = ir::merge_top_k(*expected, parts[order[idx]]);
                    ASSERT_TRUE(expected.ok()) << expected.status();
                }
                const std::vector<std::byte> got = download(static_cast<std::byte*>(out), bytes);
                for (int64_t idx = 0; idx < expected->size(); ++idx) {
                    ASSERT_TRUE(same_pair_value(dtype, got.data() + idx * element_bytes,
                                                expected->data()[idx]))
                        << "row " << idx / (2 * c.k) << " pair " << idx % (2 * c.k) / 2
                        << (idx % 2 == 0 ? " value" : " index") << ": expected "
                        << expected->data()[idx];
                }
            }
        }
    }
}

// The top_k kernel (kernels/cuda/top_k.cc) on long rows, whole and cut into vocabulary blocks
// — many chunks of the kernel, rows rising (every chunk holds new best pairs), ties, NaN and
// infinities, blocks narrower than k — against the CPU kernel bit for bit, and the blocks'
// pairs merged on the device against the whole row's: the vocabulary-parallel path end to end.
// (The generic random cases of cuda_rowwise_attention_test.cc cover short rows in every dtype.)
TEST(CudaBlockOpsTest, TopKOfVocabularyBlocksMergedOnTheDeviceMatchesTheWholeRow) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("top-k long rows");
    std::mt19937_64 rng(seed);
    struct Case {
        int64_t rows;
        int64_t vocab;
        int64_t k;
        std::vector<int64_t> cuts; // the vocabulary blocks' boundaries inside (0, vocab)
    };
    const std::vector<Case> cases = {
        {3, 5000, 50, {}},
        {2, 70000, 1024, {1000, 40000}},
        {4, 3000, 1024, {500, 2900}},
        {1, 1, 1, {}},
        {5, 2100, 7, {1}},
        {2, 1025, 1024, {1024}},
        {70000, 33, 5, {3, 17}},
    };
    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    constexpr double kInf = std::numeric_limits<double>::infinity();
    for (DType dtype : {DType::f32, DType::f64}) {
        for (const Case& c : cases) {
            for (int mode = 0; mode < 3; ++mode) { // random, rising, few distinct values
                SCOPED_TRACE(absl::StrCat("seed ", seed, " ", ir::dtype_name(dtype),
                                          " rows=", c.rows, " vocab=", c.vocab, " k=", c.k,
                                          " cuts=[", absl::StrJoin(c.cuts, ","), "] mode ", mode));
                absl::StatusOr<ir::OperatorPtr> op = ir::make_operator(
                    "top_k", {{"k", c.k}},
                    {ir::TensorType{DType::f32, {{"tokens", c.rows}, {"vocab", c.vocab}}}});
                ASSERT_TRUE(op.ok()) << op.status();
                std::vector<double> values(static_cast<size_t>(c.rows * c.vocab));
                std::uniform_real_distribution<double> dist(-1.0, 1.0);
                for (int64_t idx = 0; idx < c.rows * c.vocab; ++idx) {
                    const int64_t column = idx % c.vocab;
                    double& value = values[static_cast<size_t>(idx)];
                    value = mode == 0   ? static_cast<double>(static_cast<float>(dist(rng)))
                            : mode == 1 ? static_cast<double>(column / 3) // rising, ties in threes
                                        : static_cast<double>(uniform(rng, -3, 3));
                    if (uniform(rng, 0, 999) == 0) {
                        const double kSpecials[] = {kNaN, kInf, -kInf, -0.0};
                        value = kSpecials[uniform(rng, 0, 3)];
                    }
                }
                const ir::HostTensor x(Box({{0, c.rows}, {0, c.vocab}}), std::move(values));
                const Box pairs_box({{0, c.rows}, {0, c.k}, {0, 2}});
                const ir::FunctionSpec whole{{x.box()}, {pairs_box}};
                absl::StatusOr<harness::Blocks> expected =
                    harness::run_cpu(**op, whole, dtype, harness::blocks_of({x}, whole));
                ASSERT_TRUE(expected.ok()) << expected.status();
                std::vector<int64_t> bounds = {0};
                bounds.insert(bounds.end(), c.cuts.begin(), c.cuts.end());
                bounds.push_back(c.vocab);
                // Each block's pairs on the device, against the CPU kernel's, then into a part.
                const int64_t element_bytes = ir::dtype_size(dtype);
                const size_t bytes = static_cast<size_t>(pairs_box.volume() * element_bytes);
                std::vector<std::unique_ptr<DeviceBuffer>> buffers;
                std::vector<const void*> parts;
                for (size_t block = 0; block + 1 < bounds.size(); ++block) {
                    const ir::FunctionSpec function{
                        {Box({{0, c.rows}, {bounds[block], bounds[block + 1]}})}, {pairs_box}};
                    const harness::Blocks inputs = harness::blocks_of({x}, function);
                    absl::StatusOr<harness::Blocks> got =
                        harness::run_cuda(**op, function, dtype, inputs);
                    ASSERT_TRUE(got.ok()) << got.status();
                    absl::StatusOr<harness::Blocks> want =
                        harness::run_cpu(**op, function, dtype, inputs);
                    ASSERT_TRUE(want.ok()) << want.status();
                    for (size_t idx = 0; idx < want->at(0).size(); ++idx) {
                        ASSERT_TRUE(same_value(got->at(0)[idx], want->at(0)[idx]))
                            << "block " << block << " element " << idx << ": " << got->at(0)[idx]
                            << " vs the CPU's " << want->at(0)[idx];
                    }
                    const std::vector<double> widened(got->at(0).begin(), got->at(0).end());
                    buffers.push_back(std::make_unique<DeviceBuffer>(bytes));
                    upload(buffers.back()->at(0),
                           to_bytes(dtype, ir::HostTensor(pairs_box, widened)));
                    parts.push_back(buffers.back()->at(0));
                }
                DeviceBuffer out(bytes);
                const absl::Status status = run_on_stream([&](cudaStream_t stream) {
                    return enqueue_aggregate_top_k(dtype, parts, out.at(0), c.rows, c.k, stream);
                });
                ASSERT_TRUE(status.ok()) << status;
                const std::vector<std::byte> merged = download(out.at(0), bytes);
                for (size_t idx = 0; idx < expected->at(0).size(); ++idx) {
                    ASSERT_TRUE(same_pair_value(dtype, merged.data() + idx * element_bytes,
                                                expected->at(0)[idx]))
                        << "merged element " << idx << ": expected " << expected->at(0)[idx];
                }
            }
        }
    }
}

TEST(CudaBlockOpsTest, TopKMergeRefusesBadArgumentsBeforeAnyLaunch) {
    float host[16] = {};
    const void* one[] = {&host[0]};
    // rows 2, k 2: 8 floats per part.
    absl::Status status = enqueue_aggregate_top_k(DType::f32, {}, &host[8], 2, 2, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "enqueue_aggregate_top_k")) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "at least one")) << status;
    status = enqueue_aggregate_top_k(DType::i64, one, &host[8], 2, 2, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "floating-point")) << status;
    status = enqueue_aggregate_top_k(DType::f16, one, &host[8], 2, 2, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "dtype is f16")) << status;
    status = enqueue_aggregate_top_k(DType::f32, one, &host[8], 2, 0, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "k is 0")) << status;
    status = enqueue_aggregate_top_k(DType::f32, one, &host[8], 2, kMaxTopK + 1, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("k is ", kMaxTopK + 1))) << status;
    status = enqueue_aggregate_top_k(DType::f32, one, &host[8], -1, 2, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "rows is -1")) << status;
    status = enqueue_aggregate_top_k(DType::f32, one, nullptr, 2, 2, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "out is null")) << status;
    const void* with_null[] = {&host[0], nullptr};
    status = enqueue_aggregate_top_k(DType::f32, with_null, &host[8], 2, 2, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "parts[1] is null")) << status;
    // out over part 1, and out a few elements into part 0: refused; out = part 0: merged in place.
    const void* two[] = {&host[0], &host[8]};
    status = enqueue_aggregate_top_k(DType::f32, two, &host[8], 2, 2, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "out overlaps parts[1]")) << status;
    status = enqueue_aggregate_top_k(DType::f32, one, &host[2], 2, 2, nullptr);
    EXPECT_TRUE(absl::StrContains(status.message(), "out overlaps parts[0] without being it"))
        << status;
    // One part merged in place and no rows: nothing to launch.
    EXPECT_TRUE(enqueue_aggregate_top_k(DType::f32, one, &host[0], 2, 2, nullptr).ok());
    EXPECT_TRUE(enqueue_aggregate_top_k(DType::f32, one, nullptr, 0, 2, nullptr).ok());
    // enqueue_aggregate sends top_k here.
    status = enqueue_aggregate(ir::AggOp::top_k, DType::f32, one, &host[8], 8, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "enqueue_aggregate_top_k")) << status;
}

TEST(CudaBlockOpsTest, LogSumExpCombineRefusesBadArgumentsBeforeAnyLaunch) {
    float host[8] = {};
    const void* part = &host[0];
    const float* stats = &host[4];
    const void* one[] = {part};
    const float* one_stats[] = {stats};
    absl::Status status =
        enqueue_aggregate_log_sum_exp(DType::f32, {}, {}, &host[6], nullptr, 1, 1, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "parts is empty")) << status;

    status = enqueue_aggregate_log_sum_exp(DType::f32, one, {}, &host[6], nullptr, 1, 1, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "1 parts but 0 statistics")) << status;

    const float* null_stats[] = {nullptr};
    status = enqueue_aggregate_log_sum_exp(DType::f32, one, null_stats, &host[6], nullptr, 1, 1,
                                           nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "part_stats[0] is null")) << status;

    // out = host[1..3) overlaps part 0 = host[0..2).
    status =
        enqueue_aggregate_log_sum_exp(DType::f32, one, one_stats, &host[1], nullptr, 2, 1, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "overlaps parts[0]")) << status;

    // More parts than one launch takes need the output's statistics to fold through.
    const std::vector<const void*> many(kMaxLogSumExpParts + 1, part);
    const std::vector<const float*> many_stats(kMaxLogSumExpParts + 1, stats);
    status = enqueue_aggregate_log_sum_exp(DType::f32, many, many_stats, &host[6], nullptr, 1, 1,
                                           nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "without output statistics")) << status;

    // The plain aggregate refuses the ⊕ that needs statistics.
    status = enqueue_aggregate(ir::AggOp::log_sum_exp, DType::f32, one, &host[6], 1, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "enqueue_aggregate_log_sum_exp")) << status;
}

// The permutation of a dense block done index by index (dst dimension j is src dimension
// perm[j]).
std::vector<std::byte> host_permute(const std::vector<std::byte>& src,
                                    const std::vector<int64_t>& dims, const std::vector<int>& perm,
                                    int64_t element_bytes) {
    const auto rank = static_cast<int>(dims.size());
    std::vector<int64_t> src_stride(dims.size(), 1);
    for (int dim = rank - 2; dim >= 0; --dim) {
        src_stride[dim] = src_stride[dim + 1] * dims[dim + 1];
    }
    const int64_t volume =
        std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<int64_t>());
    std::vector<std::byte> dst(src.size());
    std::vector<int64_t> index(dims.size(), 0); // over dst dimensions
    for (int64_t linear = 0; linear < volume; ++linear) {
        int64_t rest = linear;
        int64_t src_at = 0;
        for (int dim = rank - 1; dim >= 0; --dim) {
            const int64_t extent = dims[perm[dim]];
            src_at += (rest % extent) * src_stride[perm[dim]];
            rest /= extent;
        }
        std::memcpy(dst.data() + linear * element_bytes, src.data() + src_at * element_bytes,
                    static_cast<size_t>(element_bytes));
    }
    return dst;
}

// ---- copy_region ----------------------------------------------------------------------------

// A random box of `rank` around `region`: each side extends by 0..2 (often 0, so that whole
// rows occur and collapse), shifted to a random origin.
Box box_around(const Box& region, std::mt19937_64& rng) {
    std::vector<Interval> dims;
    for (int dim = 0; dim < region.rank(); ++dim) {
        const int64_t before = uniform(rng, 0, 3) == 0 ? uniform(rng, 1, 2) : 0;
        const int64_t after = uniform(rng, 0, 3) == 0 ? uniform(rng, 1, 2) : 0;
        dims.push_back({region[dim].lower - before, region[dim].upper + after});
    }
    return Box(dims);
}

TEST(CudaBlockOpsTest, CopyRegionMatchesHostCopyForRanksOneToSix) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("copy_region");
    std::mt19937_64 rng(seed);
    for (DType dtype : kDTypes) {
        const int64_t element_bytes = ir::dtype_size(dtype);
        for (int rank = 1; rank <= 6; ++rank) {
            for (int trial = 0; trial < 20; ++trial) {
                std::vector<Interval> region_dims;
                const int64_t max_extent = rank <= 2 ? 300 : (rank <= 4 ? 12 : 6);
                for (int dim = 0; dim < rank; ++dim) {
                    const int64_t lower = uniform(rng, 2, 20);
                    region_dims.push_back({lower, lower + uniform(rng, 1, max_extent)});
                }
                const Box region(region_dims);
                const Box src_box = box_around(region, rng);
                const Box dst_box = box_around(region, rng);
                const size_t src_shift = uniform(rng, 0, 1) * static_cast<size_t>(element_bytes);
                const size_t dst_shift = uniform(rng, 0, 1) * static_cast<size_t>(element_bytes);
                SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " region ", region.to_string(),
                                          " src ", src_box.to_string(), " dst ",
                                          dst_box.to_string(), " shifts ", src_shift, "/",
                                          dst_shift));
                const std::vector<std::byte> src =
                    random_bytes(rng, static_cast<size_t>(src_box.volume() * element_bytes));
                std::vector<std::byte> expected =
                    random_bytes(rng, static_cast<size_t>(dst_box.volume() * element_bytes));
                DeviceBuffer device_src(src.size());
                DeviceBuffer device_dst(expected.size());
                upload(device_src.at(src_shift), src);
                upload(device_dst.at(dst_shift), expected);
                ASSERT_TRUE(run_on_stream([&](cudaStream_t stream) {
                                return enqueue_copy_region(device_src.at(src_shift), src_box,
                                                           device_dst.at(dst_shift), dst_box,
                                                           region, element_bytes, stream);
                            }).ok());
                ir::copy_region(src.data(), src_box, expected.data(), dst_box, region,
                                element_bytes);
                // The whole destination: the region copied, everything else untouched.
                EXPECT_TRUE(download(device_dst.at(dst_shift), expected.size()) == expected);
            }
        }
    }
}

// Host memory with room to place a block at any byte offset from a 16-byte boundary.
struct HostArena {
    explicit HostArena(size_t bytes) : storage(bytes + 64) {}
    std::byte* at(size_t shift) {
        const auto base = reinterpret_cast<uintptr_t>(storage.data());
        return storage.data() + ((16 - base % 16) % 16) + shift;
    }
    std::vector<std::byte> storage;
};

// Without a GPU: the copy plans enqueue_copy_region launches (region_copy, collapse_and_widen)
// run through the kernel's own per-element code on the host, against ir::copy_region.
TEST(CudaBlockOpsTest, EmulatedCopyRegionMatchesHostCopyForRanksOneToSix) {
    const uint64_t seed = seed_for("copy_region_emulated");
    std::mt19937_64 rng(seed);
    int widened = 0;
    for (DType dtype : kDTypes) {
        const int64_t element_bytes = ir::dtype_size(dtype);
        for (int rank = 1; rank <= 6; ++rank) {
            for (int trial = 0; trial < 40; ++trial) {
                std::vector<Interval> region_dims;
                const int64_t max_extent = rank <= 2 ? 40 : (rank <= 4 ? 8 : 4);
                for (int dim = 0; dim < rank; ++dim) {
                    const int64_t lower = uniform(rng, 2, 20);
                    region_dims.push_back({lower, lower + uniform(rng, 1, max_extent)});
                }
                const Box region(region_dims);
                const Box src_box = box_around(region, rng);
                const Box dst_box = box_around(region, rng);
                const size_t src_shift = uniform(rng, 0, 1) * static_cast<size_t>(element_bytes);
                const size_t dst_shift = uniform(rng, 0, 1) * static_cast<size_t>(element_bytes);
                SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " region ", region.to_string(),
                                          " src ", src_box.to_string(), " dst ",
                                          dst_box.to_string(), " shifts ", src_shift, "/",
                                          dst_shift));
                const std::vector<std::byte> src =
                    random_bytes(rng, static_cast<size_t>(src_box.volume() * element_bytes));
                std::vector<std::byte> expected =
                    random_bytes(rng, static_cast<size_t>(dst_box.volume() * element_bytes));
                HostArena src_arena(src.size());
                HostArena dst_arena(expected.size());
                std::memcpy(src_arena.at(src_shift), src.data(), src.size());
                std::memcpy(dst_arena.at(dst_shift), expected.data(), expected.size());
                const StridedCopy planned =
                    collapse_and_widen(region_copy(src_box, dst_box, region, element_bytes),
                                       src_arena.at(src_shift), dst_arena.at(dst_shift));
                widened += planned.element_bytes > element_bytes ? 1 : 0;
                EXPECT_LE(planned.rank, rank);
                emulate_strided_copy(planned, src_arena.at(src_shift), dst_arena.at(dst_shift));
                ir::copy_region(src.data(), src_box, expected.data(), dst_box, region,
                                element_bytes);
                EXPECT_TRUE(
                    std::memcmp(dst_arena.at(dst_shift), expected.data(), expected.size()) == 0);
            }
        }
    }
    // The widening path must have been taken, or this test checks less than it claims.
    EXPECT_GT(widened, 0);
}

TEST(CudaBlockOpsTest, CollapseMergesWholeRowsIntoOneRun) {
    // [4,10) x [0,8) out of [0,10) x [0,8): whole rows, one contiguous run of 48 elements that
    // moves in 16-byte units when both blocks are 16-byte aligned.
    const Box src_box({Interval{0, 10}, Interval{0, 8}});
    const Box dst_box({Interval{4, 12}, Interval{0, 8}});
    const Box region({Interval{4, 10}, Interval{0, 8}});
    alignas(16) static std::byte src[320];
    alignas(16) static std::byte dst[320];
    const StridedCopy planned =
        collapse_and_widen(region_copy(src_box, dst_box, region, 4), src, dst);
    EXPECT_EQ(planned.rank, 1);
    EXPECT_EQ(planned.element_bytes, 16);
    EXPECT_EQ(planned.extent[0], 12);
    EXPECT_EQ(planned.src_offset, 8); // 32 elements in
    EXPECT_EQ(planned.dst_offset, 0);
    // Misaligned by one element: no widening.
    const StridedCopy misaligned =
        collapse_and_widen(region_copy(src_box, dst_box, region, 4), src + 4, dst);
    EXPECT_EQ(misaligned.element_bytes, 4);
    EXPECT_EQ(misaligned.extent[0], 48);
}

// Random dims of `rank` (extents up to max_extent[0] for ranks 1-2, [1] for 3-4, [2] beyond)
// and a permutation of them; every fourth trial keeps the innermost dimension in place
// (contiguous runs, widened).
std::pair<std::vector<int64_t>, std::vector<int>>
random_permutation(std::mt19937_64& rng, int rank, int trial, std::array<int64_t, 3> max_extent) {
    std::vector<int64_t> dims;
    const int64_t limit = max_extent[rank <= 2 ? 0 : (rank <= 4 ? 1 : 2)];
    for (int dim = 0; dim < rank; ++dim) {
        dims.push_back(uniform(rng, 1, limit));
    }
    std::vector<int> perm(static_cast<size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), trial % 4 == 0 ? perm.end() - 1 : perm.end(), rng);
    return {dims, perm};
}

// Without a GPU: the plans enqueue_permute launches, through the kernel's per-element code.
TEST(CudaBlockOpsTest, EmulatedPermuteMatchesHostForRanksOneToSix) {
    const uint64_t seed = seed_for("permute_emulated");
    std::mt19937_64 rng(seed);
    for (DType dtype : kDTypes) {
        const int64_t element_bytes = ir::dtype_size(dtype);
        for (int rank = 1; rank <= 6; ++rank) {
            for (int trial = 0; trial < 40; ++trial) {
                const auto [dims, perm] = random_permutation(rng, rank, trial, {40, 8, 4});
                SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " dims [",
                                          absl::StrJoin(dims, ","), "] perm [",
                                          absl::StrJoin(perm, ","), "]"));
                const int64_t volume = std::accumulate(dims.begin(), dims.end(), int64_t{1},
                                                       std::multiplies<int64_t>());
                const std::vector<std::byte> src =
                    random_bytes(rng, static_cast<size_t>(volume * element_bytes));
                HostArena src_arena(src.size());
                HostArena dst_arena(src.size());
                std::memcpy(src_arena.at(0), src.data(), src.size());
                const StridedCopy planned =
                    collapse_and_widen(permute_copy(dims.data(), perm.data(), rank, element_bytes),
                                       src_arena.at(0), dst_arena.at(0));
                emulate_strided_copy(planned, src_arena.at(0), dst_arena.at(0));
                const std::vector<std::byte> expected =
                    host_permute(src, dims, perm, element_bytes);
                EXPECT_TRUE(std::memcmp(dst_arena.at(0), expected.data(), expected.size()) == 0);
            }
        }
    }
}

TEST(CudaBlockOpsTest, CopyRegionRefusesBadArgumentsBeforeAnyLaunch) {
    std::byte host[64] = {};
    const Box box({Interval{0, 4}, Interval{0, 4}});
    const Box outside({Interval{2, 5}, Interval{0, 4}});
    absl::Status status = enqueue_copy_region(host, Box({Interval{2, 6}, Interval{0, 4}}),
                                              host + 32, box, outside, 2, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "dst_box")) << status;

    status = enqueue_copy_region(host, box, host + 32, Box({Interval{2, 6}, Interval{0, 4}}),
                                 outside, 2, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "src_box")) << status;

    status = enqueue_copy_region(host, box, host + 32, box, Box({Interval{0, 4}}), 2, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "rank")) << status;

    status = enqueue_copy_region(host, box, host + 32, box, box, 3, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "element_bytes")) << status;

    status = enqueue_copy_region(nullptr, box, host + 32, box, box, 2, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "src is null")) << status;

    std::vector<Interval> nine(9, Interval{0, 1});
    status = enqueue_copy_region(host, Box(nine), host + 32, Box(nine), Box(nine), 2, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "rank 9")) << status;

    // An empty region copies nothing, needs no pointer and launches nothing.
    EXPECT_TRUE(enqueue_copy_region(nullptr, box, nullptr, box,
                                    Box({Interval{1, 1}, Interval{0, 4}}), 2, nullptr)
                    .ok());
}

// ---- permute --------------------------------------------------------------------------------

TEST(CudaBlockOpsTest, PermuteMatchesHostForRanksOneToSix) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("permute");
    std::mt19937_64 rng(seed);
    for (DType dtype : kDTypes) {
        const int64_t element_bytes = ir::dtype_size(dtype);
        for (int rank = 1; rank <= 6; ++rank) {
            for (int trial = 0; trial < 20; ++trial) {
                const auto [dims, perm] = random_permutation(rng, rank, trial, {200, 10, 5});
                SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " dims [",
                                          absl::StrJoin(dims, ","), "] perm [",
                                          absl::StrJoin(perm, ","), "]"));
                const int64_t volume = std::accumulate(dims.begin(), dims.end(), int64_t{1},
                                                       std::multiplies<int64_t>());
                const std::vector<std::byte> src =
                    random_bytes(rng, static_cast<size_t>(volume * element_bytes));
                DeviceBuffer device_src(src.size());
                DeviceBuffer device_dst(src.size());
                upload(device_src.at(0), src);
                ASSERT_TRUE(run_on_stream([&](cudaStream_t stream) {
                                return enqueue_permute(device_src.at(0), dims, perm, element_bytes,
                                                       device_dst.at(0), stream);
                            }).ok());
                EXPECT_TRUE(download(device_dst.at(0), src.size()) ==
                            host_permute(src, dims, perm, element_bytes));
            }
        }
    }
}

TEST(CudaBlockOpsTest, PermuteRefusesBadArgumentsBeforeAnyLaunch) {
    std::byte host[256] = {};
    const std::vector<int64_t> dims = {2, 3, 4};
    absl::Status status =
        enqueue_permute(host, dims, std::vector<int>{0, 0, 1}, 4, host + 128, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "not a permutation")) << status;

    status = enqueue_permute(host, dims, std::vector<int>{0, 1}, 4, host + 128, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "perm")) << status;

    status = enqueue_permute(host, std::vector<int64_t>(9, 1),
                             std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8}, 4, host + 128, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "rank 9")) << status;

    status = enqueue_permute(host, std::vector<int64_t>{2, -1}, std::vector<int>{1, 0}, 4,
                             host + 128, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "negative")) << status;

    status = enqueue_permute(host, dims, std::vector<int>{2, 1, 0}, 4, host + 16, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "overlap")) << status;

    status = enqueue_permute(host, dims, std::vector<int>{2, 1, 0}, 4, nullptr, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "dst is null")) << status;

    EXPECT_TRUE(enqueue_permute(nullptr, std::vector<int64_t>{0, 3}, std::vector<int>{1, 0}, 4,
                                nullptr, nullptr)
                    .ok());
}

} // namespace
} // namespace einsummable::kernels::cuda
