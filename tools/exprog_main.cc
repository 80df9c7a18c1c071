// einsummable-exprog: checks, simulates and synthesises exchange programs. See docs/exprog.md,
// "Command line".

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/parser.h"
#include "compiler/exprog/program_simulation.h"
#include "compiler/exprog/semantics.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/exprog/topology.h"
#include "compiler/support/json.h"
#include "compiler/support/status_macros.h"
#include "runtime/command_line.h"
#include "tools/timeline_svg.h"

ABSL_FLAG(std::string, topology, "dgx-a100",
          "a built-in topology (dgx-a100, dgx-h100, dgx-v100, or a cluster: dgx-a100-2nodes ... "
          "dgx-h100-4nodes) or the path of a topology file "
          "(docs/topologies.md)");
ABSL_FLAG(std::string, mode, "optimized", "synthesize: naive, optimized or ai (= optimized)");
ABSL_FLAG(uint64_t, seed, 0, "synthesize: seed of the optimized search");
ABSL_FLAG(int, iterations, einsummable::exprog::SynthesisOptions().iterations,
          "synthesize: candidates the optimized search evaluates after its initial ones");
ABSL_FLAG(int, max_chunks, einsummable::exprog::SynthesisOptions().max_chunks,
          "synthesize: the most chunks pipelined candidates cut an atom into (1, 2, 4, ...); 0: "
          "whole atoms, no ORDER");
ABSL_FLAG(bool, json, false, "print the result as one JSON object");
ABSL_FLAG(std::string, timeline, "",
          "simulate, synthesize: write an SVG timeline of the simulated run to this file");

