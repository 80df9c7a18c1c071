#include "runtime/cuda/cuda_executable.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/ir/partial_block.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/block_ops.h"
#include "kernels/cuda/cuda_status.h"

namespace einsummable::runtime::cuda {

using kernels::cuda::cuda_status;
using physical::Buffer;
using physical::BufferId;
using physical::ExecGraph;
using physical::ExecNode;
using physical::NodeKind;

namespace {

// Scratch regions and arenas start on this boundary (what cuBLASLt and vector loads want).
constexpr int64_t kAlignment = 256;

int64_t align_up(int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

absl::Status set_device(int gpu) {
    return cuda_status(cudaSetDevice(gpu), absl::StrCat("cudaSetDevice(", gpu, ")"));
}

std::string gpu_name(int gpu) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, gpu) != cudaSuccess) {
        cudaGetLastError();
        return "unknown GPU";
    }
    return properties.name;
}

// The resident memory `graph` needs, checked against `resident` (docs/cuda.md "Resident
// buffers"): InvalidArgument naming the device when it is missing, too small or on another GPU.
// Touches no GPU.
absl::Status check_resident(const ExecGraph& graph, const std::vector<int>& gpu_of_device,
                            const CudaResidentMemory* resident) {
    // Per device: the bytes its resident buffers reach, and whether it has any.
    std::vector<int64_t> needed(static_cast<size_t>(graph.devices), 0);
    std::vector<bool> reads(static_cast<size_t>(graph.devices), false);
    BufferId first = -1;
    for (BufferId id = 0; id < static_cast<BufferId>(graph.buffers.size()); ++id) {
        const Buffer& buffer = graph.buffers[id];
        if (!buffer.resident) {
            continue;
        }
        first = first < 0 ? id : first;
        const auto device = static_cast<size_t>(buffer.device);
        reads[device] = true;
        needed[device] = std::max(needed[device], buffer.offset + buffer.bytes());
    }
    const bool sized = std::any_of(graph.resident_bytes.begin(), graph.resident_bytes.end(),
                                   [](int64_t bytes) { return bytes > 0; });
    if (first < 0 && !sized) {
        return absl::OkStatus(); // nothing to read; any resident memory given is not used
    }
    if (resident == nullptr) {
        const std::string what =
            first < 0 ? std::string("the plan has resident arenas (ExecGraph::resident_bytes)")
                      : absl::StrCat("the plan reads resident buffers (the first: ",
                                     physical::buffer_label(graph, first), ")");
        return absl::InvalidArgumentError(absl::StrCat(
            what, " but was prepared without resident memory (Backend::allocate_resident)"));
    }
    const std::vector<int64_t> have = resident->allocated_bytes();
    for (int device = 0; device < graph.devices; ++device) {
        const auto d = static_cast<size_t>(device);
        if (d < graph.resident_bytes.size()) {
            needed[d] = std::max(needed[d], graph.resident_bytes[d]);
        }
        if (!reads[d] && needed[d] == 0) {
            continue;
        }
        const int64_t size = d < have.size() ? have[d] : 0;
        if (device >= resident->devices() || size < needed[d]) {
            return absl::InvalidArgumentError(
                absl::StrCat("device ", device, "'s resident memory has ", size,
                             " bytes; the plan's resident buffers need ", needed[d]));
        }
        if (resident->gpu(device) != gpu_of_device[d]) {
            return absl::InvalidArgumentError(absl::StrCat(
                "device ", device, "'s resident memory is on GPU ", resident->gpu(device),
                "; the plan runs device ", device, " on GPU ", gpu_of_device[d]));
        }
    }
    return absl::OkStatus();
}

// Prefixes a status's message with where it happened, keeping its code.
absl::Status annotate(const absl::Status& status, absl::string_view where) {
    if (status.ok()) {
        return status;
    }
    return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

} // namespace

