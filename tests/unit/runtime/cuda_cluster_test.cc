// The CUDA backend running ranks' parts of a plan split over processes (docs/cluster.md, "The
// CUDA backend"), inside one process: rank backends joined by the loopback transport, driven by
// the cluster backend through the in-process rank channel, as cluster_test.cc does with CPU
// backends. Each rank's part is one CUDA graph with its messages in it.
//   - mpi path (through pinned host memory): two ranks of four virtual devices, both on GPU 0,
//     give bitwise the results of one CUDA backend of eight virtual devices on GPU 0, for the
//     DP's and the random planner's plans on the FFN, the LLaMA block and a chain;
//   - nccl path: NCCL refuses two ranks on one GPU, and says to use the mpi path; with two GPUs,
//     ranks on GPU 0 and GPU 1 give bitwise the results of one backend on [0,0,0,0,1,1,1,1];
//     NCCL's start refuses ranks whose devices sit differently on their GPUs (no GPU needed).
// Needs a GPU (skips without one; scripts/gpu-check runs it), the nccl pair two.

#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device_info.h"
#include "runtime/cluster/cluster_backend.h"
#include "runtime/cluster/local_rank_channel.h"
#include "runtime/cluster/rank_worker.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/loopback_transport.h"
#include "tests/unit/gpu_required.h"
#include "tests/unit/runtime/cluster_cases.h"

