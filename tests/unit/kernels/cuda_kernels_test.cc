#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>
#include <pthread.h>

#include "gtest/gtest.h"
#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/elementwise.h"
#include "tests/unit/gpu_required.h"

namespace einsummable::kernels::cuda {
namespace {

// Linking the CUDA kernels must leave room in a small thread stack: the libraries' static TLS
// is part of every thread's stack, and a library may start threads with small fixed stacks
// (civetweb's are 100 KB; it once served the daemon's /metrics). cuBLASLt alone has
// ~94 KB of TLS, so it is opened at run time (kernels/cuda/cublaslt_api.h); linking it again
// fails this test. Needs no GPU.
TEST(CudaLinkTest, ThreadsWithSmallStacksStillStart) {
    pthread_attr_t attributes;
    ASSERT_EQ(pthread_attr_init(&attributes), 0);
    ASSERT_EQ(pthread_attr_setstacksize(&attributes, 102400), 0);
    pthread_t thread;
    const int created = pthread_create(
        &thread, &attributes, [](void*) -> void* { return nullptr; }, nullptr);
    pthread_attr_destroy(&attributes);
    ASSERT_EQ(created, 0) << "pthread_create with a 100 KB stack failed (EINVAL is 22): a library "
                             "with large static TLS is linked";
    pthread_join(thread, nullptr);
    EXPECT_EQ(cublaslt_if_loaded(), nullptr) << "nothing has asked for cuBLASLt yet";
}

// Owns one device allocation of `count` floats.
class DeviceFloats {
public:
    explicit DeviceFloats(int64_t count) : count_(count) {
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()), cudaSuccess);
    }
    DeviceFloats(const DeviceFloats&) = delete;
    DeviceFloats& operator=(const DeviceFloats&) = delete;
    ~DeviceFloats() { cudaFree(data_); }

    float* data() const { return data_; }
    size_t bytes() const { return static_cast<size_t>(count_) * sizeof(float); }

private:
    int64_t count_ = 0;
    float* data_ = nullptr;
};

float reference_relu(float x) {
    return x < 0.0f ? 0.0f : x;
}

// Runs relu_f32 on `input` through device memory and returns the result.
std::vector<float> relu_on_gpu(const std::vector<float>& input, cudaStream_t stream) {
    const int64_t n = static_cast<int64_t>(input.size());
    DeviceFloats device_in(n);
    DeviceFloats device_out(n);
    EXPECT_EQ(cudaMemcpy(device_in.data(), input.data(), device_in.bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
    absl::Status status = relu_f32(device_in.data(), device_out.data(), n, stream);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> output(input.size());
    EXPECT_EQ(
        cudaMemcpy(output.data(), device_out.data(), device_out.bytes(), cudaMemcpyDeviceToHost),
        cudaSuccess);
    return output;
}

TEST(ListDevicesTest, SucceedsWithOrWithoutGpu) {
    absl::StatusOr<std::vector<DeviceInfo>> devices = list_devices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    for (const DeviceInfo& device : *devices) {
        EXPECT_FALSE(device.name.empty());
        EXPECT_GE(device.compute_capability_major, 1);
        EXPECT_GT(device.total_memory_bytes, 0);
        EXPECT_GT(device.multiprocessor_count, 0);
        EXPECT_FALSE(device.to_string().empty());
    }
}

TEST(ListDevicesTest, IsStableAcrossCalls) {
    absl::StatusOr<std::vector<DeviceInfo>> first = list_devices();
    absl::StatusOr<std::vector<DeviceInfo>> second = list_devices();
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(first->size(), second->size());
}

// Tests that launch kernels; they skip where the CUDA runtime sees no GPU.
class ReluF32GpuTest : public ::testing::Test {
protected:
    void SetUp() override {
        absl::StatusOr<std::vector<DeviceInfo>> devices = list_devices();
        ASSERT_TRUE(devices.ok()) << devices.status();
        if (devices->empty()) {
            EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED("no CUDA device present: relu_f32 needs a GPU");
        }
    }
};

// Argument checks happen before any CUDA call, so these run on every machine.
TEST(ReluF32Test, RejectsNegativeCount) {
    float dummy = 0.0f;
    EXPECT_EQ(relu_f32(&dummy, &dummy, -1, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReluF32Test, ZeroCountIsNoOp) {
    EXPECT_TRUE(relu_f32(nullptr, nullptr, 0, nullptr).ok());
}

TEST(ReluF32Test, RejectsNullPointers) {
    float dummy = 0.0f;
    EXPECT_EQ(relu_f32(nullptr, &dummy, 1, nullptr).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(relu_f32(&dummy, nullptr, 1, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ReluF32GpuTest, SpecialValues) {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> input = {-3.0f, -0.5f, 0.0f, 0.5f, 2.5f, inf, -inf, nan, -1e-38f, 1e38f};
    std::vector<float> output = relu_on_gpu(input, nullptr);
    ASSERT_EQ(output.size(), input.size());
    EXPECT_EQ(output[0], 0.0f);
    EXPECT_EQ(output[1], 0.0f);
    EXPECT_EQ(output[2], 0.0f);
    EXPECT_EQ(output[3], 0.5f);
    EXPECT_EQ(output[4], 2.5f);
    EXPECT_EQ(output[5], inf);
    EXPECT_EQ(output[6], 0.0f);
    EXPECT_TRUE(std::isnan(output[7]));
    EXPECT_EQ(output[8], 0.0f);
    EXPECT_EQ(output[9], 1e38f);
}

// Sizes around the block size, and one larger than the capped grid so that the grid-stride
// loop runs more than one iteration per thread.
TEST_F(ReluF32GpuTest, MatchesReferenceOnRandomInputs) {
    const unsigned seed = 20240601;
    std::mt19937 generator(seed);
    std::normal_distribution<float> distribution(0.0f, 10.0f);
    for (int64_t n : {1, 255, 256, 257, 1000003, 8192 * 256 * 3 + 17}) {
        std::vector<float> input(n);
        for (float& x : input) {
            x = distribution(generator);
        }
        std::vector<float> output = relu_on_gpu(input, nullptr);
        ASSERT_EQ(output.size(), input.size());
        int64_t mismatches = 0;
        for (int64_t i = 0; i < n; ++i) {
            if (output[i] != reference_relu(input[i])) {
                ++mismatches;
            }
        }
        EXPECT_EQ(mismatches, 0) << "n=" << n << " seed=" << seed;
    }
}

TEST_F(ReluF32GpuTest, InPlaceOnNonDefaultStream) {
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    const int64_t n = 4099;
    std::vector<float> input(n);
    for (int64_t i = 0; i < n; ++i) {
        input[i] = static_cast<float>(i % 7) - 3.0f;
    }
    DeviceFloats buffer(n);
    ASSERT_EQ(cudaMemcpyAsync(buffer.data(), input.data(), buffer.bytes(), cudaMemcpyHostToDevice,
                              stream),
              cudaSuccess);
    absl::Status status = relu_f32(buffer.data(), buffer.data(), n, stream);
    ASSERT_TRUE(status.ok()) << status;
    std::vector<float> output(n);
    ASSERT_EQ(cudaMemcpyAsync(output.data(), buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost,
                              stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(output[i], reference_relu(input[i])) << "i=" << i;
    }
}

} // namespace
} // namespace einsummable::kernels::cuda