absl::StatusOr<std::unique_ptr<CudaExecutable>>
CudaExecutable::create(const ExecGraph& graph, std::vector<int> gpu_of_device,
                       std::vector<std::vector<bool>> peer_access,
                       std::shared_ptr<CudaResidentMemory> resident, RankMessages messages) {
    if (static_cast<int>(gpu_of_device.size()) < graph.devices) {
        return absl::InvalidArgumentError(absl::StrCat("the plan uses ", graph.devices,
                                                       " devices; the backend maps ",
                                                       gpu_of_device.size(), " to GPUs"));
    }
    gpu_of_device.resize(static_cast<size_t>(graph.devices));
    for (int gpu : gpu_of_device) {
        if (gpu < 0 || static_cast<size_t>(gpu) >= peer_access.size() ||
            peer_access[static_cast<size_t>(gpu)].size() < peer_access.size()) {
            return absl::InvalidArgumentError(
                absl::StrCat("GPU ", gpu, " is not covered by the peer-access table (",
                             peer_access.size(), " GPUs)"));
        }
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_resident(graph, gpu_of_device, resident.get()));
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
        const NodeKind kind = graph.nodes[n].kind;
        if ((kind == NodeKind::send || kind == NodeKind::recv) && messages.transport == nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat(physical::node_label(graph, static_cast<int>(n)),
                             ": a rank's part of a graph split over processes needs the "
                             "rank's transport to the others (docs/cluster.md)"));
        }
    }
    // Freed by the destructor whatever step fails: a plan that does not fit takes nothing.
    std::unique_ptr<CudaExecutable> exe(new CudaExecutable(graph));
    exe->gpu_of_device_ = std::move(gpu_of_device);
    exe->peer_access_ = std::move(peer_access);
    exe->resident_ = std::move(resident);
    exe->messages_ = std::move(messages);
    EINSUMMABLE_RETURN_IF_ERROR(exe->prepare_kernels());
    EINSUMMABLE_RETURN_IF_ERROR(exe->allocate());
    GraphPlanOptions options;
    options.gpu_of_device = exe->gpu_of_device_;
    options.peer_access = exe->peer_access_;
    options.message_path = exe->messages_.nccl != nullptr ? MessagePath::device : MessagePath::host;
    for (const auto& kernel : exe->kernels_) {
        options.uses_scratch.push_back(kernel != nullptr && kernel->scratch_bytes() > 0);
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(GraphPlan plan, plan_graph(graph, options));
    exe->plan_ = std::move(plan);
    if (exe->plan_.staging_bytes > 0) {
        EINSUMMABLE_RETURN_IF_ERROR(cuda_status(
            cudaHostAlloc(reinterpret_cast<void**>(&exe->staging_),
                          static_cast<size_t>(exe->plan_.staging_bytes), cudaHostAllocPortable),
            absl::StrCat("cudaHostAlloc of ", exe->plan_.staging_bytes,
                         " bytes of staging memory for copies between GPUs without peer "
                         "access")));
    }
    int slots = 0;
    for (const GraphOp& op : exe->plan_.ops) {
        const bool message = op.kind == GraphOpKind::send || op.kind == GraphOpKind::recv;
        exe->slot_of_op_.push_back(message ? slots++ : -1);
    }
    if (slots > 0 && options.message_path == MessagePath::host) {
        EINSUMMABLE_ASSIGN_OR_RETURN(exe->staged_,
                                     StagedMessages::create(exe->messages_.transport, slots));
    }
    EINSUMMABLE_RETURN_IF_ERROR(exe->build_graph());
    exe->moved_.assign(static_cast<size_t>(graph.devices),
                       std::vector<int64_t>(static_cast<size_t>(graph.devices), 0));
    return exe;
}