namespace einsummable {
namespace {

using runtime::in_file;
using runtime::load_topology;
using runtime::read_file;

constexpr const char* kUsage =
    "checks, simulates and synthesises exchange programs (docs/exprog.md):\n"
    "  einsummable-exprog check FILE       validity; prints 'valid' and the membership chosen\n"
    "                                      for the partitions declared by size\n"
    "  einsummable-exprog simulate FILE    check, then the simulated time and a per-task trace\n"
    "  einsummable-exprog synthesize FILE  FILE is a preamble (GPUS, PARTITIONS, IN, OUT, no\n"
    "                                      actions); prints the synthesised program, then its\n"
    "                                      membership, simulated and naive times as # comments\n"
    "flags: [--topology NAME|PATH] [--mode naive|optimized|ai] [--seed N] [--iterations N]\n"
    "       [--max_chunks N] [--json] [--timeline OUT.svg]; FILE '-' reads standard input.\n"
    "exit status: 0 success; 1 the program is invalid (semantic error, or a preamble synthesis\n"
    "rejects); 2 usage error (command, flag, file, syntax error, topology). Errors are one line\n"
    "on stderr.";

constexpr int kExitInvalid = 1;
constexpr int kExitUsage = 2;

// An error to report: one line on stderr and an exit status.
struct Failure {
    int exit_code = kExitUsage;
    std::string message;
};

int report(const Failure& failure) {
    std::string line = failure.message;
    for (char& c : line) {
        if (c == '\n' || c == '\r') {
            c = ' ';
        }
    }
    std::fprintf(stderr, "einsummable-exprog: error: %s\n", line.c_str());
    return failure.exit_code;
}

// ---- JSON -------------------------------------------------------------------------------------

using support::json_string;

std::string json_number(double value) {
    return std::isfinite(value) ? absl::StrFormat("%.17g", value) : "null";
}

std::string json_membership(const exprog::Membership& membership) {
    std::vector<std::string> entries;
    for (const auto& [name, gpus] : membership) {
        entries.push_back(absl::StrCat(json_string(name), ": [", absl::StrJoin(gpus, ", "), "]"));
    }
    return absl::StrCat("{", absl::StrJoin(entries, ", "), "}");
}

std::string json_topology(const exprog::Topology& topology) {
    return absl::StrCat("{\"name\": ", json_string(topology.name()),
                        ", \"kind\": ", json_string(exprog::topology_kind_name(topology.kind())),
                        ", \"gpus\": ", topology.num_gpus(), "}");
}

std::string json_tasks(const exprog::ProgramSimulation& simulation) {
    std::vector<std::string> tasks;
    for (size_t idx = 0; idx < simulation.tasks.size(); ++idx) {
        const exprog::SimTask& task = simulation.tasks[idx];
        const exprog::TaskTrace& trace = simulation.result.trace[idx];
        std::vector<std::string> resources;
        for (const std::string& resource : trace.resources) {
            resources.push_back(json_string(resource));
        }
        const bool transfer = task.kind == exprog::SimTask::Kind::transfer;
        tasks.push_back(absl::StrCat(
            "    {\"task\": ", idx, ", \"kind\": ", transfer ? "\"transfer\"" : "\"aggregate\"",
            transfer
                ? absl::StrCat(", \"src_gpu\": ", task.src_gpu, ", \"dst_gpu\": ", task.dst_gpu)
                : absl::StrCat(", \"gpu\": ", task.src_gpu),
            ", \"start_s\": ", json_number(trace.start), ", \"end_s\": ", json_number(trace.end),
            ", \"bytes\": ", json_number(trace.bytes), ", \"deps\": [",
            absl::StrJoin(task.deps, ", "), "], \"resources\": [", absl::StrJoin(resources, ", "),
            "], \"action\": ", simulation.task_action[idx],
            ", \"label\": ", json_string(task.label), "}"));
    }
    return tasks.empty() ? "[]" : absl::StrCat("[\n", absl::StrJoin(tasks, ",\n"), "\n  ]");
}

// ---- Text -------------------------------------------------------------------------------------

std::string membership_lines(const exprog::Membership& membership, absl::string_view prefix) {
    std::string out;
    for (const auto& [name, gpus] : membership) {
        absl::StrAppend(&out, prefix, name, " = {", absl::StrJoin(gpus, ", "), "}\n");
    }
    return out;
}

// A table with columns padded to their widest cell; `right` marks right-aligned columns. The
// last column is not padded.
std::string table(const std::vector<std::vector<std::string>>& rows,
                  const std::vector<bool>& right) {
    std::vector<size_t> width(right.size(), 0);
    for (const auto& row : rows) {
        for (size_t col = 0; col < row.size(); ++col) {
            width[col] = std::max(width[col], row[col].size());
        }
    }
    std::string out;
    for (const auto& row : rows) {
        std::string line;
        for (size_t col = 0; col < row.size(); ++col) {
            const std::string& cell = row[col];
            const std::string pad(width[col] - cell.size(), ' ');
            if (col > 0) {
                line += "  ";
            }
            if (col + 1 == row.size()) {
                line += right[col] ? pad + cell : cell;
            } else {
                line += right[col] ? pad + cell : cell + pad;
            }
        }
        out += line + "\n";
    }
    return out;
}

std::string trace_table(const exprog::ProgramSimulation& simulation) {
    const tools::TimeUnit unit = tools::time_unit(simulation.result.makespan_s);
    std::vector<std::vector<std::string>> rows = {
        {"task", "kind", "gpus", absl::StrCat("start (", unit.name, ")"),
         absl::StrCat("end (", unit.name, ")"), "bytes", "resources", "label"}};
    for (size_t idx = 0; idx < simulation.tasks.size(); ++idx) {
        const exprog::SimTask& task = simulation.tasks[idx];
        const exprog::TaskTrace& trace = simulation.result.trace[idx];
        const bool transfer = task.kind == exprog::SimTask::Kind::transfer;
        rows.push_back(
            {absl::StrCat(idx), transfer ? "transfer" : "aggregate",
             transfer ? absl::StrCat(task.src_gpu, "->", task.dst_gpu) : absl::StrCat(task.src_gpu),
             absl::StrFormat("%.3f", trace.start / unit.scale),
             absl::StrFormat("%.3f", trace.end / unit.scale), tools::format_bytes(trace.bytes),
             trace.resources.empty() ? "-" : absl::StrJoin(trace.resources, ","), task.label});
    }
    return table(rows, {true, false, false, true, true, true, false, false});
}

// ---- Commands ---------------------------------------------------------------------------------

struct Input {
    std::string path;
    exprog::Program program;
};

absl::StatusOr<Input> load_program(const std::string& path) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const std::string text, read_file(path));
    const std::string name = path == "-" ? "<stdin>" : path; // in messages
    absl::StatusOr<exprog::Program> program = exprog::parse_program(text);
    if (!program.ok()) {
        return absl::InvalidArgumentError(in_file(name, program.status().message()));
    }
    return Input{name, *std::move(program)};
}

std::vector<int> sorted_gpus(const exprog::Program& program) {
    std::vector<int> gpus = program.gpus;
    std::sort(gpus.begin(), gpus.end());
    return gpus;
}

