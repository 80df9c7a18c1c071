#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"
#include "compiler/logical/programme.h"

namespace einsummable::logical {

// Pricing by predicted time on a topology (docs/planner.md "Pricing by time: the time
// programme"), before any physical plan exists: pure functions, the terms the time programme
// (time_dp.h) composes — a candidate's own time (price_candidate), the exchange of an edge
// (exchange_seconds), the delivery of a saved output (delivery_seconds).
//
// Placement assumed: the producer's function spec j on device j, device d on GPU d — the
// identity placement compile_physical gives an operator without produced inputs; a consumer's
// function specs where synthesis puts them, next to their input (place_next_to). The compute
// term does not depend on it, since every function spec has a device of its own.
//
// Exchange: an α–β model of the topology's links. Transfers that start together finish at
//   latency + max over resources r of (bytes routed through r / capacity(r)),
// the topology's route per transfer (egress/ingress of a switch; the pair's NVLink or the shared
// PCIe bridge of a links machine): transfers on distinct resources run in parallel, those on
// one resource serialise. For one bottleneck resource this is what the fluid-flow simulator
// gives (max-min fair sharing moves a resource's bytes at its capacity). A transfer between
// unlinked GPUs of a links machine takes the bridge or, where it finishes sooner, a relay over
// two NVLinks through a third GPU, as optimized synthesis routes it: whole atoms, so the relay
// takes its two hops one after another (and a second latency). No multicast trees.
//
// Measured against the exchange simulator's time of the program synthesised for the same
// exchange (exprog::synthesize, then its makespan; tests/unit/logical/time_model_test.cc), as the
// ratio α–β / simulated, on one transfer over a 50 GB/s and a 25 GB/s NVLink pair and one
// through the unlinked pair 0 -> 5, two sharing the bridge, two on distinct links (dgx-v100),
// and a scatter of three from one GPU through a switch (dgx-a100):
//   - optimized synthesis (200 iterations, whole atoms): 1.0000 in every case; the test holds
//     them within 1%.
//   - naive synthesis (every atom sent direct): 1.0000 except through the bridge, where the
//     direct program is slower (0.945 for one transfer, 0.473 for two sharing it).

// The peak FLOP/s a kernel of `dtype` gets on `device`, and the topology key that gives it
// (for errors naming it). FP64 gets half the FP32 rate (no topology gives FP64 rates; as on
// A100/H100). A peak of 0 means the topology does not give it.
struct PeakFlops {
    double flops_per_s = 0.0;
    const char* key = "peak_f32";
};
PeakFlops peak_flops(const exprog::DeviceModel& device, ir::DType dtype);

// Seconds of function spec `k` of `spec` (a spec of `op`) as the whole-plan simulator times its
// kernel (exprog::kernel_seconds): FLOPs from op.flops (causal attention counts only the keys
// its queries attend to), dtype that of the first output, bytes its input blocks plus its output
// blocks (a log-sum-exp partial, one whose box another function spec writes too, with its
// statistics: ir::block_bytes), as lower() sizes the kernel's buffers. InvalidArgument naming
// the key when the function has FLOPs and the topology gives no peak for the dtype.
// Precondition: 0 <= k < spec.functions.size().
absl::StatusOr<double> function_seconds(const ir::Operator& op, const ir::JoinAggSpec& spec, int k,
                                        const exprog::Topology& topology);

// One transfer of an exchange: `bytes` from GPU src to GPU dst (src != dst).
struct Transfer {
    int src = 0;
    int dst = 0;
    double bytes = 0.0;
};

// The α–β time of transfers that all start together (above); 0 for none. InvalidArgument for a
// GPU out of range or src == dst.
absl::StatusOr<double> transfers_seconds(const exprog::Topology& topology,
                                         const std::vector<Transfer>& transfers);

// The terms of a candidate's own predicted time.
struct CandidateTime {
    // The slowest device: the largest function_seconds over the function specs (one per device).
    double compute_s = 0.0;
    // The ⊕ of output boxes written more than once: every other copy moves to the first
    // writer's device (α–β, all boxes together), then the slowest device adds its boxes
    // (memory-bound: m copies read and one written through HBM, plus the launch overhead, per
    // box).
    double aggregation_s = 0.0;

    double total() const { return compute_s + aggregation_s; }
};

// The predicted time of `spec` of `op` on `topology`, its inputs where its function specs read
// them (the exchanges that bring them are priced by exchange_seconds). InvalidArgument when the
// spec has more function specs than the topology has GPUs, or function_seconds's error.
absl::StatusOr<CandidateTime> price_candidate(const ir::Operator& op, const ir::JoinAggSpec& spec,
                                              const exprog::Topology& topology);

// Where a tensor's blocks lie: its distinct boxes, each on one device, and the size of one
// element. After its producer ran (held_of), each box lies at the device of the first function
// spec writing it (function spec j on device j; a box written by several is summed there:
// CandidateTime::aggregation_s).
struct HeldBlocks {
    std::vector<ir::Box> boxes;
    std::vector<int> devices;
    int64_t element_bytes = 0;

    friend auto operator<=>(const HeldBlocks&, const HeldBlocks&) = default;
};

// Output `output` of `spec` after it ran, elements of `element_bytes`.
HeldBlocks held_of(const ir::JoinAggSpec& spec, int output, int64_t element_bytes);

// The devices the consumer's function specs run on to read `wanted` (the block each reads) from
// `held`: greedily, the pair (function spec, device) with the most bytes already there first, as
// the exchange's synthesis places the consumer next to its largest input; on ties the identity.
// Function specs left over take the free devices in order. Precondition: wanted.size() <=
// devices.
std::vector<int> place_next_to(const HeldBlocks& held, const std::vector<ir::Box>& wanted,
                               int devices);

// The exchange bringing `wanted` (one block per consumer function spec) from `held`, the
// consumer placed next to it (place_next_to): as wait, the α–β time of every transfer together
// (transfers_seconds); as work, the slowest device's share of the kernels lowering adds around
// them (physical/lower.cc): a slice for every part of a held block that is not the whole block
// (sent, or kept for a block assembled locally), and a concat for every block read that is
// assembled from several parts. Nothing (no exchange program) when every block is where it is
// read. transfers_seconds's errors.
absl::StatusOr<EdgePrice> exchange_seconds(const HeldBlocks& held,
                                           const std::vector<ir::Box>& wanted, int devices,
                                           const exprog::Topology& topology);

// Seconds of delivering saved output `output` of `spec` (elements of `element_bytes`): lowering
// leaves every block on a device that wrote it — a block written by several function specs
// summed (CandidateTime::aggregation_s) at the writer holding the fewest output bytes so far,
// the first on ties — and each device copies its blocks to the host over its own host link, all
// devices at once (physical/lower.h, the simulator's offload).
double delivery_seconds(const ir::JoinAggSpec& spec, int output, int64_t element_bytes,
                        const exprog::Topology& topology);

} // namespace einsummable::logical
