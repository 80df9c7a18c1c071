// runtime/backend_choice.h: the daemon's and the CLI's --backend/--devices. On a machine
// without a GPU (CI) auto must pick the CPU backend and cuda must refuse with a clear error; on
// one with a GPU (scripts/gpu-check) auto must pick CUDA.

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/backend_choice.h"
#include "tests/unit/gpu_required.h"

#if defined(EINSUMMABLE_WITH_CUDA_BACKEND)
#include "kernels/cuda/device_info.h"
#endif

namespace einsummable::runtime {
namespace {

using ::testing::HasSubstr;

bool gpu_visible() {
#if defined(EINSUMMABLE_WITH_CUDA_BACKEND)
    absl::StatusOr<std::vector<kernels::cuda::DeviceInfo>> gpus = kernels::cuda::list_devices();
    return gpus.ok() && !gpus->empty();
#else
    return false;
#endif
}

TEST(BackendChoiceTest, CpuTakesACountAndRefusesAGpuList) {
    absl::StatusOr<BackendChoice> cpu = choose_backend({"cpu", "3"});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    EXPECT_EQ(cpu->backend->name(), "cpu");
    EXPECT_EQ(cpu->backend->devices(), 3);
    EXPECT_THAT(cpu->reason, HasSubstr("--backend=cpu"));
    EXPECT_FALSE(cpu->topology.has_value());

    absl::StatusOr<BackendChoice> fallback = choose_backend({"cpu", ""});
    ASSERT_TRUE(fallback.ok()) << fallback.status();
    EXPECT_EQ(fallback->backend->devices(), 8);

    absl::StatusOr<BackendChoice> list = choose_backend({"cpu", "0,0"});
    EXPECT_EQ(list.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(list.status().message()), HasSubstr("--devices=0,0"));
}

TEST(BackendChoiceTest, BadFlagsNameTheFlag) {
    for (const auto& [request, flag] : std::vector<std::pair<BackendRequest, std::string>>{
             {{"tpu", ""}, "--backend=tpu"},
             {{"auto", "0"}, "--devices=0"},
             {{"auto", "-2"}, "--devices=-2"},
             {{"auto", "1025"}, "--devices=1025"},
             {{"cuda", "0,x"}, "'x'"},
         }) {
        absl::Status status = check_backend_request(request);
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << flag;
        EXPECT_THAT(std::string(status.message()), HasSubstr(flag));
        EXPECT_EQ(choose_backend(request).status().code(), absl::StatusCode::kInvalidArgument);
    }
}

TEST(BackendChoiceTest, AutoPicksCudaExactlyWhenAGpuIsVisible) {
    absl::StatusOr<BackendChoice> choice = choose_backend({"auto", ""});
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_THAT(choice->reason, HasSubstr("--backend=auto"));
    if (gpu_visible()) {
        EXPECT_EQ(choice->backend->name(), "cuda");
        EXPECT_FALSE(choice->gpus.empty());
        ASSERT_TRUE(choice->topology.has_value());
        EXPECT_GE(choice->topology->num_gpus(), choice->backend->devices());
        EXPECT_FALSE(choice->topology_reason.empty());
    } else {
        EXPECT_EQ(choice->backend->name(), "cpu");
        EXPECT_THAT(choice->reason, cuda_backend_built() ? HasSubstr("no GPU is visible")
                                                         : HasSubstr("no CUDA backend"));
    }
}

TEST(BackendChoiceTest, CudaWithoutAGpuSaysSo) {
    if (gpu_visible()) {
        GTEST_SKIP() << "a GPU is visible: CudaOnVirtualDevices covers --backend=cuda";
    }
    absl::StatusOr<BackendChoice> cuda = choose_backend({"cuda", ""});
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(cuda.status().message()), HasSubstr("--backend=cuda"));
    EXPECT_THAT(std::string(cuda.status().message()), HasSubstr("--backend=cpu"));
}

TEST(BackendChoiceTest, CudaOnVirtualDevices) {
    if (!gpu_visible()) {
        EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED(
            "no CUDA GPU: this test runs on a machine with one (scripts/gpu-check)");
    }
    absl::StatusOr<BackendChoice> cuda = choose_backend({"cuda", "0,0,0,0"});
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_EQ(cuda->backend->name(), "cuda");
    EXPECT_EQ(cuda->backend->devices(), 4);
    EXPECT_THAT(cuda->reason, HasSubstr("[0,0,0,0]"));
    ASSERT_TRUE(cuda->topology.has_value());
    EXPECT_EQ(cuda->topology->num_gpus(), 4);
    absl::StatusOr<BackendChoice> missing = choose_backend({"cuda", "0,999"});
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(missing.status().message()), HasSubstr("999"));
}

} // namespace
} // namespace einsummable::runtime