std::optional<Failure> write_timeline(const exprog::Program& program,
                                      const exprog::ProgramSimulation& simulation,
                                      const exprog::Topology& topology, const std::string& what) {
    const std::string path = absl::GetFlag(FLAGS_timeline);
    if (path.empty()) {
        return std::nullopt;
    }
    const std::string title = absl::StrCat(what, " on ", topology.name(), ": simulated time ",
                                           tools::format_duration(simulation.result.makespan_s));
    const std::string svg =
        tools::timeline_svg(simulation.tasks, simulation.result, sorted_gpus(program), title);
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << svg;
    file.close();
    if (!file) {
        return Failure{kExitUsage, absl::StrCat("--timeline: cannot write '", path, "'")};
    }
    return std::nullopt;
}

int check(const Input& input) {
    absl::StatusOr<exprog::CheckResult> result = exprog::check_program(input.program);
    const bool json = absl::GetFlag(FLAGS_json);
    if (!result.ok()) {
        const std::string message = in_file(input.path, result.status().message());
        if (json) {
            std::printf("{\"command\": \"check\", \"file\": %s, \"valid\": false, \"error\": %s}\n",
                        json_string(input.path).c_str(), json_string(message).c_str());
        }
        return report({kExitInvalid, message});
    }
    if (json) {
        std::printf("{\"command\": \"check\", \"file\": %s, \"valid\": true, \"membership\": %s}\n",
                    json_string(input.path).c_str(), json_membership(result->membership).c_str());
    } else {
        std::printf("valid\n%s", membership_lines(result->membership, "").c_str());
    }
    return 0;
}

int simulate(const Input& input, const exprog::Topology& topology) {
    absl::StatusOr<exprog::CheckResult> checked = exprog::check_program(input.program);
    if (!checked.ok()) {
        return report({kExitInvalid, in_file(input.path, checked.status().message())});
    }
    absl::StatusOr<exprog::ProgramSimulation> simulation =
        exprog::simulate_program(input.program, checked->membership, topology);
    if (!simulation.ok()) {
        return report({kExitInvalid, in_file(input.path, simulation.status().message())});
    }
    if (std::optional<Failure> failure =
            write_timeline(input.program, *simulation, topology, input.path)) {
        return report(*failure);
    }
    const double makespan = simulation->result.makespan_s;
    if (absl::GetFlag(FLAGS_json)) {
        std::printf("{\n  \"command\": \"simulate\",\n  \"file\": %s,\n  \"topology\": %s,\n"
                    "  \"membership\": %s,\n  \"simulated_s\": %s,\n  \"tasks\": %s\n}\n",
                    json_string(input.path).c_str(), json_topology(topology).c_str(),
                    json_membership(checked->membership).c_str(), json_number(makespan).c_str(),
                    json_tasks(*simulation).c_str());
        return 0;
    }
    std::printf("topology: %s (%s, %d GPUs)\n%ssimulated time: %s\ntasks: %zu\n\n%s",
                topology.name().c_str(),
                std::string(exprog::topology_kind_name(topology.kind())).c_str(),
                topology.num_gpus(), membership_lines(checked->membership, "membership: ").c_str(),
                tools::format_duration(makespan).c_str(), simulation->tasks.size(),
                trace_table(*simulation).c_str());
    return 0;
}

int synthesize(const Input& input, const exprog::Topology& topology,
               const exprog::SynthesisOptions& options) {
    absl::StatusOr<exprog::SynthesisResult> result =
        exprog::synthesize(input.program, topology, options);
    if (!result.ok()) {
        return report({kExitInvalid, in_file(input.path, result.status().message())});
    }
    // The trace of the synthesised program, for --json and --timeline.
    absl::StatusOr<exprog::ProgramSimulation> simulation =
        exprog::simulate_program(result->program, result->membership, topology);
    if (!simulation.ok()) {
        return report({kExitInvalid, absl::StrCat("the synthesised program does not simulate: ",
                                                  simulation.status().message())});
    }
    const std::string mode(exprog::synthesis_mode_name(options.mode));
    if (std::optional<Failure> failure =
            write_timeline(result->program, *simulation, topology,
                           absl::StrCat(input.path, " (synthesised, ", mode, ")"))) {
        return report(*failure);
    }
    const std::string program_text = exprog::print_program(result->program);
    if (absl::GetFlag(FLAGS_json)) {
        std::printf("{\n  \"command\": \"synthesize\",\n  \"file\": %s,\n  \"topology\": %s,\n"
                    "  \"mode\": %s,\n  \"seed\": %llu,\n  \"iterations\": %d,\n"
                    "  \"program\": %s,\n  \"membership\": %s,\n  \"simulated_s\": %s,\n"
                    "  \"naive_simulated_s\": %s,\n  \"candidates\": %d,\n  \"tasks\": %s\n}\n",
                    json_string(input.path).c_str(), json_topology(topology).c_str(),
                    json_string(mode).c_str(), static_cast<unsigned long long>(options.seed),
                    options.iterations, json_string(program_text).c_str(),
                    json_membership(result->membership).c_str(),
                    json_number(result->simulated_s).c_str(),
                    json_number(result->naive_simulated_s).c_str(), result->candidates,
                    json_tasks(*simulation).c_str());
        return 0;
    }
    // The program, then the rest as comments, so that the output is itself a program file.
    std::string out = program_text;
    absl::StrAppend(&out, "\n# synthesised by einsummable-exprog: mode ", mode, ", seed ",
                    options.seed, ", iterations ", options.iterations, ", max chunks ",
                    options.max_chunks, "; candidates simulated: ", result->candidates, "\n");
    if (!result->membership.empty()) {
        absl::StrAppend(&out, membership_lines(result->membership, "# membership: "));
    }
    absl::StrAppend(&out, "# simulated time: ", tools::format_duration(result->simulated_s), " on ",
                    topology.name(),
                    "\n# naive time: ", tools::format_duration(result->naive_simulated_s));
    if (result->simulated_s > 0.0) {
        absl::StrAppendFormat(&out, " (speed-up of the synthesised program: %.2fx)",
                              result->naive_simulated_s / result->simulated_s);
    }
    out += "\n";
    std::fputs(out.c_str(), stdout);
    return 0;
}

