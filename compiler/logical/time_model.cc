#include "compiler/logical/time_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/ir/partial_block.h"
#include "compiler/support/status_macros.h"

namespace einsummable::logical {

PeakFlops peak_flops(const exprog::DeviceModel& device, ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return {device.peak_f16, "peak_f16"};
    case ir::DType::bf16:
        return {device.peak_bf16, "peak_bf16"};
    case ir::DType::f32:
        return {device.peak_f32, "peak_f32"};
    case ir::DType::f64: // no topology gives FP64 rates; half the FP32 rate, as on A100/H100
        return {device.peak_f32 / 2.0, "peak_f32"};
    }
    return {0.0, "peak_f32"};
}

absl::StatusOr<double> function_seconds(const ir::Operator& op, const ir::JoinAggSpec& spec, int k,
                                        const exprog::Topology& topology) {
    const ir::FunctionSpec& function = spec.functions[k];
    const exprog::DeviceModel& device = topology.device();
    const ir::DType dtype = op.output_types()[0].dtype;
    const PeakFlops peak = peak_flops(device, dtype);
    const double flops = op.flops(function);
    if (flops > 0.0 && !(peak.flops_per_s > 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "operator ", op.kind(), " is ", ir::dtype_name(dtype), ", but topology '",
            topology.name(), "' gives no ", peak.key, " (docs/topologies.md \"Devices\")"));
    }
    int64_t bytes = 0;
    for (int i = 0; i < op.num_inputs(); ++i) {
        bytes += function.inputs[i].volume() * ir::dtype_size(op.input_types()[i].dtype);
    }
    for (int o = 0; o < op.num_outputs(); ++o) {
        // A partial written by several function specs carries its statistics (as lower() does).
        const bool stats = ir::carries_stats(spec.aggregations[o]) &&
                           std::count_if(spec.functions.begin(), spec.functions.end(),
                                         [&](const ir::FunctionSpec& other) {
                                             return other.outputs[o] == function.outputs[o];
                                         }) > 1;
        bytes += ir::block_bytes(function.outputs[o], op.output_types()[o].dtype, stats);
    }
    return exprog::kernel_seconds(device, op.kernel_class(), topology.hbm_bandwidth(),
                                  peak.flops_per_s, flops, static_cast<double>(bytes));
}

absl::StatusOr<double> transfers_seconds(const exprog::Topology& topology,
                                         const std::vector<Transfer>& transfers) {
    if (transfers.empty()) {
        return 0.0;
    }
    const std::vector<exprog::Resource>& resources = topology.resources();
    const int bridge = topology.find_resource("pcie-bridge");
    std::vector<double> load(resources.size(), 0.0);
    // The time the loaded resources of `route` would take with `bytes` more on each.
    const auto worst_with = [&](const std::vector<int>& route, double bytes) {
        double worst = 0.0;
        for (int resource : route) {
            worst = std::max(worst, (load[resource] + bytes) / resources[resource].capacity);
        }
        return worst;
    };
    // The time of one hop alone: bytes through its narrowest resource.
    const auto hop_s = [&](const std::vector<int>& route, double bytes) {
        double slowest = 0.0;
        for (int resource : route) {
            slowest = std::max(slowest, bytes / resources[resource].capacity);
        }
        return slowest;
    };
    bool relayed = false;
    double store_and_forward = 0.0; // the slowest relayed transfer: its two hops one after another
    for (const Transfer& transfer : transfers) {
        const std::vector<int>& route = topology.route(transfer.src, transfer.dst);
        if (route.empty()) {
            return absl::InvalidArgumentError(absl::StrCat("transfer ", transfer.src, " -> ",
                                                           transfer.dst, " has no route on '",
                                                           topology.name(), "'"));
        }
        std::vector<int> best = route;
        double best_serial = 0.0;
        const bool through_bridge =
            bridge >= 0 && std::find(route.begin(), route.end(), bridge) != route.end();
        if (through_bridge) { // or relayed over two NVLinks, as synthesis routes around it
            double best_time = worst_with(route, transfer.bytes);
            for (int via = 0; via < topology.num_gpus(); ++via) {
                if (via == transfer.src || via == transfer.dst) {
                    continue;
                }
                const std::vector<int>& first = topology.route(transfer.src, via);
                const std::vector<int>& second = topology.route(via, transfer.dst);
                std::vector<int> hops = first;
                hops.insert(hops.end(), second.begin(), second.end());
                if (std::find(hops.begin(), hops.end(), bridge) != hops.end()) {
                    continue;
                }
                // Whole atoms: the relay forwards the block once it has all of it.
                const double serial = hop_s(first, transfer.bytes) + hop_s(second, transfer.bytes);
                const double time =
                    std::max(worst_with(hops, transfer.bytes), std::max(serial, store_and_forward));
                if (time < best_time) {
                    best_time = time;
                    best = std::move(hops);
                    best_serial = serial;
                }
            }
        }
        if (best != route) {
            relayed = true;
            store_and_forward = std::max(store_and_forward, best_serial);
        }
        for (int resource : best) {
            load[resource] += transfer.bytes;
        }
    }
    double slowest = 0.0;
    for (size_t r = 0; r < load.size(); ++r) {
        slowest = std::max(slowest, load[r] / resources[r].capacity);
    }
    // A relay is a second transfer after the first: its latency once more.
    return topology.latency_s() * (relayed ? 2.0 : 1.0) + std::max(slowest, store_and_forward);
}