CudaExecutable::~CudaExecutable() {
    // Errors here have nowhere to go; each call is still made so nothing leaks.
    staged_.reset(); // waits for sends still reading the staging memory
    if (exec_ != nullptr) {
        cudaGraphExecDestroy(exec_);
    }
    if (cuda_graph_ != nullptr) {
        cudaGraphDestroy(cuda_graph_);
    }
    for (size_t op_idx = 0; op_idx < events_.size(); ++op_idx) {
        if (events_[op_idx] != nullptr) {
            cudaSetDevice(gpu_of_device_[static_cast<size_t>(plan_.ops[op_idx].device)]);
            cudaEventDestroy(events_[op_idx]);
        }
    }
    kernels_.clear();
    // Library handles before the streams go. (cuDNN's handles are per GPU and outlive this;
    // they are given the stream on every use: kernels/cuda/attention_cudnn.cc.)
    libraries_.clear();
    for (size_t device = 0; device < arenas_.size(); ++device) {
        cudaSetDevice(gpu_of_device_[device]);
        if (arenas_[device] != nullptr) {
            cudaFree(arenas_[device]);
        }
    }
    for (size_t device = 0; device < streams_.size(); ++device) {
        if (streams_[device] != nullptr) {
            cudaSetDevice(gpu_of_device_[device]);
            cudaStreamDestroy(streams_[device]);
        }
    }
    if (staging_ != nullptr) {
        cudaFreeHost(staging_);
    }
}

absl::Status CudaExecutable::prepare_kernels() {
    const int devices = graph_.devices;
    for (int device = 0; device < devices; ++device) {
        const int gpu = gpu_of_device_[static_cast<size_t>(device)];
        EINSUMMABLE_RETURN_IF_ERROR(set_device(gpu));
        libraries_.push_back(std::make_unique<kernels::cuda::DeviceLibraries>(gpu));
        cudaStream_t stream = nullptr;
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                        absl::StrCat("cudaStreamCreate on GPU ", gpu)));
        streams_.push_back(stream);
    }
    scratch_bytes_.assign(static_cast<size_t>(devices), 0);
    kernels_.resize(graph_.nodes.size());
    for (size_t node_idx = 0; node_idx < graph_.nodes.size(); ++node_idx) {
        const ExecNode& node = graph_.nodes[node_idx];
        if (node.kind != NodeKind::kernel) {
            continue;
        }
        EINSUMMABLE_RETURN_IF_ERROR(set_device(gpu_of_device_[static_cast<size_t>(node.device)]));
        kernels::cuda::KernelRequest request;
        request.op = node.op;
        request.function = &node.spec;
        for (BufferId id : node.inputs) {
            request.input_dtypes.push_back(graph_.buffers[id].dtype);
        }
        for (BufferId id : node.outputs) {
            request.output_dtypes.push_back(graph_.buffers[id].dtype);
            request.output_stats.push_back(graph_.buffers[id].stats);
        }
        request.libraries = libraries_[static_cast<size_t>(node.device)].get();
        absl::StatusOr<std::unique_ptr<kernels::cuda::PreparedKernel>> kernel =
            kernels::cuda::prepare_kernel(request);
        if (!kernel.ok()) {
            return annotate(kernel.status(),
                            physical::node_label(graph_, static_cast<int>(node_idx)));
        }
        int64_t& scratch = scratch_bytes_[static_cast<size_t>(node.device)];
        scratch = std::max(scratch, align_up((*kernel)->scratch_bytes()));
        kernels_[node_idx] = *std::move(kernel);
    }
    return absl::OkStatus();
}

