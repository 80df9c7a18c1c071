#include "runtime/cpu/cpu_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/support/status_macros.h"
#include "kernels/cpu/gemm.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/cpu/cpu_resident_memory.h"
#include "runtime/cpu/worker_pool.h"
#include "spdlog/spdlog.h"

namespace einsummable::runtime::cpu {
namespace {

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(const CpuBackendOptions& options)
        : devices_(std::max(options.devices, 1)),
          pool_(std::make_shared<WorkerPool>(devices_, std::max(options.threads_per_device, 1))),
          transport_(options.transport) {
        spdlog::debug("cpu backend: {} devices x {} worker threads", devices_,
                      std::max(options.threads_per_device, 1));
    }

    std::string name() const override { return "cpu"; }
    int devices() const override { return devices_; }
    KernelsInfo kernels() const override {
        const kernels::cpu::GemmLibraryInfo& gemm = kernels::cpu::gemm_library_info();
        KernelsInfo info{gemm.describe(), ""};
        if (gemm.below_cpu) {
            info.warning =
                absl::StrCat("the CPU backend's gemm library (", gemm.library, ") runs ",
                             gemm.f32_kernels, " kernels on a CPU that runs ", gemm.cpu_isa,
                             ": contractions and attention run slower than this CPU allows (is "
                             "DNNL_MAX_CPU_ISA set in the environment?)");
        }
        return info;
    }

    using Backend::prepare;
    absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const physical::ExecGraph& graph, std::shared_ptr<ResidentMemory> resident) override {
        return prepare(graph, std::move(resident), nullptr);
    }
    absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const physical::ExecGraph& graph, std::shared_ptr<ResidentMemory> resident,
            const support::Cancellation* cancellation) override {
        EINSUMMABLE_RETURN_IF_ERROR(
            support::check_cancelled(cancellation, "the backend's preparation"));
        EINSUMMABLE_RETURN_IF_ERROR(physical::check_exec_graph(graph, devices_));
        std::shared_ptr<const CpuResidentMemory> cpu_resident;
        if (resident != nullptr) {
            cpu_resident = std::dynamic_pointer_cast<const CpuResidentMemory>(resident);
            if (cpu_resident == nullptr) {
                return absl::InvalidArgumentError(
                    "the resident memory was not allocated by the cpu backend");
            }
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(
            std::unique_ptr<CpuExecutable> exe,
            CpuExecutable::create(graph, pool_, std::move(cpu_resident), cancellation, transport_));
        spdlog::debug("cpu backend: prepared {} nodes over {} buffers on {} devices",
                      graph.nodes.size(), graph.buffers.size(), graph.devices);
        return std::unique_ptr<Executable>(std::move(exe));
    }

    absl::StatusOr<std::shared_ptr<ResidentMemory>>
    allocate_resident(const std::vector<int64_t>& bytes) override {
        if (static_cast<int>(bytes.size()) > devices_) {
            return absl::InvalidArgumentError(absl::StrCat(
                "resident arenas for ", bytes.size(), " devices; the cpu backend has ", devices_));
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<CpuResidentMemory> memory,
                                     CpuResidentMemory::allocate(bytes));
        return std::shared_ptr<ResidentMemory>(std::move(memory));
    }

private:
    const int devices_;
    // Shared with the executables, so the workers outlive whichever of them goes last.
    std::shared_ptr<WorkerPool> pool_;
    std::shared_ptr<Transport> transport_;
};

} // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
    return std::make_unique<CpuBackend>(options);
}

} // namespace einsummable::runtime::cpu
