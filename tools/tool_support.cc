#include "tools/tool_support.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/ir/dtype.h"
#include "compiler/workloads/by_name.h"
#include "proto/graph_def.h"

namespace einsummable::tools {

// "FILE:line L column C: ..." for located messages, "FILE: ..." otherwise.
std::string in_file(const std::string& path, absl::string_view message) {
    return absl::StrCat(path, absl::StartsWith(message, "line ") ? ":" : ": ", message);
}

absl::StatusOr<std::string> read_file(const std::string& path) {
    std::stringstream contents;
    if (path == "-") {
        contents << std::cin.rdbuf();
        return contents.str();
    }
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
        return absl::NotFoundError(absl::StrCat("cannot read '", path, "': it is a directory"));
    }
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
    }
    contents << file.rdbuf();
    return contents.str();
}

std::optional<std::string> check_flags(int argc, char** argv) {
    for (int idx = 1; idx < argc; ++idx) {
        const absl::string_view arg = argv[idx];
        if (arg == "--") {
            break;
        }
        if (arg.size() < 2 || arg[0] != '-') {
            continue;
        }
        absl::string_view name = arg.substr(arg[1] == '-' ? 2 : 1);
        std::optional<absl::string_view> value;
        if (size_t eq = name.find('='); eq != absl::string_view::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
        }
        // The usage flags are absl's own, handled by ParseCommandLine.
        if (name == "help" || name == "helpfull" || name == "helpshort" || name == "helppackage" ||
            name == "helpmatch" || name == "version" || name == "only_check_args") {
            continue;
        }
        absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
        if (flag == nullptr && absl::StartsWith(name, "no") && !value) {
            absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
            if (negated != nullptr && negated->IsOfType<bool>()) {
                continue;
            }
        }
        if (flag == nullptr) {
            return absl::StrCat("unknown flag '", arg, "' (see --help)");
        }
        if (flag->IsOfType<bool>() && !value) {
            continue;
        }
        if (!value) {
            if (idx + 1 >= argc) {
                return absl::StrCat("flag '--", name, "' needs a value");
            }
            value = argv[++idx];
        }
        std::string error;
        if (!flag->ParseFrom(*value, &error)) {
            return absl::StrCat("--", name, ": ", error);
        }
    }
    return std::nullopt;
}

// --topology: a built-in name, else a file.
absl::StatusOr<exprog::Topology> load_topology(const std::string& arg) {
    for (const std::string& name : exprog::builtin_topology_names()) {
        if (name == arg) {
            return exprog::builtin_topology(arg);
        }
    }
    std::error_code error;
    const bool is_path = std::filesystem::exists(arg, error) ||
                         arg.find('/') != std::string::npos || absl::EndsWith(arg, ".topo");
    if (!is_path) {
        absl::StatusOr<exprog::Topology> builtin = exprog::builtin_topology(arg);
        if (builtin.ok()) {
            return builtin;
        }
        return absl::NotFoundError(absl::StrCat("--topology: ", builtin.status().message(),
                                                "; or give the path of a topology file"));
    }
    absl::StatusOr<std::string> text = read_file(arg);
    if (!text.ok()) {
        return absl::NotFoundError(absl::StrCat("--topology: ", text.status().message()));
    }
    absl::StatusOr<exprog::Topology> topology = exprog::parse_topology(*text);
    if (!topology.ok()) {
        return absl::InvalidArgumentError(in_file(arg, topology.status().message()));
    }
    return topology;
}

absl::StatusOr<std::map<std::string, int64_t>> parse_bindings(const std::string& text) {
    std::map<std::string, int64_t> bindings;
    if (text.empty()) {
        return bindings;
    }
    for (absl::string_view item : absl::StrSplit(text, ',')) {
        std::pair<std::string, std::string> pair = absl::StrSplit(item, absl::MaxSplits('=', 1));
        int64_t value = 0;
        if (pair.first.empty() || !absl::SimpleAtoi(pair.second, &value) || value <= 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("--bind: '", item, "' is not NAME=SIZE with a positive integer size"));
        }
        bindings[pair.first] = value;
    }
    return bindings;
}

absl::StatusOr<ir::Graph> load_graph(const std::string& workload, const std::string& path,
                                     const std::string& bind) {
    if (workload.empty() == path.empty()) {
        return absl::InvalidArgumentError("give exactly one of --workload NAME or --graph FILE");
    }
    if (!workload.empty()) {
        return workloads::by_name(workload);
    }
    absl::StatusOr<std::string> contents = read_file(path);
    if (!contents.ok()) {
        return absl::NotFoundError(absl::StrCat("--graph: ", contents.status().message()));
    }
    absl::StatusOr<std::map<std::string, int64_t>> bindings = parse_bindings(bind);
    if (!bindings.ok()) {
        return bindings.status();
    }
    absl::StatusOr<v1::GraphDef> def = graphdef::parse_graph_file(*contents, path);
    if (!def.ok()) {
        return absl::Status(def.status().code(), absl::StrCat(path, ": ", def.status().message()));
    }
    absl::StatusOr<ir::Graph> graph = graphdef::build_graph(*def, *bindings);
    if (!graph.ok()) {
        return absl::Status(graph.status().code(),
                            absl::StrCat(path, ": ", graph.status().message()));
    }
    return graph;
}

std::vector<float> random_values(const ir::TensorType& type, std::mt19937_64& rng) {
    const double last = type.rank() > 0 ? static_cast<double>(type.dims.back().size) : 1.0;
    const double scale = type.rank() >= 2 ? std::sqrt(3.0 / last) : 1.0;
    std::uniform_real_distribution<double> uniform(-scale, scale);
    std::vector<float> values(type.elements());
    for (float& value : values) {
        value = static_cast<float>(ir::round_to_dtype(uniform(rng), type.dtype));
    }
    return values;
}

} // namespace einsummable::tools