absl::Status CudaExecutable::allocate() {
    for (int device = 0; device < graph_.devices; ++device) {
        const int gpu = gpu_of_device_[static_cast<size_t>(device)];
        EINSUMMABLE_RETURN_IF_ERROR(set_device(gpu));
        const int64_t arena = align_up(
            graph_.arena_bytes.empty() ? 0 : graph_.arena_bytes[static_cast<size_t>(device)]);
        const int64_t scratch = scratch_bytes_[static_cast<size_t>(device)];
        // At least one alignment unit, so that every device has an address.
        const int64_t bytes = std::max(arena + scratch, kAlignment);
        void* base = nullptr;
        const cudaError_t error = cudaMalloc(&base, static_cast<size_t>(bytes));
        if (error != cudaSuccess) {
            cudaGetLastError(); // an allocation failure is not sticky; clear it
            size_t free_bytes = 0;
            size_t total_bytes = 0;
            cudaMemGetInfo(&free_bytes, &total_bytes);
            const std::string message = absl::StrCat(
                "device ", device, " (GPU ", gpu, ", ", gpu_name(gpu), "): the plan needs ", bytes,
                " bytes (arena ", arena, " + kernel scratch ", scratch, "); ", free_bytes, " of ",
                total_bytes, " bytes are free");
            if (error == cudaErrorMemoryAllocation) {
                return absl::ResourceExhaustedError(message);
            }
            return cuda_status(error, absl::StrCat("cudaMalloc for ", message));
        }
        arenas_.push_back(static_cast<std::byte*>(base));
        arena_bytes_.push_back(arena);
        // Zeroed once, as the CPU backend does: a buffer read before anything wrote it reads
        // zeros rather than another plan's leftovers.
        // On the device's own stream, and waited for: the graph's streams are non-blocking,
        // so work on the legacy default stream would not be ordered before them.
        cudaStream_t stream = streams_[static_cast<size_t>(device)];
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaMemsetAsync(base, 0, static_cast<size_t>(bytes), stream),
                        "cudaMemsetAsync of a new arena"));
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaStreamSynchronize(stream), "zeroing a new arena"));
    }
    // Peer access between every pair of GPUs the plan's copies may join directly.
    for (int a : gpu_of_device_) {
        for (int b : gpu_of_device_) {
            if (a == b || !peer_access_[static_cast<size_t>(a)][static_cast<size_t>(b)]) {
                continue;
            }
            EINSUMMABLE_RETURN_IF_ERROR(set_device(a));
            const cudaError_t error = cudaDeviceEnablePeerAccess(b, 0);
            if (error == cudaErrorPeerAccessAlreadyEnabled) {
                cudaGetLastError();
            } else if (error != cudaSuccess) {
                return cuda_status(
                    error, absl::StrCat("cudaDeviceEnablePeerAccess from GPU ", a, " to GPU ", b));
            }
        }
    }
    return absl::OkStatus();
}

std::byte* CudaExecutable::address(BufferId buffer) const {
    const Buffer& b = graph_.buffers[buffer];
    return (b.resident ? resident_->base(b.device) : arenas_[static_cast<size_t>(b.device)]) +
           b.offset;
}

template <typename Enqueue>
absl::Status CudaExecutable::add_captured(int device, const std::vector<cudaGraphNode_t>& deps,
                                          cudaGraphNode_t* node, Enqueue enqueue) {
    cudaStream_t stream = streams_[static_cast<size_t>(device)];
    EINSUMMABLE_RETURN_IF_ERROR(
        cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                    "cudaStreamBeginCapture"));
    const absl::Status work = enqueue(stream);
    cudaGraph_t child = nullptr;
    // Ending the capture reports what failed silently inside it (an illegal call during
    // capture invalidates it).
    const absl::Status end =
        cuda_status(cudaStreamEndCapture(stream, &child), "cudaStreamEndCapture");
    if (!work.ok() || !end.ok()) {
        if (child != nullptr) {
            cudaGraphDestroy(child);
        }
        return work.ok() ? end : work;
    }
    size_t captured = 0;
    absl::Status status =
        cuda_status(cudaGraphGetNodes(child, nullptr, &captured), "cudaGraphGetNodes");
    if (status.ok()) {
        status =
            captured == 0
                ? cuda_status(cudaGraphAddEmptyNode(node, cuda_graph_, deps.data(), deps.size()),
                              "cudaGraphAddEmptyNode")
                : cuda_status(cudaGraphAddChildGraphNode(node, cuda_graph_, deps.data(),
                                                         deps.size(), child),
                              "cudaGraphAddChildGraphNode");
    }
    cudaGraphDestroy(child);
    return status;
}

float* CudaExecutable::stats_address(BufferId buffer) const {
    return reinterpret_cast<float*>(address(buffer) + graph_.buffers[buffer].stats_offset());
}

std::byte* CudaExecutable::range_address(const MemoryRange& range) const {
    switch (range.space) {
    case MemorySpace::arena:
        return arenas_[static_cast<size_t>(range.device)] + range.offset;
    case MemorySpace::resident:
        return resident_->base(range.device) + range.offset;
    case MemorySpace::staging:
        return staging_ + range.offset;
    }
    return nullptr;
}