std::vector<Transfer> exchange_transfers(const std::vector<PlacedBox>& held,
                                         const std::vector<PlacedBox>& wanted, ir::DType dtype) {
    // The devices holding each distinct box, in `held` order.
    std::vector<std::pair<ir::Box, std::vector<int>>> boxes;
    for (const PlacedBox& block : held) {
        auto it = std::find_if(boxes.begin(), boxes.end(),
                               [&](const auto& entry) { return entry.first == block.box; });
        if (it == boxes.end()) {
            boxes.push_back({block.box, {block.device}});
        } else {
            it->second.push_back(block.device);
        }
    }
    std::vector<Transfer> transfers;
    for (const PlacedBox& block : wanted) {
        for (const auto& [box, devices] : boxes) {
            const std::optional<ir::Box> cell = box.intersect(block.box);
            if (!cell.has_value() ||
                std::find(devices.begin(), devices.end(), block.device) != devices.end()) {
                continue;
            }
            const double bytes = static_cast<double>(cell->volume() * ir::dtype_size(dtype));
            transfers.push_back({devices.front(), block.device, bytes});
        }
    }
    return transfers;
}

namespace {

// The ⊕ term: other copies to the first writer, then the slowest device's adds.
absl::StatusOr<double> aggregation_seconds(const ir::Operator& op, const ir::JoinAggSpec& spec,
                                           const exprog::Topology& topology) {
    std::vector<Transfer> transfers;
    std::map<int, double> add_s; // per device
    for (int o = 0; o < op.num_outputs(); ++o) {
        const bool stats = ir::carries_stats(spec.aggregations[o]);
        std::map<ir::Box, std::vector<int>> writers; // box -> devices (function k on device k)
        for (size_t k = 0; k < spec.functions.size(); ++k) {
            writers[spec.functions[k].outputs[o]].push_back(static_cast<int>(k));
        }
        for (const auto& [box, devices] : writers) {
            if (devices.size() < 2) {
                continue;
            }
            const double bytes =
                static_cast<double>(ir::block_bytes(box, op.output_types()[o].dtype, stats));
            for (size_t i = 1; i < devices.size(); ++i) {
                transfers.push_back({devices[i], devices[0], bytes});
            }
            const double moved = static_cast<double>(devices.size() + 1) * bytes;
            add_s[devices[0]] +=
                exprog::kernel_seconds(topology.device(), exprog::KernelClass::elementwise,
                                       topology.hbm_bandwidth(), 0.0, 0.0, moved);
        }
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, transfers_seconds(topology, transfers));
    double slowest_add = 0.0;
    for (const auto& [device, seconds_on_device] : add_s) {
        slowest_add = std::max(slowest_add, seconds_on_device);
    }
    return seconds + slowest_add;
}

} // namespace

absl::StatusOr<CandidateTime>
price_candidate(const ir::Operator& op, const ir::JoinAggSpec& spec,
                const exprog::Topology& topology,
                const std::vector<std::vector<PlacedBox>>& producers) {
    if (static_cast<int>(spec.functions.size()) > topology.num_gpus()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the spec has ", spec.functions.size(), " function specs, but topology '",
                         topology.name(), "' has ", topology.num_gpus(), " GPUs"));
    }
    if (static_cast<int>(producers.size()) != op.num_inputs()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "producers has ", producers.size(), " entries for ", op.num_inputs(), " inputs"));
    }
    CandidateTime time;
    for (int k = 0; k < static_cast<int>(spec.functions.size()); ++k) {
        EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, function_seconds(op, spec, k, topology));
        time.compute_s = std::max(time.compute_s, seconds);
    }
    std::vector<Transfer> transfers;
    for (int i = 0; i < op.num_inputs(); ++i) {
        if (producers[i].empty()) {
            continue;
        }
        std::vector<PlacedBox> wanted;
        for (size_t k = 0; k < spec.functions.size(); ++k) {
            wanted.push_back({spec.functions[k].inputs[i], static_cast<int>(k)});
        }
        std::vector<Transfer> input =
            exchange_transfers(producers[i], wanted, op.input_types()[i].dtype);
        transfers.insert(transfers.end(), input.begin(), input.end());
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(time.exchange_s, transfers_seconds(topology, transfers));
    EINSUMMABLE_ASSIGN_OR_RETURN(time.aggregation_s, aggregation_seconds(op, spec, topology));
    return time;
}

} // namespace einsummable::logical
