#include "runtime/command_line.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace einsummable::runtime {

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

} // namespace einsummable::runtime