absl::Status CudaExecutable::enqueue_op(int op_idx, cudaStream_t stream) const {
    const GraphOp& op = plan_.ops[static_cast<size_t>(op_idx)];
    const ExecNode& exec_node = graph_.nodes[static_cast<size_t>(op.exec_node)];
    switch (op.kind) {
    case GraphOpKind::empty:
        return absl::OkStatus();
    case GraphOpKind::memcpy:
    case GraphOpKind::to_host:
    case GraphOpKind::from_host:
        // cudaMemcpyDefault: unified addressing tells device, peer and pinned host memory apart.
        return cuda_status(cudaMemcpyAsync(range_address(op.dst), range_address(op.src),
                                           static_cast<size_t>(op.src.bytes), cudaMemcpyDefault,
                                           stream),
                           "cudaMemcpyAsync");
    case GraphOpKind::send:
    case GraphOpKind::recv: {
        const int slot = slot_of_op_[static_cast<size_t>(op_idx)];
        const bool send = op.kind == GraphOpKind::send;
        const MemoryRange& range = send ? op.src : op.dst;
        std::byte* data = range.bytes > 0 ? range_address(range) : nullptr;
        const auto bytes = static_cast<size_t>(range.bytes);
        if (messages_.nccl != nullptr) {
            return send ? messages_.nccl->send(op.device, data, bytes, op.peer, op.peer_device,
                                               stream)
                        : messages_.nccl->recv(op.device, data, bytes, op.peer, op.peer_device,
                                               stream);
        }
        return send ? staged_->enqueue_send(slot, op.peer, op.tag, {data, bytes}, stream)
                    : staged_->enqueue_recv(slot, op.peer, op.tag, {data, bytes}, stream);
    }
    case GraphOpKind::region_copy: {
        const BufferId from_id = exec_node.inputs[static_cast<size_t>(op.input)];
        const BufferId to_id = exec_node.outputs[0];
        const Buffer& from = graph_.buffers[from_id];
        const Buffer& to = graph_.buffers[to_id];
        if (op.stats) {
            return kernels::cuda::enqueue_copy_region(
                stats_address(from_id), ir::stats_box(from.box), stats_address(to_id),
                ir::stats_box(to.box), ir::stats_box(op.region), sizeof(float), stream);
        }
        return kernels::cuda::enqueue_copy_region(address(from_id), from.box, address(to_id),
                                                  to.box, op.region, ir::dtype_size(from.dtype),
                                                  stream);
    }
    case GraphOpKind::aggregate: {
        std::vector<const void*> parts;
        for (BufferId id : exec_node.inputs) {
            parts.push_back(address(id));
        }
        const BufferId out_id = exec_node.outputs[0];
        const Buffer& out = graph_.buffers[out_id];
        if (exec_node.agg == ir::AggOp::top_k) {
            // Rows of k (value, index) pairs, the block's last two dimensions [k, 2]; the output
            // is a buffer of its own, never a part (the function also takes out == parts[0]).
            const int rank = out.box.rank();
            const int64_t k = rank >= 2 ? out.box[rank - 2].size() : 0;
            return kernels::cuda::enqueue_aggregate_top_k(
                out.dtype, parts, address(out_id), k > 0 ? out.elements() / (2 * k) : 0, k, stream);
        }
        if (ir::carries_stats(exec_node.agg)) {
            std::vector<const float*> part_stats;
            for (BufferId id : exec_node.inputs) {
                part_stats.push_back(stats_address(id));
            }
            const int64_t vectors = ir::stats_count(out.box);
            float* out_stats = out.stats ? stats_address(out_id) : nullptr;
            if (exec_node.agg == ir::AggOp::arg_max) {
                return kernels::cuda::enqueue_aggregate_arg_max(parts, part_stats, address(out_id),
                                                                out_stats, vectors, stream);
            }
            return kernels::cuda::enqueue_aggregate_log_sum_exp(
                out.dtype, parts, part_stats, address(out_id), out_stats, vectors,
                vectors > 0 ? out.elements() / vectors : 0, stream);
        }
        return kernels::cuda::enqueue_aggregate(exec_node.agg, out.dtype, parts, address(out_id),
                                                out.elements(), stream);
    }
    case GraphOpKind::kernel: {
        std::vector<const void*> inputs;
        for (BufferId id : exec_node.inputs) {
            inputs.push_back(address(id));
        }
        std::vector<void*> outputs;
        std::vector<void*> output_stats;
        for (BufferId id : exec_node.outputs) {
            outputs.push_back(address(id));
            output_stats.push_back(graph_.buffers[id].stats ? stats_address(id) : nullptr);
        }
        const auto device = static_cast<size_t>(op.device);
        const kernels::cuda::PreparedKernel& kernel = *kernels_[static_cast<size_t>(op.exec_node)];
        kernels::cuda::KernelLaunch launch;
        launch.stream = stream;
        launch.inputs = inputs;
        launch.outputs = outputs;
        launch.output_stats = output_stats;
        launch.scratch =
            kernel.scratch_bytes() > 0 ? arenas_[device] + arena_bytes_[device] : nullptr;
        return kernel.enqueue(launch);
    }
    }
    return absl::InternalError("unknown graph op kind");
}

