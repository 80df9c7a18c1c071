#include "compiler/exprog/topology.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/support/lexer.h"
#include "compiler/support/status_macros.h"

namespace einsummable::exprog {

namespace {

// Far more than any machine the project targets; keeps the num_gpus² route table small.
constexpr int kMaxGpus = 1024;

bool positive_finite(double value) {
    return std::isfinite(value) && value > 0.0;
}

std::string pair_name(int a, int b) {
    return absl::StrCat(a, "-", b);
}

absl::Status check_common(int num_gpus, double hbm_bandwidth, double latency_s) {
    if (num_gpus < 1) {
        return absl::InvalidArgumentError(absl::StrCat("gpus must be at least 1, got ", num_gpus));
    }
    if (num_gpus > kMaxGpus) {
        return absl::InvalidArgumentError(
            absl::StrCat("gpus must be at most ", kMaxGpus, ", got ", num_gpus));
    }
    if (!positive_finite(hbm_bandwidth)) {
        return absl::InvalidArgumentError(
            absl::StrCat("hbm_bandwidth must be positive and finite, got ", hbm_bandwidth));
    }
    if (!std::isfinite(latency_s) || latency_s < 0.0) {
        return absl::InvalidArgumentError(
            absl::StrCat("latency must be finite and not negative, got ", latency_s, " s"));
    }
    return absl::OkStatus();
}

// "%.15g": short for the values people write, and parse(to_text()) gives them back.
std::string number(double value) {
    return absl::StrFormat("%.15g", value);
}

std::string bandwidth_text(double bytes_per_s) {
    return absl::StrCat(number(bytes_per_s / 1e9), " GB/s");
}

// A kernel class's key: "gemm_compute_efficiency" for (gemm, "compute_efficiency").
std::string class_key(KernelClass kernel_class, absl::string_view field) {
    return absl::StrCat(support::kernel_class_name(kernel_class), "_", field);
}

} // namespace

absl::string_view topology_kind_name(TopologyKind kind) {
    switch (kind) {
    case TopologyKind::nvswitch:
        return "switch";
    case TopologyKind::links:
        return "links";
    case TopologyKind::cluster:
        return "cluster";
    }
    return "?";
}

int Topology::add_resource(std::string name, double capacity) {
    resources_.push_back(Resource{std::move(name), capacity});
    return static_cast<int>(resources_.size()) - 1;
}

int Topology::find_resource(absl::string_view name) const {
    for (size_t idx = 0; idx < resources_.size(); ++idx) {
        if (resources_[idx].name == name) {
            return static_cast<int>(idx);
        }
    }
    return -1;
}

const std::vector<int>& Topology::route(int src, int dst) const {
    static const std::vector<int> kNone;
    if (src < 0 || src >= num_gpus_ || dst < 0 || dst >= num_gpus_ || src == dst) {
        return kNone;
    }
    return routes_[static_cast<size_t>(src) * num_gpus_ + dst];
}

double kernel_seconds(const DeviceModel& device, KernelClass kernel_class, double hbm_bandwidth,
                      double peak, double flops, double bytes) {
    double seconds = bytes / (hbm_bandwidth * device.memory_efficiency_of(kernel_class));
    if (flops > 0.0) {
        seconds = std::max(seconds, flops / (peak * device.compute_efficiency_of(kernel_class)));
    }
    return seconds + device.launch_overhead_s;
}

absl::StatusOr<Topology> Topology::make_switch(std::string name, int num_gpus,
                                               double link_bandwidth, double hbm_bandwidth,
                                               double latency_s) {
    EINSUMMABLE_RETURN_IF_ERROR(check_common(num_gpus, hbm_bandwidth, latency_s));
    if (!positive_finite(link_bandwidth)) {
        return absl::InvalidArgumentError(
            absl::StrCat("link_bandwidth must be positive and finite, got ", link_bandwidth));
    }
    Topology topology;
    topology.name_ = std::move(name);
    topology.num_gpus_ = num_gpus;
    topology.kind_ = TopologyKind::nvswitch;
    topology.hbm_bandwidth_ = hbm_bandwidth;
    topology.latency_s_ = latency_s;
    topology.link_bandwidth_ = link_bandwidth;
    std::vector<int> egress(num_gpus), ingress(num_gpus);
    for (int gpu = 0; gpu < num_gpus; ++gpu) {
        topology.hbm_.push_back(
            topology.add_resource(absl::StrCat("hbm(", gpu, ")"), hbm_bandwidth));
        egress[gpu] = topology.add_resource(absl::StrCat("egress(", gpu, ")"), link_bandwidth);
        ingress[gpu] = topology.add_resource(absl::StrCat("ingress(", gpu, ")"), link_bandwidth);
    }
    topology.routes_.resize(static_cast<size_t>(num_gpus) * num_gpus);
    for (int src = 0; src < num_gpus; ++src) {
        for (int dst = 0; dst < num_gpus; ++dst) {
            if (src != dst) {
                topology.routes_[static_cast<size_t>(src) * num_gpus + dst] = {egress[src],
                                                                               ingress[dst]};
            }
        }
    }
    return topology;
}

absl::StatusOr<Topology> Topology::make_cluster(std::string name, int nodes, int gpus_per_node,
                                                double link_bandwidth, double nic_bandwidth,
                                                double hbm_bandwidth, double latency_s,
                                                double nic_latency_s) {
    if (nodes < 1 || gpus_per_node < 1 || nodes > kMaxGpus / gpus_per_node) {
        return absl::InvalidArgumentError(absl::StrCat("a cluster needs at least 1 node of at "
                                                       "least 1 GPU and at most ",
                                                       kMaxGpus, " GPUs, got ", nodes, " nodes of ",
                                                       gpus_per_node));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(Topology topology,
                                 make_switch(std::move(name), nodes * gpus_per_node, link_bandwidth,
                                             hbm_bandwidth, latency_s));
    if (!positive_finite(nic_bandwidth)) {
        return absl::InvalidArgumentError(
            absl::StrCat("nic_bandwidth must be positive and finite, got ", nic_bandwidth));
    }
    if (!std::isfinite(nic_latency_s) || nic_latency_s < 0.0) {
        return absl::InvalidArgumentError(
            absl::StrCat("nic_latency must be finite and not negative, got ", nic_latency_s));
    }
    topology.kind_ = TopologyKind::cluster;
    topology.nodes_ = nodes;
    topology.nic_bandwidth_ = nic_bandwidth;
    topology.nic_latency_s_ = nic_latency_s;
    const int gpus = topology.num_gpus_;
    std::vector<int> out(gpus), in(gpus);
    for (int gpu = 0; gpu < gpus; ++gpu) {
        out[gpu] = topology.add_resource(absl::StrCat("nic-out(", gpu, ")"), nic_bandwidth);
        in[gpu] = topology.add_resource(absl::StrCat("nic-in(", gpu, ")"), nic_bandwidth);
    }
    for (int src = 0; src < gpus; ++src) {
        for (int dst = 0; dst < gpus; ++dst) {
            if (topology.node_of(src) != topology.node_of(dst)) {
                topology.routes_[static_cast<size_t>(src) * gpus + dst] = {out[src], in[dst]};
            }
        }
    }
    return topology;
}

absl::StatusOr<Topology> Topology::make_links(std::string name, int num_gpus,
                                              std::vector<Link> links, double bridge_bandwidth,
                                              double hbm_bandwidth, double latency_s) {
    EINSUMMABLE_RETURN_IF_ERROR(check_common(num_gpus, hbm_bandwidth, latency_s));
    std::map<std::pair<int, int>, double> by_pair;
    for (Link link : links) {
        if (link.a < 0 || link.a >= num_gpus || link.b < 0 || link.b >= num_gpus) {
            return absl::InvalidArgumentError(absl::StrCat(
                "link ", pair_name(link.a, link.b), ": GPU out of range (gpus: ", num_gpus, ")"));
        }
        if (link.a == link.b) {
            return absl::InvalidArgumentError(absl::StrCat("link from GPU ", link.a, " to itself"));
        }
        if (!positive_finite(link.bandwidth)) {
            return absl::InvalidArgumentError(
                absl::StrCat("link ", pair_name(link.a, link.b),
                             ": bandwidth must be positive and finite, got ", link.bandwidth));
        }
        const std::pair<int, int> key = std::minmax(link.a, link.b);
        if (!by_pair.emplace(key, link.bandwidth).second) {
            return absl::InvalidArgumentError(
                absl::StrCat("duplicate link ", pair_name(key.first, key.second)));
        }
    }
    std::vector<std::string> unlinked;
    for (int a = 0; a < num_gpus; ++a) {
        for (int b = a + 1; b < num_gpus; ++b) {
            if (!by_pair.contains({a, b})) {
                unlinked.push_back(pair_name(a, b));
            }
        }
    }
    if (!unlinked.empty() && !positive_finite(bridge_bandwidth)) {
        return absl::InvalidArgumentError(
            absl::StrCat("bridge_bandwidth must be positive and finite when some pairs have no "
                         "link (",
                         absl::StrJoin(unlinked, ", "), "), got ", bridge_bandwidth));
    }
    if (unlinked.empty() && (!std::isfinite(bridge_bandwidth) || bridge_bandwidth < 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bridge_bandwidth must be finite and not negative, got ", bridge_bandwidth));
    }

    Topology topology;
    topology.name_ = std::move(name);
    topology.num_gpus_ = num_gpus;
    topology.kind_ = TopologyKind::links;
    topology.hbm_bandwidth_ = hbm_bandwidth;
    topology.latency_s_ = latency_s;
    topology.bridge_bandwidth_ = unlinked.empty() ? 0.0 : bridge_bandwidth;
    for (const auto& [key, bandwidth] : by_pair) {
        topology.links_.push_back(Link{key.first, key.second, bandwidth});
    }
    for (int gpu = 0; gpu < num_gpus; ++gpu) {
        topology.hbm_.push_back(
            topology.add_resource(absl::StrCat("hbm(", gpu, ")"), hbm_bandwidth));
    }
    topology.routes_.resize(static_cast<size_t>(num_gpus) * num_gpus);
    for (const Link& link : topology.links_) {
        const int forward =
            topology.add_resource(absl::StrCat("link(", link.a, "->", link.b, ")"), link.bandwidth);
        const int backward =
            topology.add_resource(absl::StrCat("link(", link.b, "->", link.a, ")"), link.bandwidth);
        topology.routes_[static_cast<size_t>(link.a) * num_gpus + link.b] = {forward};
        topology.routes_[static_cast<size_t>(link.b) * num_gpus + link.a] = {backward};
    }
    if (!unlinked.empty()) {
        const int bridge = topology.add_resource("pcie-bridge", bridge_bandwidth);
        for (int src = 0; src < num_gpus; ++src) {
            for (int dst = 0; dst < num_gpus; ++dst) {
                std::vector<int>& route =
                    topology.routes_[static_cast<size_t>(src) * num_gpus + dst];
                if (src != dst && route.empty()) {
                    route = {bridge};
                }
            }
        }
    }
    return topology;
}

absl::StatusOr<Topology> Topology::with_device(const DeviceModel& device) const {
    const std::pair<const char*, double> capacities[] = {{"peak_f32", device.peak_f32},
                                                         {"peak_f16", device.peak_f16},
                                                         {"peak_bf16", device.peak_bf16},
                                                         {"memory", device.memory_bytes}};
    for (const auto& [key, value] : capacities) {
        if (!std::isfinite(value) || value < 0.0) {
            return absl::InvalidArgumentError(
                absl::StrCat(key, " must be finite and not negative, got ", value));
        }
    }
    std::vector<std::pair<std::string, double>> fractions = {
        {"compute_efficiency", device.compute_efficiency},
        {"memory_efficiency", device.memory_efficiency}};
    for (KernelClass kernel_class : support::kKernelClasses) {
        const ClassEfficiency& own = device.efficiency(kernel_class);
        if (own.compute.has_value()) {
            fractions.emplace_back(class_key(kernel_class, "compute_efficiency"), *own.compute);
        }
        if (own.memory.has_value()) {
            fractions.emplace_back(class_key(kernel_class, "memory_efficiency"), *own.memory);
        }
    }
    for (const auto& [key, value] : fractions) {
        if (!(value > 0.0 && value <= 1.0)) {
            return absl::InvalidArgumentError(absl::StrCat(key, " must be in (0, 1], got ", value));
        }
    }
    if (!std::isfinite(device.launch_overhead_s) || device.launch_overhead_s < 0.0) {
        return absl::InvalidArgumentError(
            absl::StrCat("launch_overhead must be finite and not negative, got ",
                         device.launch_overhead_s, " s"));
    }
    Topology topology = *this;
    topology.device_ = device;
    return topology;
}

absl::StatusOr<Topology> Topology::with_host_bandwidth(double host_bandwidth) const {
    if (!positive_finite(host_bandwidth)) {
        return absl::InvalidArgumentError(
            absl::StrCat("host_bandwidth must be positive and finite, got ", host_bandwidth));
    }
    Topology topology = *this;
    topology.host_bandwidth_ = host_bandwidth;
    return topology;
}

std::string Topology::to_text() const {
    std::string text;
    absl::StrAppend(&text, "name: ", name_, "\n");
    absl::StrAppend(&text, "gpus: ", num_gpus_, "\n");
    absl::StrAppend(&text, "kind: ", topology_kind_name(kind_), "\n");
    if (kind_ != TopologyKind::links) {
        absl::StrAppend(&text, "link_bandwidth: ", bandwidth_text(link_bandwidth_), "\n");
    }
    if (kind_ == TopologyKind::cluster) {
        absl::StrAppend(&text, "nodes: ", nodes_, "\n");
        absl::StrAppend(&text, "nic_bandwidth: ", bandwidth_text(nic_bandwidth_), "\n");
        absl::StrAppend(&text, "nic_latency: ", number(nic_latency_s_ * 1e6), " us\n");
    }
    absl::StrAppend(&text, "hbm_bandwidth: ", bandwidth_text(hbm_bandwidth_), "\n");
    absl::StrAppend(&text, "latency: ", number(latency_s_ * 1e6), " us\n");
    if (host_bandwidth_ != kDefaultHostBandwidth) {
        absl::StrAppend(&text, "host_bandwidth: ", bandwidth_text(host_bandwidth_), "\n");
    }
    const std::pair<const char*, double> peaks[] = {{"peak_f32", device_.peak_f32},
                                                    {"peak_f16", device_.peak_f16},
                                                    {"peak_bf16", device_.peak_bf16}};
    for (const auto& [key, value] : peaks) {
        if (value > 0.0) {
            absl::StrAppend(&text, key, ": ", number(value / 1e12), " TFLOP/s\n");
        }
    }
    if (device_.memory_bytes > 0.0) {
        absl::StrAppend(&text, "memory: ", number(device_.memory_bytes / 1e9), " GB\n");
    }
    absl::StrAppend(&text, "compute_efficiency: ", number(device_.compute_efficiency), "\n");
    absl::StrAppend(&text, "memory_efficiency: ", number(device_.memory_efficiency), "\n");
    for (KernelClass kernel_class : support::kKernelClasses) {
        const ClassEfficiency& own = device_.efficiency(kernel_class);
        if (own.compute.has_value()) {
            absl::StrAppend(&text, class_key(kernel_class, "compute_efficiency"), ": ",
                            number(*own.compute), "\n");
        }
        if (own.memory.has_value()) {
            absl::StrAppend(&text, class_key(kernel_class, "memory_efficiency"), ": ",
                            number(*own.memory), "\n");
        }
    }
    absl::StrAppend(&text, "launch_overhead: ", number(device_.launch_overhead_s * 1e6), " us\n");
    if (kind_ == TopologyKind::links) {
        if (bridge_bandwidth_ > 0.0) {
            absl::StrAppend(&text, "bridge_bandwidth: ", bandwidth_text(bridge_bandwidth_), "\n");
        }
        for (const Link& link : links_) {
            absl::StrAppend(&text, "link: ", link.a, " ", link.b, " ",
                            bandwidth_text(link.bandwidth), "\n");
        }
    }
    return text;
}

namespace {

struct Unit {
    absl::string_view name;
    double scale;
};

// Decimal units, as GPU datasheets use them.
constexpr Unit kBandwidthUnits[] = {{"B/s", 1.0},  {"kB/s", 1e3}, {"KB/s", 1e3},
                                    {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12}};
constexpr Unit kFlopsUnits[] = {
    {"FLOP/s", 1.0}, {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15}};
constexpr Unit kMemoryUnits[] = {{"B", 1.0},
                                 {"kB", 1e3},
                                 {"KB", 1e3},
                                 {"MB", 1e6},
                                 {"GB", 1e9},
                                 {"TB", 1e12},
                                 {"KiB", 1024.0},
                                 {"MiB", 1024.0 * 1024.0},
                                 {"GiB", 1024.0 * 1024.0 * 1024.0},
                                 {"TiB", 1024.0 * 1024.0 * 1024.0 * 1024.0}};
constexpr Unit kTimeUnits[] = {{"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};

absl::Status line_error(int line, absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", message));
}

template <size_t N>
std::string unit_names(const Unit (&units)[N]) {
    return absl::StrJoin(
        units, ", ", [](std::string* out, const Unit& unit) { absl::StrAppend(out, unit.name); });
}

// A byte of the number a quantity starts with (an 'e' or 'E' too, between two of them).
bool is_number_char(char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-';
}

// "300 GB/s" or "300GB/s" -> value in base units (bytes/s or seconds).
template <size_t N>
absl::StatusOr<double> parse_quantity(absl::string_view key, absl::string_view value,
                                      const Unit (&units)[N], int line) {
    support::Lexer lexer(value);
    while (is_number_char(lexer.peek()) || ((lexer.peek() == 'e' || lexer.peek() == 'E') &&
                                            lexer.offset() > 0 && is_number_char(lexer.peek(1)))) {
        lexer.take(1);
    }
    const absl::string_view number_text = lexer.since(0);
    const absl::string_view unit_text = absl::StripAsciiWhitespace(lexer.rest());
    double number = 0.0;
    if (number_text.empty() || !absl::SimpleAtod(number_text, &number) || !std::isfinite(number)) {
        return line_error(line, absl::StrCat(key, ": bad number in '", value, "'"));
    }
    if (unit_text.empty()) {
        return line_error(line, absl::StrCat(key, ": missing unit in '", value,
                                             "' (expected one of ", unit_names(units), ")"));
    }
    for (const Unit& unit : units) {
        if (unit.name == unit_text) {
            return number * unit.scale;
        }
    }
    return line_error(line, absl::StrCat(key, ": bad unit '", unit_text, "' (expected one of ",
                                         unit_names(units), ")"));
}

absl::StatusOr<int> parse_int(absl::string_view key, absl::string_view text, int line) {
    int value = 0;
    if (!absl::SimpleAtoi(text, &value)) {
        return line_error(line, absl::StrCat(key, ": bad number '", text, "'"));
    }
    return value;
}

struct LinkLine {
    Link link;
    int line = 0;
};

// What the lines of a topology file say, before a Topology is built from it.
struct TopologyFields {
    std::map<std::string, int> key_lines; // every key but link -> the line that set it
    std::string name;
    int num_gpus = 0;
    TopologyKind kind = TopologyKind::nvswitch;
    double link_bandwidth = 0.0;
    double hbm_bandwidth = 0.0;
    double latency_s = 0.0;
    double bridge_bandwidth = 0.0;
    double host_bandwidth = kDefaultHostBandwidth;
    int nodes = 1;
    double nic_bandwidth = 0.0;
    double nic_latency_s = 0.0;
    std::vector<LinkLine> links;
    std::map<std::pair<int, int>, int> link_lines; // {min, max} -> line
    DeviceModel device;
};

// One `key: value` line, the value not empty.
struct KeyValue {
    absl::string_view key;
    absl::string_view value;
    int line = 0;
};

// The value of `entry`, a positive quantity in `units`, into `field`.
template <size_t N>
absl::Status read_positive(const KeyValue& entry, const Unit (&units)[N], double& field) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const double amount,
                                 parse_quantity(entry.key, entry.value, units, entry.line));
    if (amount <= 0.0) {
        return line_error(entry.line, absl::StrCat(entry.key, " must be positive"));
    }
    field = amount;
    return absl::OkStatus();
}

// The value of `entry`, a time that is not negative, into `field` (seconds).
absl::Status read_time(const KeyValue& entry, double& field) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const double seconds,
                                 parse_quantity(entry.key, entry.value, kTimeUnits, entry.line));
    if (seconds < 0.0) {
        return line_error(entry.line, absl::StrCat(entry.key, " must not be negative"));
    }
    field = seconds;
    return absl::OkStatus();
}

// The key handlers: each reads one key's value into the fields.

absl::Status read_name(const KeyValue& entry, TopologyFields& fields) {
    fields.name = std::string(entry.value);
    return absl::OkStatus();
}

absl::Status read_gpus(const KeyValue& entry, TopologyFields& fields) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const int gpus, parse_int(entry.key, entry.value, entry.line));
    if (gpus < 1) {
        return line_error(entry.line, absl::StrCat("gpus must be at least 1, got ", gpus));
    }
    if (gpus > kMaxGpus) {
        return line_error(entry.line,
                          absl::StrCat("gpus must be at most ", kMaxGpus, ", got ", gpus));
    }
    fields.num_gpus = gpus;
    return absl::OkStatus();
}

