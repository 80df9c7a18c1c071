#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"

namespace einsummable::logical {

// Pricing one candidate by predicted time on a topology (docs/planner.md "Pricing by time (not
// yet the default)"), before any physical plan exists: pure functions, not used by the
// optimiser yet.
//
// Placement assumed: function spec k on device k, device d on GPU d — the identity placement
// compile_physical gives an operator without produced inputs. With produced inputs, synthesis
// may permute the devices; that changes which transfers the exchange makes but not the compute
// term, since every function spec has a device of its own.
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

// A block of a tensor on a device.
struct PlacedBox {
    ir::Box box;
    int device = 0;
};

// The transfers that bring the blocks `wanted` from the blocks `held` (disjoint boxes, each on
// one device or, for replicas, on several): for every wanted block and every held box it
// intersects, the intersection's bytes of `dtype`, from the device holding it — none when the
// wanted block's own device holds it, else the first in `held` order.
std::vector<Transfer> exchange_transfers(const std::vector<PlacedBox>& held,
                                         const std::vector<PlacedBox>& wanted, ir::DType dtype);

// The terms of a candidate's predicted time.
struct CandidateTime {
    // The slowest device: the largest function_seconds over the function specs (one per device).
    double compute_s = 0.0;
    // Bringing every produced input from its producer's blocks to the blocks the function specs
    // read: the α–β time of all those transfers together.
    double exchange_s = 0.0;
    // The ⊕ of output boxes written more than once: every other copy moves to the first
    // writer's device (α–β, all boxes together), then the slowest device adds its boxes
    // (memory-bound: m copies read and one written through HBM, plus the launch overhead, per
    // box).
    double aggregation_s = 0.0;

    double total() const { return compute_s + exchange_s + aggregation_s; }
};

// The predicted time of `spec` of `op` on `topology`. `producers` has one entry per input of
// op: the producer's output blocks and their devices, or empty for an input that load() writes
// straight into the blocks it is read in (a graph input: no exchange). InvalidArgument when the
// spec has more function specs than the topology has GPUs, when producers has the wrong size,
// or function_seconds's error.
absl::StatusOr<CandidateTime> price_candidate(const ir::Operator& op, const ir::JoinAggSpec& spec,
                                              const exprog::Topology& topology,
                                              const std::vector<std::vector<PlacedBox>>& producers);

} // namespace einsummable::logical