absl::Status CudaExecutable::add_op(int op_idx, const std::vector<cudaGraphNode_t>& deps,
                                    cudaGraphNode_t* node) {
    const GraphOp& op = plan_.ops[static_cast<size_t>(op_idx)];
    EINSUMMABLE_RETURN_IF_ERROR(set_device(gpu_of_device_[static_cast<size_t>(op.device)]));
    switch (op.kind) {
    case GraphOpKind::empty:
        return cuda_status(cudaGraphAddEmptyNode(node, cuda_graph_, deps.data(), deps.size()),
                           "cudaGraphAddEmptyNode");
    case GraphOpKind::memcpy:
    case GraphOpKind::to_host:
    case GraphOpKind::from_host:
        return cuda_status(cudaGraphAddMemcpyNode1D(node, cuda_graph_, deps.data(), deps.size(),
                                                    range_address(op.dst), range_address(op.src),
                                                    static_cast<size_t>(op.src.bytes),
                                                    cudaMemcpyDefault),
                           "cudaGraphAddMemcpyNode1D");
    case GraphOpKind::region_copy:
    case GraphOpKind::aggregate:
    case GraphOpKind::kernel:
    case GraphOpKind::send:
    case GraphOpKind::recv:
        // Kernels, library calls and messages (NCCL's, or host functions) are captured from a
        // stream into a child graph node, which is how cuBLASLt and the cuDNN frontend put their
        // work into a graph.
        return add_captured(op.device, deps, node,
                            [&](cudaStream_t stream) { return enqueue_op(op_idx, stream); });
    }
    return absl::InternalError("unknown graph op kind");
}

absl::Status CudaExecutable::build_graph() {
    EINSUMMABLE_RETURN_IF_ERROR(cuda_status(cudaGraphCreate(&cuda_graph_, 0), "cudaGraphCreate"));
    std::vector<cudaGraphNode_t> nodes(plan_.ops.size(), nullptr);
    std::vector<cudaGraphNode_t> deps;
    for (size_t op_idx = 0; op_idx < plan_.ops.size(); ++op_idx) {
        deps.clear();
        for (int dep : plan_.ops[op_idx].deps) {
            deps.push_back(nodes[static_cast<size_t>(dep)]);
        }
        if (absl::Status status = add_op(static_cast<int>(op_idx), deps, &nodes[op_idx]);
            !status.ok()) {
            return annotate(status,
                            absl::StrCat(physical::node_label(graph_, plan_.ops[op_idx].exec_node),
                                         " (", graph_op_kind_name(plan_.ops[op_idx].kind), ")"));
        }
    }
    const int launch_gpu = gpu_of_device_[0];
    EINSUMMABLE_RETURN_IF_ERROR(set_device(launch_gpu));
    const auto start = std::chrono::steady_clock::now();
    EINSUMMABLE_RETURN_IF_ERROR(
        cuda_status(cudaGraphInstantiate(&exec_, cuda_graph_, 0), "cudaGraphInstantiate"));
    EINSUMMABLE_RETURN_IF_ERROR(
        cuda_status(cudaGraphUpload(exec_, streams_[0]), "cudaGraphUpload"));
    EINSUMMABLE_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(streams_[0]),
                                            "cudaStreamSynchronize after cudaGraphUpload"));
    instantiate_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return absl::OkStatus();
}

