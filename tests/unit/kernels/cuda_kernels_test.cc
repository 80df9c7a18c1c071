#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <pthread.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/cudnn_library.h"
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

// Which CUDA errors end the process's use of CUDA (no GPU needed): those the CUDA runtime's
// reference says leave the process in an inconsistent state, and the uncorrectable hardware
// errors; not those a request can cause and survive.
TEST(CudaStatusTest, StickyErrorsAreTheOnesThatPoisonTheContext) {
    for (cudaError_t error :
         {cudaErrorIllegalAddress, cudaErrorLaunchTimeout, cudaErrorAssert,
          cudaErrorHardwareStackError, cudaErrorIllegalInstruction, cudaErrorMisalignedAddress,
          cudaErrorInvalidAddressSpace, cudaErrorInvalidPc, cudaErrorLaunchFailure,
          cudaErrorExternalDevice, cudaErrorMpsClientTerminated, cudaErrorECCUncorrectable,
          cudaErrorNvlinkUncorrectable, static_cast<cudaError_t>(226) /* Contained */,
          static_cast<cudaError_t>(721) /* TensorMemoryLeak */}) {
        EXPECT_TRUE(is_sticky_cuda_error(error)) << cudaGetErrorName(error);
    }
    for (cudaError_t error :
         {cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation, cudaErrorNotReady,
          cudaErrorLaunchOutOfResources, cudaErrorInvalidConfiguration, cudaErrorNoDevice,
          cudaErrorInsufficientDriver, cudaErrorPeerAccessUnsupported,
          cudaErrorPeerAccessAlreadyEnabled, cudaErrorInvalidResourceHandle,
          cudaErrorStreamCaptureInvalidated, cudaErrorStreamCaptureUnsupported,
          cudaErrorNoKernelImageForDevice, cudaErrorNotSupported, cudaErrorTimeout,
          cudaErrorUnknown}) {
        EXPECT_FALSE(is_sticky_cuda_error(error)) << cudaGetErrorName(error);
    }
}

// cuda_status records the first sticky error for the process (the CUDA backend's
// unrecoverable_error); other errors leave it OK. It leaves the record set, which no other test
// here reads.
TEST(CudaStatusTest, TheFirstStickyErrorIsRecordedForTheProcess) {
    const absl::Status out_of_memory = cuda_status(cudaErrorMemoryAllocation, "cudaMalloc");
    EXPECT_EQ(out_of_memory.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_TRUE(sticky_cuda_error().ok()) << sticky_cuda_error();
    const absl::Status illegal = cuda_status(cudaErrorIllegalAddress, "running the plan");
    EXPECT_EQ(illegal.code(), absl::StatusCode::kInternal);
    EXPECT_EQ(illegal.message(), "running the plan: cudaErrorIllegalAddress (an illegal memory "
                                 "access was encountered)");
    EXPECT_EQ(sticky_cuda_error(), illegal);
    EXPECT_FALSE(cuda_status(cudaErrorAssert, "a later launch").ok());
    EXPECT_EQ(sticky_cuda_error(), illegal) << "the first one stays";
}

// cuDNN is opened at run time (kernels/cuda/cudnn_library.h), not linked. A name the loader
// does not find gives FailedPrecondition naming every name tried with dlerror()'s reason, which
// the CUDA backend's start-up warning and einsummable-cuda-info show. Needs no GPU.
TEST(CudnnLibraryTest, AMissingLibraryIsNamedWithTheLoadersReason) {
    absl::StatusOr<CudnnLibrary> library =
        open_cudnn({"libeinsummable_no_such_cudnn.so.9", "libeinsummable_no_such_cudnn.so"});
    ASSERT_FALSE(library.ok());
    const absl::Status& status = library.status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "cuDNN is not installed")) << status;
    EXPECT_TRUE(absl::StrContains(
        status.message(), "libeinsummable_no_such_cudnn.so.9: cannot open shared object file"))
        << status;
    EXPECT_TRUE(absl::StrContains(
        status.message(), "libeinsummable_no_such_cudnn.so: cannot open shared object file"))
        << status;
}

TEST(CudnnLibraryTest, ALibraryWithoutCudnnGetVersionIsNotCudnn) {
    absl::StatusOr<CudnnLibrary> library = open_cudnn({"libm.so.6"});
    ASSERT_FALSE(library.ok());
    EXPECT_EQ(library.status().code(), absl::StatusCode::kFailedPrecondition) << library.status();
    EXPECT_TRUE(absl::StrContains(library.status().message(), "libm.so.6")) << library.status();
    EXPECT_TRUE(absl::StrContains(library.status().message(), "no function cudnnGetVersion"))
        << library.status();
}

TEST(CudnnLibraryTest, VersionsReadAsCudnnCountsThem) {
    EXPECT_EQ((CudnnLibrary{nullptr, 91900, "/lib/libcudnn.so.9"}.describe()),
              "9.19.0 from /lib/libcudnn.so.9");
    EXPECT_EQ((CudnnLibrary{nullptr, 91900, ""}.major()), 9);
    EXPECT_EQ((CudnnLibrary{nullptr, 100203, ""}.version_string()), "10.2.3");
    EXPECT_EQ((CudnnLibrary{nullptr, 8907, ""}.version_string()), "8.9.7");
    EXPECT_EQ((CudnnLibrary{nullptr, 8907, ""}.major()), 8);
}

// The same answer on every call; where cuDNN loads, its version and the file it came from.
TEST(CudnnLibraryTest, LoadsOnceAndSaysFromWhere) {
    const std::vector<std::string> names = cudnn_library_names();
    ASSERT_FALSE(names.empty());
    EXPECT_EQ(names.back(), "libcudnn.so");
    absl::StatusOr<const CudnnLibrary*> first = load_cudnn();
    absl::StatusOr<const CudnnLibrary*> second = load_cudnn();
    ASSERT_EQ(first.status(), second.status());
    if (!first.ok()) {
        EXPECT_EQ(first.status().code(), absl::StatusCode::kFailedPrecondition) << first.status();
        std::cout << "cuDNN does not load here: " << first.status() << "\n";
        return;
    }
    EXPECT_EQ(*first, *second);
    EXPECT_NE((*first)->handle, nullptr);
    EXPECT_GE((*first)->version, 90000);
    EXPECT_TRUE(absl::StrContains((*first)->path, "libcudnn")) << (*first)->path;
    std::cout << "cuDNN " << (*first)->describe() << "\n";
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
