#include "compiler/logical/time_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
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
    case ir::DType::i32: // integers are only gathered and copied (no FLOPs); priced as f32
    case ir::DType::i64:
        return {device.peak_f32, "peak_f32"};
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
    double bytes = 0.0;
    for (int i = 0; i < op.num_inputs(); ++i) {
        bytes += op.input_bytes_read(function, i);
    }
    for (int o = 0; o < op.num_outputs(); ++o) {
        // A partial written by several function specs carries its statistics (as lower() does).
        const bool stats = ir::carries_stats(spec.aggregations[o]) &&
                           std::count_if(spec.functions.begin(), spec.functions.end(),
                                         [&](const ir::FunctionSpec& other) {
                                             return other.outputs[o] == function.outputs[o];
                                         }) > 1;
        bytes += static_cast<double>(
            ir::block_bytes(function.outputs[o], op.output_types()[o].dtype, stats));
    }
    return exprog::kernel_seconds(device, op.kernel_class(), topology.hbm_bandwidth(),
                                  peak.flops_per_s, flops, bytes);
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

absl::StatusOr<CandidateTime> price_candidate(const ir::Operator& op, const ir::JoinAggSpec& spec,
                                              const exprog::Topology& topology) {
    if (static_cast<int>(spec.functions.size()) > topology.num_gpus()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the spec has ", spec.functions.size(), " function specs, but topology '",
                         topology.name(), "' has ", topology.num_gpus(), " GPUs"));
    }
    CandidateTime time;
    for (int k = 0; k < static_cast<int>(spec.functions.size()); ++k) {
        EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, function_seconds(op, spec, k, topology));
        time.compute_s = std::max(time.compute_s, seconds);
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(time.aggregation_s, aggregation_seconds(op, spec, topology));
    return time;
}

HeldBlocks held_of(const ir::JoinAggSpec& spec, int output, int64_t element_bytes) {
    HeldBlocks held;
    held.element_bytes = element_bytes;
    for (size_t j = 0; j < spec.functions.size(); ++j) {
        const ir::Box& box = spec.functions[j].outputs[output];
        if (std::find(held.boxes.begin(), held.boxes.end(), box) == held.boxes.end()) {
            held.boxes.push_back(box);
            held.devices.push_back(static_cast<int>(j));
        }
    }
    return held;
}

std::vector<int> place_next_to(const HeldBlocks& held, const std::vector<ir::Box>& wanted,
                               int devices) {
    const int functions = static_cast<int>(wanted.size());
    std::vector<std::vector<int64_t>> local(functions, std::vector<int64_t>(devices, 0));
    for (int k = 0; k < functions; ++k) {
        for (size_t b = 0; b < held.boxes.size(); ++b) {
            if (std::optional<ir::Box> cell = held.boxes[b].intersect(wanted[k])) {
                local[k][held.devices[b]] += cell->volume();
            }
        }
    }
    struct Pair {
        int64_t bytes;
        int k;
        int d;
    };
    std::vector<Pair> pairs;
    for (int k = 0; k < functions; ++k) {
        for (int d = 0; d < devices; ++d) {
            if (local[k][d] > 0) {
                pairs.push_back({local[k][d], k, d});
            }
        }
    }
    std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) {
        if (a.bytes != b.bytes) {
            return a.bytes > b.bytes;
        }
        if ((a.k == a.d) != (b.k == b.d)) {
            return a.k == a.d;
        }
        return std::pair(a.k, a.d) < std::pair(b.k, b.d);
    });
    std::vector<int> placement(functions, -1);
    std::vector<bool> taken(devices, false);
    for (const Pair& pair : pairs) {
        if (placement[pair.k] < 0 && !taken[pair.d]) {
            placement[pair.k] = pair.d;
            taken[pair.d] = true;
        }
    }
    for (int k = 0; k < functions; ++k) {
        if (placement[k] >= 0) {
            continue;
        }
        int device = k < devices && !taken[k] ? k : 0; // the identity when it is free
        while (taken[device]) {
            ++device;
        }
        placement[k] = device;
        taken[device] = true;
    }
    return placement;
}

absl::StatusOr<EdgePrice> exchange_seconds(const HeldBlocks& held,
                                           const std::vector<ir::Box>& wanted, int devices,
                                           const exprog::Topology& topology) {
    const std::vector<int> placement = place_next_to(held, wanted, devices);
    std::vector<Transfer> transfers;
    std::vector<double> kernels_s(devices, 0.0);
    const auto kernel = [&](double bytes) {
        // A slice or concat reads and writes its bytes (the simulator's data-movement kernel).
        return exprog::kernel_seconds(topology.device(), support::KernelClass::elementwise,
                                      topology.hbm_bandwidth(), 0.0, 0.0, 2.0 * bytes);
    };
    std::set<std::pair<size_t, ir::Box>> sliced; // (held block, part): one slice each
    for (size_t k = 0; k < wanted.size(); ++k) {
        int parts = 0;
        bool moved = false;
        for (size_t b = 0; b < held.boxes.size(); ++b) {
            std::optional<ir::Box> cell = held.boxes[b].intersect(wanted[k]);
            if (!cell.has_value()) {
                continue;
            }
            ++parts;
            const double bytes = static_cast<double>(cell->volume() * held.element_bytes);
            if (held.devices[b] != placement[k]) {
                transfers.push_back({held.devices[b], placement[k], bytes});
                moved = true;
            }
            if (*cell != held.boxes[b] && sliced.emplace(b, *cell).second) {
                kernels_s[held.devices[b]] += kernel(bytes);
            }
        }
        if (parts > 1 && moved) {
            kernels_s[placement[k]] +=
                kernel(static_cast<double>(wanted[k].volume() * held.element_bytes));
        }
    }
    if (transfers.empty()) {
        return EdgePrice{}; // the blocks are where they are read: no exchange program
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, transfers_seconds(topology, transfers));
    return EdgePrice{*std::max_element(kernels_s.begin(), kernels_s.end()), seconds};
}

double delivery_seconds(const ir::JoinAggSpec& spec, int output, int64_t element_bytes,
                        const exprog::Topology& topology) {
    std::vector<std::pair<ir::Box, std::vector<int>>> writers; // in first-writer order
    for (size_t k = 0; k < spec.functions.size(); ++k) {
        const ir::Box& box = spec.functions[k].outputs[output];
        auto it = std::find_if(writers.begin(), writers.end(),
                               [&](const auto& entry) { return entry.first == box; });
        if (it == writers.end()) {
            writers.push_back({box, {static_cast<int>(k)}});
        } else {
            it->second.push_back(static_cast<int>(k));
        }
    }
    std::map<int, double> held; // bytes per device
    for (const auto& [box, devices] : writers) {
        int holder = devices.front();
        for (int device : devices) {
            if (held[device] < held[holder]) {
                holder = device;
            }
        }
        held[holder] += static_cast<double>(box.volume() * element_bytes);
    }
    double most = 0.0;
    for (const auto& [device, bytes] : held) {
        most = std::max(most, bytes);
    }
    return topology.latency_s() + most / topology.host_bandwidth();
}

} // namespace einsummable::logical