absl::Status CudaExecutable::check_transfer(BufferId buffer, size_t host_bytes) const {
    if (buffer < 0 || buffer >= static_cast<BufferId>(graph_.buffers.size())) {
        return absl::InvalidArgumentError(absl::StrCat("no buffer ", buffer));
    }
    if (static_cast<int64_t>(host_bytes) != graph_.buffers[buffer].bytes()) {
        return absl::InvalidArgumentError(absl::StrCat(physical::buffer_label(graph_, buffer),
                                                       " holds ", graph_.buffers[buffer].bytes(),
                                                       " bytes; the host side has ", host_bytes));
    }
    return set_device(gpu_of_device_[static_cast<size_t>(graph_.buffers[buffer].device)]);
}

absl::Status CudaExecutable::write_buffer(BufferId buffer, absl::Span<const std::byte> data) {
    EINSUMMABLE_RETURN_IF_ERROR(check_transfer(buffer, data.size()));
    if (graph_.buffers[buffer].resident) {
        return absl::InvalidArgumentError(
            absl::StrCat(physical::buffer_label(graph_, buffer),
                         " is resident: other plans read it too, so it is written once through the "
                         "ResidentMemory, not through one plan's executable"));
    }
    // On the buffer's device stream and waited for: a copy from pageable memory on the legacy
    // stream may return early, and the graph's non-blocking streams would not wait for it.
    cudaStream_t stream = streams_[static_cast<size_t>(graph_.buffers[buffer].device)];
    EINSUMMABLE_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(address(buffer), data.data(), data.size(), cudaMemcpyHostToDevice, stream),
        absl::StrCat("cudaMemcpyAsync into ", physical::buffer_label(graph_, buffer))));
    return cuda_status(cudaStreamSynchronize(stream),
                       absl::StrCat("writing ", physical::buffer_label(graph_, buffer)));
}

absl::Status CudaExecutable::read_buffer(BufferId buffer, absl::Span<std::byte> data) {
    EINSUMMABLE_RETURN_IF_ERROR(check_transfer(buffer, data.size()));
    cudaStream_t stream = streams_[static_cast<size_t>(graph_.buffers[buffer].device)];
    EINSUMMABLE_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(data.data(), address(buffer), data.size(), cudaMemcpyDeviceToHost, stream),
        absl::StrCat("cudaMemcpyAsync out of ", physical::buffer_label(graph_, buffer))));
    return cuda_status(cudaStreamSynchronize(stream),
                       absl::StrCat("reading ", physical::buffer_label(graph_, buffer)));
}

absl::Status CudaExecutable::run() {
    const int gpu = gpu_of_device_[0];
    EINSUMMABLE_RETURN_IF_ERROR(set_device(gpu));
    absl::Status ran =
        cuda_status(cudaGraphLaunch(exec_, streams_[0]), "cudaGraphLaunch of the plan");
    // A kernel's failure surfaces here, for the whole graph: the graph cannot say which node.
    if (ran.ok()) {
        ran = cuda_status(cudaStreamSynchronize(streams_[0]), "running the plan's CUDA graph");
    }
    // The messages' own failures, once every send is done with the staging memory.
    const absl::Status messages = staged_ != nullptr ? staged_->finish_run() : absl::OkStatus();
    EINSUMMABLE_RETURN_IF_ERROR(ran);
    EINSUMMABLE_RETURN_IF_ERROR(messages);
    count_moved();
    return absl::OkStatus();
}