absl::Status read_kind(const KeyValue& entry, TopologyFields& fields) {
    if (entry.value == "switch") {
        fields.kind = TopologyKind::nvswitch;
    } else if (entry.value == "links") {
        fields.kind = TopologyKind::links;
    } else if (entry.value == "cluster") {
        fields.kind = TopologyKind::cluster;
    } else {
        return line_error(entry.line, absl::StrCat("unknown kind '", entry.value,
                                                   "' (expected switch, links or cluster)"));
    }
    return absl::OkStatus();
}

template <double TopologyFields::*field>
absl::Status read_bandwidth(const KeyValue& entry, TopologyFields& fields) {
    return read_positive(entry, kBandwidthUnits, fields.*field);
}

absl::Status read_latency(const KeyValue& entry, TopologyFields& fields) {
    return read_time(entry, fields.latency_s);
}

absl::Status read_nic_latency(const KeyValue& entry, TopologyFields& fields) {
    return read_time(entry, fields.nic_latency_s);
}

absl::Status read_nodes(const KeyValue& entry, TopologyFields& fields) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const int nodes, parse_int(entry.key, entry.value, entry.line));
    if (nodes < 1) {
        return line_error(entry.line, absl::StrCat("nodes must be at least 1, got ", nodes));
    }
    fields.nodes = nodes;
    return absl::OkStatus();
}

