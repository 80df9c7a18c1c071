// The cluster backend over MPI processes (docs/cluster.md), run by ctest as
// `mpirun -np 2 cluster_mpi_test`: rank 1 serves rank 0's requests with a CPU backend of 4
// virtual devices; rank 0 runs the tests against the 2 x 4 cluster — every planner and schedule
// on the FFN, the LLaMA block and a chain give bitwise the results of one process with 8 devices,
// with the same bytes per device pair — then shuts rank 1 down. Without MPI's launcher it runs
// as one rank and says so.

#include <cstdlib>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/cluster/cluster_backend.h"
#include "runtime/cluster/mpi_cluster.h"
#include "runtime/cluster/rank_worker.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/unit/runtime/cluster_cases.h"

namespace einsummable::runtime {
namespace {

constexpr char kVersion[] = "mpi-test";
constexpr int kDevicesPerRank = 4;

std::shared_ptr<cluster::MpiCluster>& mpi() {
    static std::shared_ptr<cluster::MpiCluster> instance;
    return instance;
}

std::shared_ptr<Backend>& cluster_backend() {
    static std::shared_ptr<Backend> backend;
    return backend;
}

std::shared_ptr<Backend> local_backend() {
    cpu::CpuBackendOptions options;
    options.devices = kDevicesPerRank;
    options.transport = mpi()->transport();
    return cpu::make_cpu_backend(options);
}

class MpiClusterMatrix : public ::testing::TestWithParam<testing::PlanCase> {};

TEST_P(MpiClusterMatrix, TwoProcessesOfFourGiveBitwiseTheResultsOfOneProcessOfEight) {
    testing::expect_cluster_matches_one_process(GetParam(), cluster_backend());
}

INSTANTIATE_TEST_SUITE_P(Workloads, MpiClusterMatrix,
                         ::testing::ValuesIn(testing::cluster_matrix()), testing::plan_case_name);

TEST(MpiCluster, RanksAreTheLaunchersProcesses) {
    EXPECT_EQ(mpi()->ranks(), 2);
    EXPECT_EQ(mpi()->rank(), 0);
    EXPECT_EQ(cluster_backend()->devices(), 2 * kDevicesPerRank);
}

} // namespace
} // namespace einsummable::runtime

int main(int argc, char** argv) {
    using namespace einsummable::runtime;
    if (!cluster::launched_by_mpi()) {
        std::cerr << "cluster_mpi_test: not started by an MPI launcher; run it with "
                     "`mpirun -np 2 cluster_mpi_test`\n";
        return 1;
    }
    absl::StatusOr<std::shared_ptr<cluster::MpiCluster>> started = cluster::MpiCluster::start();
    if (!started.ok()) {
        std::cerr << "cluster_mpi_test: " << started.status() << "\n";
        return 1;
    }
    mpi() = *started;
    if (mpi()->rank() != 0) {
        cluster::RankWorker worker(mpi()->rank(), local_backend(), kVersion);
        absl::Status served = mpi()->serve(worker);
        mpi()->stop();
        if (!served.ok()) {
            std::cerr << "rank " << worker.rank() << ": " << served << "\n";
            return 1;
        }
        return 0;
    }
    ::testing::InitGoogleTest(&argc, argv);
    cluster::ClusterOptions options;
    options.version = kVersion;
    options.rank_timeout = std::chrono::seconds(120);
    absl::StatusOr<std::shared_ptr<Backend>> backend =
        cluster::make_cluster_backend(local_backend(), mpi()->channel(), options);
    if (!backend.ok()) {
        std::cerr << "cluster_mpi_test: " << backend.status() << "\n";
        mpi()->stop();
        return 1;
    }
    cluster_backend() = *backend;
    const int result = RUN_ALL_TESTS();
    cluster_backend().reset();
    mpi()->stop();
    return result;
}