absl::Status CudaExecutable::create_events() {
    // All or none: a failure part way leaves events_ empty for the next call to retry.
    std::vector<cudaEvent_t> events(plan_.ops.size(), nullptr);
    absl::Status created = absl::OkStatus();
    for (size_t op_idx = 0; op_idx < plan_.ops.size() && created.ok(); ++op_idx) {
        created = set_device(gpu_of_device_[static_cast<size_t>(plan_.ops[op_idx].device)]);
        if (created.ok()) {
            created = cuda_status(cudaEventCreateWithFlags(&events[op_idx], cudaEventDisableTiming),
                                  "cudaEventCreate");
        }
    }
    if (!created.ok()) {
        for (size_t op_idx = 0; op_idx < events.size(); ++op_idx) {
            if (events[op_idx] != nullptr) {
                cudaSetDevice(gpu_of_device_[static_cast<size_t>(plan_.ops[op_idx].device)]);
                cudaEventDestroy(events[op_idx]);
            }
        }
        return created;
    }
    events_ = std::move(events);
    return absl::OkStatus();
}

absl::Status CudaExecutable::issue_eager() {
    for (size_t op_idx = 0; op_idx < plan_.ops.size(); ++op_idx) {
        const GraphOp& op = plan_.ops[op_idx];
        const auto device = static_cast<size_t>(op.device);
        cudaStream_t stream = streams_[device];
        absl::Status status = set_device(gpu_of_device_[device]);
        for (int dep : op.deps) {
            // Work on one stream runs in order; only other devices' deps need an event.
            if (status.ok() && plan_.ops[static_cast<size_t>(dep)].device != op.device) {
                status =
                    cuda_status(cudaStreamWaitEvent(stream, events_[static_cast<size_t>(dep)], 0),
                                "cudaStreamWaitEvent");
            }
        }
        if (status.ok()) {
            status = enqueue_op(static_cast<int>(op_idx), stream);
        }
        if (status.ok()) {
            status = cuda_status(cudaEventRecord(events_[op_idx], stream), "cudaEventRecord");
        }
        if (!status.ok()) {
            return annotate(status, absl::StrCat(physical::node_label(graph_, op.exec_node), " (",
                                                 graph_op_kind_name(op.kind), ")"));
        }
    }
    return absl::OkStatus();
}

absl::Status CudaExecutable::run_eager() {
    if (events_.empty()) {
        EINSUMMABLE_RETURN_IF_ERROR(create_events());
    }
    const absl::Status issued = issue_eager();
    // Every stream is waited for, whatever failed, so that the next run does not race with
    // work already issued on the arenas.
    absl::Status finished = absl::OkStatus();
    for (size_t device = 0; device < streams_.size(); ++device) {
        absl::Status status = set_device(gpu_of_device_[device]);
        if (status.ok()) {
            status =
                cuda_status(cudaStreamSynchronize(streams_[device]), "running the plan eagerly");
        }
        if (finished.ok()) {
            finished = status;
        }
    }
    const absl::Status messages = staged_ != nullptr ? staged_->finish_run() : absl::OkStatus();
    if (!issued.ok()) {
        return issued;
    }
    if (!finished.ok()) {
        return finished;
    }
    EINSUMMABLE_RETURN_IF_ERROR(messages);
    count_moved();
    return absl::OkStatus();
}

void CudaExecutable::count_moved() {
    const std::vector<std::vector<int64_t>> copied = graph_.copy_bytes();
    for (size_t src = 0; src < copied.size(); ++src) {
        for (size_t dst = 0; dst < copied[src].size(); ++dst) {
            moved_[src][dst] += copied[src][dst];
        }
    }
}

std::vector<std::vector<int64_t>> CudaExecutable::bytes_moved() const {
    return moved_;
}

std::vector<int64_t> CudaExecutable::allocated_bytes() const {
    std::vector<int64_t> bytes;
    for (size_t device = 0; device < arena_bytes_.size(); ++device) {
        bytes.push_back(std::max(arena_bytes_[device] + scratch_bytes_[device], kAlignment));
    }
    return bytes;
}

} // namespace einsummable::runtime::cuda