// `link: A B <bandwidth>`, once per pair.
absl::Status read_link(const KeyValue& entry, TopologyFields& fields) {
    std::vector<absl::string_view> words;
    support::Lexer lexer(entry.value);
    while (true) {
        lexer.skip_blanks(" \t");
        if (lexer.at_end()) {
            break;
        }
        words.push_back(lexer.take_until(" \t"));
    }
    if (words.size() < 3) {
        return line_error(entry.line, absl::StrCat("link: expected 'link: A B <bandwidth>', got '",
                                                   entry.value, "'"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const int a, parse_int("link", words[0], entry.line));
    EINSUMMABLE_ASSIGN_OR_RETURN(const int b, parse_int("link", words[1], entry.line));
    if (a == b) {
        return line_error(entry.line, absl::StrCat("link from GPU ", a, " to itself"));
    }
    const std::string rest =
        absl::StrJoin(std::vector<absl::string_view>(words.begin() + 2, words.end()), " ");
    EINSUMMABLE_ASSIGN_OR_RETURN(const double bandwidth,
                                 parse_quantity(entry.key, rest, kBandwidthUnits, entry.line));
    if (bandwidth <= 0.0) {
        return line_error(entry.line, "link: bandwidth must be positive");
    }
    const auto [it, inserted] = fields.link_lines.emplace(std::minmax(a, b), entry.line);
    if (!inserted) {
        return line_error(entry.line, absl::StrCat("duplicate link ", pair_name(a, b),
                                                   " (first given on line ", it->second, ")"));
    }
    fields.links.push_back(LinkLine{Link{a, b, bandwidth}, entry.line});
    return absl::OkStatus();
}

template <double DeviceModel::*field>
absl::Status read_peak(const KeyValue& entry, TopologyFields& fields) {
    return read_positive(entry, kFlopsUnits, fields.device.*field);
}

absl::Status read_memory(const KeyValue& entry, TopologyFields& fields) {
    return read_positive(entry, kMemoryUnits, fields.device.memory_bytes);
}

// The value of `entry`, a fraction in (0, 1].
absl::StatusOr<double> read_fraction(const KeyValue& entry) {
    double fraction = 0.0;
    if (!absl::SimpleAtod(entry.value, &fraction) || !(fraction > 0.0 && fraction <= 1.0)) {
        return line_error(
            entry.line,
            absl::StrCat(entry.key, ": expected a number in (0, 1], got '", entry.value, "'"));
    }
    return fraction;
}

template <double DeviceModel::*field>
absl::Status read_efficiency(const KeyValue& entry, TopologyFields& fields) {
    EINSUMMABLE_ASSIGN_OR_RETURN(fields.device.*field, read_fraction(entry));
    return absl::OkStatus();
}

// <class>_compute_efficiency / <class>_memory_efficiency: one class's own fraction.
template <KernelClass kernel_class, std::optional<double> ClassEfficiency::*field>
absl::Status read_class_efficiency(const KeyValue& entry, TopologyFields& fields) {
    EINSUMMABLE_ASSIGN_OR_RETURN(fields.device.efficiency(kernel_class).*field,
                                 read_fraction(entry));
    return absl::OkStatus();
}

absl::Status read_launch_overhead(const KeyValue& entry, TopologyFields& fields) {
    return read_time(entry, fields.device.launch_overhead_s);
}

struct KeyHandler {
    absl::string_view key;
    absl::Status (*read)(const KeyValue& entry, TopologyFields& fields);
    bool repeats = false; // given on any number of lines; every other key at most once
};

// Every key of the format, in the order the message for an unknown key lists them.
constexpr KeyHandler kKeyHandlers[] = {
    {"name", read_name},
    {"gpus", read_gpus},
    {"kind", read_kind},
    {"link_bandwidth", read_bandwidth<&TopologyFields::link_bandwidth>},
    {"hbm_bandwidth", read_bandwidth<&TopologyFields::hbm_bandwidth>},
    {"latency", read_latency},
    {"bridge_bandwidth", read_bandwidth<&TopologyFields::bridge_bandwidth>},
    {"host_bandwidth", read_bandwidth<&TopologyFields::host_bandwidth>},
    {"nodes", read_nodes},
    {"nic_bandwidth", read_bandwidth<&TopologyFields::nic_bandwidth>},
    {"nic_latency", read_nic_latency},
    {"link", read_link, /*repeats=*/true},
    {"peak_f32", read_peak<&DeviceModel::peak_f32>},
    {"peak_f16", read_peak<&DeviceModel::peak_f16>},
    {"peak_bf16", read_peak<&DeviceModel::peak_bf16>},
    {"memory", read_memory},
    {"compute_efficiency", read_efficiency<&DeviceModel::compute_efficiency>},
    {"memory_efficiency", read_efficiency<&DeviceModel::memory_efficiency>},
    {"launch_overhead", read_launch_overhead},
    {"gemm_compute_efficiency",
     read_class_efficiency<KernelClass::gemm, &ClassEfficiency::compute>},
    {"gemm_memory_efficiency", read_class_efficiency<KernelClass::gemm, &ClassEfficiency::memory>},
    {"attention_compute_efficiency",
     read_class_efficiency<KernelClass::attention, &ClassEfficiency::compute>},
    {"attention_memory_efficiency",
     read_class_efficiency<KernelClass::attention, &ClassEfficiency::memory>},
    {"elementwise_compute_efficiency",
     read_class_efficiency<KernelClass::elementwise, &ClassEfficiency::compute>},
    {"elementwise_memory_efficiency",
     read_class_efficiency<KernelClass::elementwise, &ClassEfficiency::memory>},
    {"norm_compute_efficiency",
     read_class_efficiency<KernelClass::norm, &ClassEfficiency::compute>},
    {"norm_memory_efficiency", read_class_efficiency<KernelClass::norm, &ClassEfficiency::memory>},
    {"other_compute_efficiency",
     read_class_efficiency<KernelClass::other, &ClassEfficiency::compute>},
    {"other_memory_efficiency",
     read_class_efficiency<KernelClass::other, &ClassEfficiency::memory>},
};

// A line that is not blank once its comment is gone: `key: value`, the key known and not given
// before (link excepted), the value not empty.
absl::Status read_line(absl::string_view content, int line, TopologyFields& fields) {
    const size_t colon = content.find(':');
    if (colon == absl::string_view::npos) {
        return line_error(line, absl::StrCat("expected 'key: value', got '", content, "'"));
    }
    const absl::string_view key = absl::StripAsciiWhitespace(content.substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(content.substr(colon + 1));
    const KeyHandler* handler = nullptr;
    for (const KeyHandler& candidate : kKeyHandlers) {
        if (candidate.key == key) {
            handler = &candidate;
        }
    }
    if (handler == nullptr) {
        const std::string known =
            absl::StrJoin(kKeyHandlers, ", ", [](std::string* out, const KeyHandler& known_key) {
                absl::StrAppend(out, known_key.key);
            });
        return line_error(line, absl::StrCat("unknown key '", key, "' (known keys: ", known, ")"));
    }
    if (!handler->repeats) {
        const auto [it, inserted] = fields.key_lines.emplace(std::string(key), line);
        if (!inserted) {
            return line_error(line, absl::StrCat("duplicate key '", key, "' (first given on line ",
                                                 it->second, ")"));
        }
    }
    if (value.empty()) {
        return line_error(line, absl::StrCat(key, ": missing value"));
    }
    return handler->read(KeyValue{key, value, line}, fields);
}

// The topology the fields describe: the required keys given, the keys of the other kind not,
// every link between GPUs that exist, every pair linked or a bridge given.
absl::StatusOr<Topology> build_topology(TopologyFields fields) {
    for (absl::string_view required : {"name", "gpus", "kind", "hbm_bandwidth", "latency"}) {
        if (!fields.key_lines.contains(std::string(required))) {
            return absl::InvalidArgumentError(
                absl::StrCat("missing required key '", required, "'"));
        }
    }
    if (fields.kind != TopologyKind::cluster) {
        for (absl::string_view key : {"nodes", "nic_bandwidth", "nic_latency"}) {
            if (const auto it = fields.key_lines.find(std::string(key));
                it != fields.key_lines.end()) {
                return line_error(it->second,
                                  absl::StrCat(key, " applies only to kind: cluster (kind is ",
                                               topology_kind_name(fields.kind), ")"));
            }
        }
    }
    if (fields.kind == TopologyKind::cluster) {
        if (!fields.links.empty()) {
            return line_error(fields.links.front().line,
                              "link: lines apply only to kind: links (kind is cluster)");
        }
        if (const auto it = fields.key_lines.find("bridge_bandwidth");
            it != fields.key_lines.end()) {
            return line_error(it->second, "bridge_bandwidth applies only to kind: links");
        }
        for (absl::string_view key : {"link_bandwidth", "nodes", "nic_bandwidth", "nic_latency"}) {
            if (!fields.key_lines.contains(std::string(key))) {
                return absl::InvalidArgumentError(
                    absl::StrCat("missing required key '", key, "' (kind: cluster)"));
            }
        }
        if (fields.num_gpus % fields.nodes != 0) {
            return line_error(fields.key_lines.at("nodes"),
                              absl::StrCat("gpus (", fields.num_gpus,
                                           ") must be a multiple of nodes (", fields.nodes,
                                           "): every node holds as many GPUs"));
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(
            const Topology topology,
            Topology::make_cluster(std::move(fields.name), fields.nodes,
                                   fields.num_gpus / fields.nodes, fields.link_bandwidth,
                                   fields.nic_bandwidth, fields.hbm_bandwidth, fields.latency_s,
                                   fields.nic_latency_s));
        EINSUMMABLE_ASSIGN_OR_RETURN(const Topology hosted,
                                     topology.with_host_bandwidth(fields.host_bandwidth));
        return hosted.with_device(fields.device);
    }
    if (fields.kind == TopologyKind::nvswitch) {
        if (!fields.links.empty()) {
            return line_error(fields.links.front().line,
                              "link: lines apply only to kind: links (kind is switch)");
        }
        if (const auto it = fields.key_lines.find("bridge_bandwidth");
            it != fields.key_lines.end()) {
            return line_error(it->second, "bridge_bandwidth applies only to kind: links");
        }
        if (!fields.key_lines.contains("link_bandwidth")) {
            return absl::InvalidArgumentError(
                "missing required key 'link_bandwidth' (kind: switch)");
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(const Topology topology,
                                     Topology::make_switch(std::move(fields.name), fields.num_gpus,
                                                           fields.link_bandwidth,
                                                           fields.hbm_bandwidth, fields.latency_s));
        EINSUMMABLE_ASSIGN_OR_RETURN(const Topology hosted,
                                     topology.with_host_bandwidth(fields.host_bandwidth));
        return hosted.with_device(fields.device);
    }
    if (const auto it = fields.key_lines.find("link_bandwidth"); it != fields.key_lines.end()) {
        return line_error(it->second, "link_bandwidth applies only to kind: switch (kind: links "
                                      "gives each pair's bandwidth on a link: line)");
    }
    const int num_gpus = fields.num_gpus;
    std::vector<Link> plain_links;
    for (const LinkLine& link_line : fields.links) {
        for (int gpu : {link_line.link.a, link_line.link.b}) {
            if (gpu < 0 || gpu >= num_gpus) {
                return line_error(link_line.line,
                                  absl::StrCat("link ",
                                               pair_name(link_line.link.a, link_line.link.b),
                                               ": GPU ", gpu, " out of range (gpus: ", num_gpus,
                                               ", so 0 to ", num_gpus - 1, ")"));
            }
        }
        plain_links.push_back(link_line.link);
    }
    if (!fields.key_lines.contains("bridge_bandwidth")) {
        std::vector<std::string> unlinked;
        for (int a = 0; a < num_gpus; ++a) {
            for (int b = a + 1; b < num_gpus; ++b) {
                if (!fields.link_lines.contains({a, b})) {
                    unlinked.push_back(pair_name(a, b));
                }
            }
        }
        if (!unlinked.empty()) {
            return absl::InvalidArgumentError(
                absl::StrCat("missing required key 'bridge_bandwidth' (pairs without a link: ",
                             absl::StrJoin(unlinked, ", "), ")"));
        }
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(
        const Topology topology,
        Topology::make_links(std::move(fields.name), num_gpus, std::move(plain_links),
                             fields.bridge_bandwidth, fields.hbm_bandwidth, fields.latency_s));
    EINSUMMABLE_ASSIGN_OR_RETURN(const Topology hosted,
                                 topology.with_host_bandwidth(fields.host_bandwidth));
    return hosted.with_device(fields.device);
}

} // namespace

std::optional<double> parse_memory_size(absl::string_view text) {
    support::Lexer lexer(absl::StripAsciiWhitespace(text));
    const absl::string_view number_text = lexer.take_while(
        [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.'; });
    double number = 0.0;
    if (number_text.empty() || !absl::SimpleAtod(number_text, &number)) {
        return std::nullopt;
    }
    const absl::string_view unit = absl::StripAsciiWhitespace(lexer.rest());
    if (unit.empty()) {
        return number;
    }
    for (const Unit& known : kMemoryUnits) {
        if (unit == known.name) {
            return number * known.scale;
        }
    }
    return std::nullopt;
}

absl::StatusOr<Topology> parse_topology(absl::string_view text) {
    TopologyFields fields;
    support::Lexer lexer(text);
    while (lexer.lines_left() > 0) {
        const int line = lexer.line();
        const absl::string_view content = absl::StripAsciiWhitespace(lexer.take_until("#"));
        lexer.take_line(); // the comment, if any, and the '\n'
        if (!content.empty()) {
            EINSUMMABLE_RETURN_IF_ERROR(read_line(content, line, fields));
        }
    }
    return build_topology(std::move(fields));
}

namespace {

// docs/topologies/dgx-a100.topo
constexpr absl::string_view kDgxA100 =
    R"topo(# DGX A100: 8 x A100 40 GB on NVSwitch, non-blocking (docs/workloads.md "Machines").
# Latency 2 us per transfer is an assumption (NVSwitch hop plus transfer set-up), not a
# measurement; it only matters for small transfers.
name: dgx-a100
gpus: 8
kind: switch
link_bandwidth: 300 GB/s     # NVLink, per direction per GPU
hbm_bandwidth: 1555 GB/s
latency: 2 us
host_bandwidth: 25 GB/s      # PCIe 4.0 x16 to the host, device to host (31.5 GB/s raw)
# Devices (docs/topologies.md "Devices"): A100 SXM4 40 GB datasheet, dense, no sparsity.
peak_f32: 19.5 TFLOP/s
peak_f16: 312 TFLOP/s        # tensor cores
peak_bf16: 312 TFLOP/s       # tensor cores
memory: 40 GB
compute_efficiency: 0.75     # assumption, for the classes without their own below
memory_efficiency: 0.85      # assumption: STREAM-like kernels reach ~0.85 of HBM peak
launch_overhead: 3 us        # assumption: one kernel node of a CUDA graph
# Per kernel class: published fractions of peak, sources in docs/topologies.md "Kernel
# classes". The other classes take the two above (no published figure found).
gemm_compute_efficiency: 0.859       # bf16 matmul, best shape: 267.9 TFLOP/s
attention_compute_efficiency: 0.73   # FlashAttention-2: up to 73% of peak on A100
)topo";

// docs/topologies/dgx-h100.topo
constexpr absl::string_view kDgxH100 =
    R"topo(# DGX H100: 8 x H100 SXM on NVSwitch (docs/workloads.md "Machines").
# Latency 2 us per transfer is an assumption, as for dgx-a100.
name: dgx-h100
gpus: 8
kind: switch
link_bandwidth: 450 GB/s     # NVLink, per direction per GPU
hbm_bandwidth: 3350 GB/s
latency: 2 us
host_bandwidth: 50 GB/s      # PCIe 5.0 x16 to the host, device to host (63 GB/s raw)
# Devices (docs/topologies.md "Devices"): H100 SXM5 80 GB datasheet, dense, no sparsity.
peak_f32: 67 TFLOP/s
peak_f16: 989 TFLOP/s        # tensor cores
peak_bf16: 989 TFLOP/s       # tensor cores
memory: 80 GB
compute_efficiency: 0.75     # assumption, for the classes without their own below
memory_efficiency: 0.85      # assumption: STREAM-like kernels reach ~0.85 of HBM peak
launch_overhead: 3 us        # assumption: one kernel node of a CUDA graph
# Per kernel class: published fractions of peak, sources in docs/topologies.md "Kernel
# classes". The other classes take the two above (no published figure found).
gemm_compute_efficiency: 0.801       # bf16 matmul, best shape: 792.1 TFLOP/s
attention_compute_efficiency: 0.748  # FlashAttention-3 fp16 forward: 740 TFLOP/s
)topo";

// docs/topologies/dgx-v100.topo
constexpr absl::string_view kDgxV100 =
    R"topo(# DGX-1 V100: 8 x V100 32 GB, hybrid cube-mesh (docs/workloads.md "Machines").
# NVLink2: 25 GB/s per link per direction, six links per GPU; pairs joined by two links
# get 50 GB/s. The 12 unlinked pairs go through a PCIe bridge of 15.75 GB/s shared by
# all such transfers. Latency: about 0.3 us one-way on-node (docs/workloads.md, measured).
name: dgx-v100
gpus: 8
kind: links
hbm_bandwidth: 900 GB/s
latency: 0.3 us
host_bandwidth: 12 GB/s      # PCIe 3.0 x16 to the host, device to host (15.75 GB/s raw)
bridge_bandwidth: 15.75 GB/s
# Devices (docs/topologies.md "Devices"): V100 SXM2 32 GB datasheet. No bf16 on V100.
peak_f32: 15.7 TFLOP/s
peak_f16: 125 TFLOP/s        # tensor cores
memory: 32 GB
compute_efficiency: 0.75     # assumption, for the classes without their own below
memory_efficiency: 0.85      # assumption: STREAM-like kernels reach ~0.85 of HBM peak
launch_overhead: 3 us        # assumption: one kernel node of a CUDA graph
# Per kernel class: a published fraction of peak, its source in docs/topologies.md "Kernel
# classes". The other classes take the two above (no published figure found).
gemm_compute_efficiency: 0.90       # fp16 cuBLAS GEMM, 8192^3: ~90 % of tensor-core peak
# two links
link: 0 3 50 GB/s
link: 0 4 50 GB/s
link: 1 2 50 GB/s
link: 1 5 50 GB/s
link: 2 3 50 GB/s
link: 4 7 50 GB/s
link: 5 6 50 GB/s
link: 6 7 50 GB/s
# one link
link: 0 1 25 GB/s
link: 0 2 25 GB/s
link: 1 3 25 GB/s
link: 2 6 25 GB/s
link: 3 7 25 GB/s
link: 4 5 25 GB/s
link: 4 6 25 GB/s
link: 5 7 25 GB/s
)topo";

struct Builtin {
    absl::string_view name;
    absl::string_view text;
};

constexpr Builtin kNodes[] = {
    {"dgx-a100", kDgxA100},
    {"dgx-h100", kDgxH100},
    {"dgx-v100", kDgxV100},
};

// A cluster of a built-in node: its file is the node's, its leading comment replaced and the
// cluster's lines added (name, gpus, kind, nodes, the NIC after latency).
struct Cluster {
    absl::string_view node;    // the built-in node
    absl::string_view machine; // "DGX A100", for the comment
    absl::string_view gpu;     // "A100 SXM4"
    absl::string_view nic;     // "200 Gb/s HDR InfiniBand ConnectX-6"
    absl::string_view per_gpu; // the nic_bandwidth value
    absl::string_view adapter; // the nic_bandwidth line's comment
};

constexpr Cluster kClusters[] = {
    {"dgx-a100", "DGX A100", "A100 SXM4", "200 Gb/s HDR InfiniBand ConnectX-6", "25 GB/s",
     "ConnectX-6, 200 Gb/s HDR InfiniBand per direction per GPU"},
    {"dgx-h100", "DGX H100", "H100 SXM", "400 Gb/s NDR InfiniBand ConnectX-7", "50 GB/s",
     "ConnectX-7, 400 Gb/s NDR InfiniBand per direction per GPU"},
};
constexpr int kClusterNodes[] = {2, 4};

// The text of `cluster`'s built-in of `nodes` nodes named `name`, from its node's text.
std::string cluster_text(const Cluster& cluster, absl::string_view node_text, int nodes,
                         absl::string_view name) {
    const int gpus = 8 * nodes;
    std::string text = absl::StrCat(
        "# ", nodes, " x ", cluster.machine, ": ", gpus, " x ", cluster.gpu,
        ", NVSwitch inside each node, one ", cluster.nic,
        "\n# per GPU between the nodes on a non-blocking rail-optimized fabric "
        "(docs/topologies.md\n# \"Clusters\"). Latencies of 2 us inside a node and 5 us between "
        "nodes are assumptions.\n");
    bool header = true;
    for (absl::string_view line : absl::StrSplit(node_text, '\n')) {
        if (header && absl::StartsWith(line, "#")) {
            continue; // the node's leading comment
        }
        header = false;
        if (absl::StartsWith(line, "name:")) {
            absl::StrAppend(&text, "name: ", name, "\n");
        } else if (absl::StartsWith(line, "gpus:")) {
            absl::StrAppend(&text, "gpus: ", gpus, "\n");
        } else if (absl::StartsWith(line, "kind:")) {
            absl::StrAppend(&text, "kind: cluster\nnodes: ", nodes, "\n");
        } else if (absl::StartsWith(line, "latency:")) {
            const std::string bandwidth = absl::StrCat("nic_bandwidth: ", cluster.per_gpu);
            absl::StrAppend(&text, line, "\n", bandwidth,
                            std::string(bandwidth.size() < 29 ? 29 - bandwidth.size() : 1, ' '),
                            "# ", cluster.adapter,
                            "\nnic_latency: 5 us            # assumption: GPUDirect RDMA "
                            "through one switch hop\n");
        } else if (!line.empty()) {
            absl::StrAppend(&text, line, "\n");
        }
    }
    return text;
}

// Every built-in, nodes first, then the clusters (2 and 4 nodes of each).
const std::vector<std::pair<std::string, std::string>>& builtins() {
    static const auto* all = [] {
        auto* made = new std::vector<std::pair<std::string, std::string>>();
        for (const Builtin& node : kNodes) {
            made->emplace_back(node.name, node.text);
        }
        for (const Cluster& cluster : kClusters) {
            for (int nodes : kClusterNodes) {
                std::string name = absl::StrCat(cluster.node, "-", nodes, "nodes");
                for (const Builtin& node : kNodes) {
                    if (node.name == cluster.node) {
                        std::string text = cluster_text(cluster, node.text, nodes, name);
                        made->emplace_back(std::move(name), std::move(text));
                        break;
                    }
                }
            }
        }
        return made;
    }();
    return *all;
}

} // namespace

std::vector<std::string> builtin_topology_names() {
    std::vector<std::string> names;
    for (const auto& [name, text] : builtins()) {
        names.push_back(name);
    }
    return names;
}

absl::StatusOr<absl::string_view> builtin_topology_text(absl::string_view name) {
    for (const auto& [known, text] : builtins()) {
        if (known == name) {
            return absl::string_view(text);
        }
    }
    return absl::NotFoundError(absl::StrCat("unknown topology '", name, "' (built-in topologies: ",
                                            absl::StrJoin(builtin_topology_names(), ", "), ")"));
}

absl::StatusOr<Topology> resized_switch(const Topology& base, int gpus) {
    if (base.kind() != TopologyKind::nvswitch) {
        return absl::InvalidArgumentError(
            absl::StrCat("topology '", base.name(), "' is not a switch: it cannot be resized"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(Topology resized,
                                 Topology::make_switch(absl::StrCat(base.name(), "-", gpus), gpus,
                                                       base.link_bandwidth(), base.hbm_bandwidth(),
                                                       base.latency_s()));
    EINSUMMABLE_ASSIGN_OR_RETURN(resized, resized.with_host_bandwidth(base.host_bandwidth()));
    return resized.with_device(base.device());
}

absl::StatusOr<Topology> builtin_topology(absl::string_view name) {
    EINSUMMABLE_ASSIGN_OR_RETURN(absl::string_view text, builtin_topology_text(name));
    return parse_topology(text);
}

} // namespace einsummable::exprog