namespace einsummable::runtime {
namespace {

using cuda::RankTransportKind;
using ::testing::HasSubstr;

constexpr char kVersion[] = "test-version";

int visible_gpus() {
    absl::StatusOr<std::vector<kernels::cuda::DeviceInfo>> gpus = kernels::cuda::list_devices();
    return gpus.ok() ? static_cast<int>(gpus->size()) : 0;
}

#define SKIP_WITHOUT_GPU()                                                                         \
    do {                                                                                           \
        if (visible_gpus() == 0) {                                                                 \
            EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED("no CUDA GPU: this test runs on a machine with "  \
                                                 "one (scripts/gpu-check)");                       \
        }                                                                                          \
    } while (0)

struct CudaCluster {
    std::shared_ptr<LoopbackNetwork> network;
    std::shared_ptr<cluster::LocalRankChannel> channel;
    std::shared_ptr<Backend> backend;
};

// One CUDA backend per rank (rank r on the GPUs gpus_of_rank[r] names), all made at once (with
// nccl, making them joins NCCL's communicators, which every rank must do together), then the
// cluster backend over them.
absl::StatusOr<CudaCluster> start_cluster(const std::vector<std::vector<int>>& gpus_of_rank,
                                          RankTransportKind kind) {
    const int ranks = static_cast<int>(gpus_of_rank.size());
    CudaCluster cluster;
    cluster.network = std::make_shared<LoopbackNetwork>(ranks);
    std::vector<absl::StatusOr<std::unique_ptr<Backend>>> made;
    for (int r = 0; r < ranks; ++r) {
        made.emplace_back(absl::InternalError("not made"));
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
        threads.emplace_back([&, r] {
            cuda::CudaBackendOptions options;
            options.device_list = gpus_of_rank[r];
            options.transport = cluster.network->transport(r);
            options.rank_transport = kind;
            made[r] = cuda::make_cuda_backend(options);
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    std::vector<std::shared_ptr<cluster::RankWorker>> workers(ranks);
    for (int r = 0; r < ranks; ++r) {
        EINSUMMABLE_RETURN_IF_ERROR(made[r].status());
        if (r > 0) {
            workers[r] = std::make_shared<cluster::RankWorker>(
                r, std::shared_ptr<Backend>(*std::move(made[r])), kVersion);
        }
    }
    cluster::ClusterOptions options;
    options.version = kVersion;
    cluster.channel =
        std::make_shared<cluster::LocalRankChannel>(std::move(workers), cluster.network);
    EINSUMMABLE_ASSIGN_OR_RETURN(cluster.backend, cluster::make_cluster_backend(
                                                      std::shared_ptr<Backend>(*std::move(made[0])),
                                                      cluster.channel, options));
    return cluster;
}

std::shared_ptr<Backend> one_backend(std::vector<int> gpus) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = cuda::make_cuda_backend({std::move(gpus)});
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? std::shared_ptr<Backend>(*std::move(backend)) : nullptr;
}

class CudaClusterMatrix : public ::testing::TestWithParam<testing::PlanCase> {};

TEST_P(CudaClusterMatrix, TwoRanksOnOneGpuThroughHostMemoryMatchOneBackendBitwise) {
    SKIP_WITHOUT_GPU();
    absl::StatusOr<CudaCluster> cluster =
        start_cluster({{0, 0, 0, 0}, {0, 0, 0, 0}}, RankTransportKind::mpi);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    testing::expect_cluster_matches_one_process(GetParam(), cluster->backend, 2,
                                                one_backend(std::vector<int>(8, 0)));
}

TEST_P(CudaClusterMatrix, TwoRanksOnTwoGpusOverNcclMatchOneBackendBitwise) {
    SKIP_WITHOUT_GPU();
    if (visible_gpus() < 2) {
        GTEST_SKIP() << "NCCL needs a GPU per rank: this test needs two GPUs";
    }
    absl::StatusOr<CudaCluster> cluster =
        start_cluster({{0, 0, 0, 0}, {1, 1, 1, 1}}, RankTransportKind::nccl);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    testing::expect_cluster_matches_one_process(GetParam(), cluster->backend, 2,
                                                one_backend({0, 0, 0, 0, 1, 1, 1, 1}));
}

// The CPU cluster tests run every planner x schedule; here what the GPU adds is the messages'
// path, so the cases are the DP's plans and the random planner's (which spread over both
// ranks), with the optimized programs: 6 cases, within the GPU check's budget.
std::vector<testing::PlanCase> gpu_cases() {
    std::vector<testing::PlanCase> cases;
    for (const testing::PlanCase& c : testing::cluster_matrix()) {
        if (c.planner != logical::Planner::greedy &&
            c.schedule == exprog::SynthesisMode::optimized) {
            cases.push_back(c);
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Workloads, CudaClusterMatrix, ::testing::ValuesIn(gpu_cases()),
                         testing::plan_case_name);

TEST(CudaCluster, NcclRefusesTwoRanksOnOneGpuAndSaysWhatToUse) {
    SKIP_WITHOUT_GPU();
    absl::StatusOr<CudaCluster> cluster = start_cluster({{0, 0}, {0, 0}}, RankTransportKind::nccl);
    ASSERT_FALSE(cluster.ok());
    std::cout << cluster.status() << "\n";
    EXPECT_THAT(std::string(cluster.status().message()), HasSubstr("--cuda_rank_transport=mpi"));
}

// NCCL's start over two ranks (its id from rank 0, every rank's answer) refuses ranks whose
// devices sit differently on their GPUs, on both ranks and before any GPU is touched; GPU
// ordinals themselves may differ (they are local to each node). Needs NCCL's library (the CUDA
// toolkit's), not a GPU.
TEST(NcclComms, RanksWhoseDevicesSitDifferentlyOnTheirGpusAreRefusedOnEveryRank) {
    if (absl::Status nccl = cuda::nccl_available(); !nccl.ok()) {
        GTEST_SKIP() << nccl;
    }
    LoopbackNetwork network(2);
    const std::vector<std::vector<int>> lists = {{4, 4, 5, 5}, {0, 1, 1, 1}};
    std::vector<absl::Status> results(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
            results[r] = cuda::NcclComms::create(*network.transport(r), lists[r]).status();
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    for (int r = 0; r < 2; ++r) {
        SCOPED_TRACE(absl::StrCat("rank ", r));
        if (absl::IsFailedPrecondition(results[r]) &&
            absl::StrContains(results[r].message(), "ncclGetUniqueId")) {
            GTEST_SKIP() << "NCCL cannot make an id on this machine: " << results[r];
        }
        EXPECT_EQ(results[r].code(), absl::StatusCode::kInvalidArgument) << results[r];
        EXPECT_THAT(std::string(results[r].message()), HasSubstr("[0,0,1,1]"));
        EXPECT_THAT(std::string(results[r].message()), HasSubstr("same shape of --devices"));
    }
    EXPECT_THAT(std::string(results[1].message()), HasSubstr("[0,1,1,1]"));
}

} // namespace
} // namespace einsummable::runtime