int run(const std::vector<char*>& positional) {
    if (positional.size() < 2) {
        return report(
            {kExitUsage, "expected a command: check, simulate or synthesize (see --help)"});
    }
    const std::string command = positional[1];
    if (command != "check" && command != "simulate" && command != "synthesize") {
        return report({kExitUsage, absl::StrCat("unknown command '", command,
                                                "' (expected check, simulate or synthesize)")});
    }
    if (positional.size() < 3) {
        return report(
            {kExitUsage, absl::StrCat("missing FILE: einsummable-exprog ", command, " FILE")});
    }
    if (positional.size() > 3) {
        return report({kExitUsage, absl::StrCat("unexpected argument '", positional[3], "'")});
    }
    absl::StatusOr<exprog::SynthesisMode> mode =
        exprog::parse_synthesis_mode(absl::GetFlag(FLAGS_mode));
    if (!mode.ok()) {
        return report({kExitUsage, absl::StrCat("--mode: ", mode.status().message())});
    }
    exprog::SynthesisOptions options;
    options.mode = *mode;
    options.seed = absl::GetFlag(FLAGS_seed);
    options.iterations = absl::GetFlag(FLAGS_iterations);
    if (options.iterations < 0) {
        return report({kExitUsage,
                       absl::StrCat("--iterations must be at least 0, got ", options.iterations)});
    }
    options.max_chunks = absl::GetFlag(FLAGS_max_chunks);
    if (options.max_chunks < 0 || options.max_chunks > exprog::Chunk::kMaxCount) {
        return report(
            {kExitUsage, absl::StrCat("--max_chunks must be between 0 and ",
                                      exprog::Chunk::kMaxCount, ", got ", options.max_chunks)});
    }
    if (command == "check" && !absl::GetFlag(FLAGS_timeline).empty()) {
        return report({kExitUsage, "--timeline applies to simulate and synthesize, not check"});
    }
    absl::StatusOr<exprog::Topology> topology = load_topology(absl::GetFlag(FLAGS_topology));
    if (!topology.ok()) {
        return report({kExitUsage, std::string(topology.status().message())});
    }
    absl::StatusOr<Input> input = load_program(positional[2]);
    if (!input.ok()) {
        return report({kExitUsage, std::string(input.status().message())});
    }
    if (command == "check") {
        return check(*input);
    }
    if (command == "simulate") {
        return simulate(*input, *topology);
    }
    return synthesize(*input, *topology, options);
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    absl::SetProgramUsageMessage(einsummable::kUsage);
    absl::FlagsUsageConfig config;
    config.contains_help_flags = [](absl::string_view file) {
        return absl::EndsWith(file, "exprog_main.cc");
    };
    config.contains_helpshort_flags = config.contains_help_flags;
    absl::SetFlagsUsageConfig(config);
    // Bad flags exit with 2 (usage), not absl's 1 (the status of an invalid program).
    if (std::optional<std::string> error = einsummable::runtime::check_flags(argc, argv)) {
        return einsummable::report({einsummable::kExitUsage, *error});
    }
    return einsummable::run(absl::ParseCommandLine(argc, argv));
}
