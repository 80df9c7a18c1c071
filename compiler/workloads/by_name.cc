#include "compiler/workloads/by_name.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/support/status_macros.h"
#include "compiler/workloads/ffn.h"
#include "compiler/workloads/llama.h"
#include "compiler/workloads/matrix_chain.h"

namespace einsummable::workloads {
namespace {

constexpr absl::string_view kKnownForms =
    "ffn, ffn:tokens=T,d_model=D,d_ff=F, matmul:N, matmul:MxKxN, llama-block:tokens=T, "
    "llama-block:seqs=SxL, llama-stack:blocks=B,tokens=T, llama-stack:blocks=B,seqs=SxL, "
    "llama-decode:batch=B,cached=C, "
    "chain:A .. chain:E (also chain:A,scale=S); any may add ,dtype=f32|f16|bf16, the llama forms "
    "also d_model, heads_q, heads_kv, d_head and d_ff";
constexpr int64_t kMaxValue = int64_t{1} << 40;
constexpr int64_t kMaxSequences = int64_t{1} << 20;
constexpr int64_t kMaxBlocks = 1024;
// small_name: every size divided by 64 (ffn by 16, so that its shapes stay non-trivial).
constexpr int64_t kSmallFactor = 64;
constexpr absl::string_view kSmallLlama = "d_model=64,heads_q=8,heads_kv=2,d_head=8,d_ff=224";

// A parsed "family:positional,key=value,..." name.
struct Spec {
    std::string family;
    std::optional<std::string> positional; // matmul's shape, chain's letter
    std::map<std::string, std::string> params;
};

absl::StatusOr<int64_t> parse_positive(absl::string_view what, absl::string_view text) {
    if (text.empty() || text.size() > 13 || !std::all_of(text.begin(), text.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
        })) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " '", absl::CHexEscape(text.substr(0, 20)),
                         "' is not a decimal number of at most 13 digits"));
    }
    int64_t value = 0;
    for (char c : text) {
        value = value * 10 + (c - '0');
    }
    if (value <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(what, " is 0; it must be positive"));
    }
    if (value > kMaxValue) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " ", value, " is larger than ", kMaxValue));
    }
    return value;
}

// "AxB" or "AxBxC": exactly `count` positive numbers separated by 'x'.
absl::StatusOr<std::vector<int64_t>> parse_shape(absl::string_view what, absl::string_view text,
                                                 std::vector<size_t> counts) {
    const std::vector<absl::string_view> parts = absl::StrSplit(text, 'x');
    if (std::find(counts.begin(), counts.end(), parts.size()) == counts.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " '", absl::CHexEscape(text.substr(0, 40)), "' has ", parts.size(),
                         " 'x'-separated numbers, expected ", absl::StrJoin(counts, " or ")));
    }
    std::vector<int64_t> values;
    for (absl::string_view part : parts) {
        EINSUMMABLE_ASSIGN_OR_RETURN(int64_t value, parse_positive(what, part));
        values.push_back(value);
    }
    return values;
}

absl::StatusOr<Spec> parse_spec(absl::string_view text, bool has_positional,
                                std::vector<absl::string_view> known_keys) {
    Spec spec;
    const size_t colon = text.find(':');
    spec.family = std::string(text.substr(0, colon));
    if (colon == absl::string_view::npos) {
        if (has_positional) {
            return absl::InvalidArgumentError(
                absl::StrCat(spec.family, " needs a parameter after ':'"));
        }
        return spec;
    }
    const std::vector<absl::string_view> parts = absl::StrSplit(text.substr(colon + 1), ',');
    for (size_t idx = 0; idx < parts.size(); ++idx) {
        const absl::string_view part = parts[idx];
        if (part.empty()) {
            return absl::InvalidArgumentError(absl::StrCat("parameter ", idx + 1, " is empty"));
        }
        if (idx == 0 && has_positional) {
            spec.positional = std::string(part);
            continue;
        }
        const size_t eq = part.find('=');
        const std::string escaped = absl::CHexEscape(part.substr(0, 40));
        if (eq == absl::string_view::npos) {
            return absl::InvalidArgumentError(
                absl::StrCat("parameter '", escaped, "' is not key=value"));
        }
        const std::string key(part.substr(0, eq));
        if (std::find(known_keys.begin(), known_keys.end(), key) == known_keys.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat("unknown parameter '", absl::CHexEscape(key.substr(0, 40)), "' for ",
                             spec.family, " (known: ", absl::StrJoin(known_keys, ", "), ")"));
        }
        if (!spec.params.emplace(key, std::string(part.substr(eq + 1))).second) {
            return absl::InvalidArgumentError(absl::StrCat("parameter '", key, "' given twice"));
        }
    }
    if (has_positional && !spec.positional) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec.family, " needs a parameter after ':'"));
    }
    return spec;
}

absl::StatusOr<ir::DType> dtype_param(const Spec& spec, ir::DType fallback) {
    auto it = spec.params.find("dtype");
    if (it == spec.params.end()) {
        return fallback;
    }
    for (ir::DType dtype : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
        if (it->second == ir::dtype_name(dtype)) {
            return dtype;
        }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype '", absl::CHexEscape(it->second.substr(0, 20)), "' is not one of f32, f16, bf16"));
}

// Sets *value from the parameter `key` when it is present.
absl::Status int_param(const Spec& spec, const std::string& key, int64_t* value) {
    auto it = spec.params.find(key);
    if (it == spec.params.end()) {
        return absl::OkStatus();
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(int64_t parsed, parse_positive(key, it->second));
    *value = parsed;
    return absl::OkStatus();
}

absl::StatusOr<ir::Graph> build_ffn(absl::string_view text) {
    EINSUMMABLE_ASSIGN_OR_RETURN(Spec spec,
                                 parse_spec(text, false, {"tokens", "d_model", "d_ff", "dtype"}));
    int64_t tokens = 4096, d_model = 1024, d_ff = 4096;
    for (auto [key, value] : {std::pair<const char*, int64_t*>{"tokens", &tokens},
                              {"d_model", &d_model},
                              {"d_ff", &d_ff}}) {
        EINSUMMABLE_RETURN_IF_ERROR(int_param(spec, key, value));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(ir::DType dtype, dtype_param(spec, ir::DType::f32));
    return ffn(tokens, d_model, d_ff, dtype);
}

absl::StatusOr<ir::Graph> build_matmul(absl::string_view text) {
    EINSUMMABLE_ASSIGN_OR_RETURN(Spec spec, parse_spec(text, true, {"dtype"}));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                                 parse_shape("matmul shape", *spec.positional, {1, 3}));
    EINSUMMABLE_ASSIGN_OR_RETURN(ir::DType dtype, dtype_param(spec, ir::DType::f32));
    if (shape.size() == 1) {
        return matmul(shape[0], shape[0], shape[0], dtype);
    }
    return matmul(shape[0], shape[1], shape[2], dtype);
}

// The llama forms' shape keys (d_model, heads_q, heads_kv, d_head, d_ff) and dtype (default
// f16) into `config`.
absl::Status llama_shape_params(const Spec& spec, LlamaConfig& config) {
    for (auto [key, value] : {std::pair<const char*, int64_t*>{"d_model", &config.d_model},
                              {"heads_q", &config.heads_q},
                              {"heads_kv", &config.heads_kv},
                              {"d_head", &config.d_head},
                              {"d_ff", &config.d_ff}}) {
        EINSUMMABLE_RETURN_IF_ERROR(int_param(spec, key, value));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(config.dtype, dtype_param(spec, ir::DType::f16));
    return absl::OkStatus();
}

absl::StatusOr<ir::Graph> build_llama(absl::string_view text, bool stack) {
    std::vector<absl::string_view> keys = {"tokens",  "seqs",     "dtype",  "d_model",
                                           "heads_q", "heads_kv", "d_head", "d_ff"};
    if (stack) {
        keys.insert(keys.begin(), "blocks");
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(Spec spec, parse_spec(text, false, keys));
    const bool has_tokens = spec.params.count("tokens") > 0;
    const bool has_seqs = spec.params.count("seqs") > 0;
    if (has_tokens == has_seqs) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec.family, has_tokens ? " takes only one of" : " needs one of",
                         " tokens=T (one sequence) and seqs=SxL (S sequences of L tokens)"));
    }
    LlamaConfig config;
    if (has_tokens) {
        int64_t tokens = 0;
        EINSUMMABLE_RETURN_IF_ERROR(int_param(spec, "tokens", &tokens));
        config = LlamaConfig::single(tokens);
    } else {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<int64_t> seqs,
                                     parse_shape("seqs", spec.params.at("seqs"), {2}));
        if (seqs[0] > kMaxSequences) {
            return absl::InvalidArgumentError(absl::StrCat(
                "seqs: ", seqs[0], " sequences is more than the limit of ", kMaxSequences));
        }
        config = LlamaConfig::batch(seqs[0], seqs[1]);
    }
    EINSUMMABLE_RETURN_IF_ERROR(llama_shape_params(spec, config));
    if (!stack) {
        return llama_block(config);
    }
    if (spec.params.count("blocks") == 0) {
        return absl::InvalidArgumentError("llama-stack needs blocks=B");
    }
    int64_t blocks = 0;
    EINSUMMABLE_RETURN_IF_ERROR(int_param(spec, "blocks", &blocks));
    if (blocks > kMaxBlocks) {
        return absl::InvalidArgumentError(
            absl::StrCat("blocks: ", blocks, " is more than the limit of ", kMaxBlocks));
    }
    return llama_stack(config, static_cast<int>(blocks));
}

// llama-decode:batch=B,cached=C with the llama shapes' keys (d_model=, heads_q=, heads_kv=,
// d_head=, d_ff=, dtype=).
absl::StatusOr<ir::Graph> build_llama_decode(absl::string_view text) {
    EINSUMMABLE_ASSIGN_OR_RETURN(Spec spec, parse_spec(text, false,
                                                       {"batch", "cached", "dtype", "d_model",
                                                        "heads_q", "heads_kv", "d_head", "d_ff"}));
    int64_t batch = 1, cached = 4096;
    EINSUMMABLE_RETURN_IF_ERROR(int_param(spec, "batch", &batch));
    EINSUMMABLE_RETURN_IF_ERROR(int_param(spec, "cached", &cached));
    if (batch > kMaxSequences) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch: ", batch, " sequences is more than the limit of ", kMaxSequences));
    }
    LlamaConfig config = LlamaConfig::batch(batch, 1);
    EINSUMMABLE_RETURN_IF_ERROR(llama_shape_params(spec, config));
    return llama_decode(config, cached);
}

absl::StatusOr<ir::Graph> build_chain(absl::string_view text) {
    EINSUMMABLE_ASSIGN_OR_RETURN(Spec spec, parse_spec(text, true, {"dtype", "scale"}));
    int64_t scale = 1;
    EINSUMMABLE_RETURN_IF_ERROR(int_param(spec, "scale", &scale));
    const std::string& letter = *spec.positional;
    if (letter.size() != 1 || letter[0] < 'A' || letter[0] > 'E') {
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown matrix chain '", absl::CHexEscape(letter.substr(0, 20)), "' (known: A to E)"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(ir::DType dtype, dtype_param(spec, ir::DType::f16));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<int64_t> dims, chain_dims(letter[0]));
    EINSUMMABLE_ASSIGN_OR_RETURN(const std::string parenthesisation,
                                 chain_parenthesisation(letter[0]));
    for (int64_t& dim : dims) {
        dim = (dim + scale - 1) / scale;
    }
    return chain_from(parenthesisation, dims, dtype);
}

absl::StatusOr<ir::Graph> build(absl::string_view spec) {
    const absl::string_view family = spec.substr(0, spec.find(':'));
    if (family == "ffn") {
        return build_ffn(spec);
    }
    if (family == "matmul") {
        return build_matmul(spec);
    }
    if (family == "llama-block" || family == "llama-stack") {
        return build_llama(spec, family == "llama-stack");
    }
    if (family == "llama-decode") {
        return build_llama_decode(spec);
    }
    if (family == "chain") {
        return build_chain(spec);
    }
    return absl::InvalidArgumentError(
        family.empty()
            ? std::string("empty workload name")
            : absl::StrCat("unknown workload '", absl::CHexEscape(family.substr(0, 40)), "'"));
}

} // namespace

absl::StatusOr<ir::Graph> by_name(absl::string_view spec) {
    absl::StatusOr<ir::Graph> graph = build(spec);
    if (!graph.ok()) {
        const absl::string_view shown = spec.substr(0, 200);
        return absl::Status(graph.status().code(),
                            absl::StrCat("workload '", absl::CHexEscape(shown),
                                         shown.size() < spec.size() ? "...'" : "'", ": ",
                                         graph.status().message(), ". Known forms: ", kKnownForms));
    }
    return graph;
}

std::vector<std::string> reference_names() {
    return {"llama-block:tokens=1024",
            "llama-block:tokens=8192",
            "llama-block:tokens=131072",
            "llama-block:seqs=8x1024",
            "llama-block:seqs=128x1024",
            "chain:A",
            "chain:B",
            "chain:C",
            "chain:D",
            "chain:E",
            "ffn"};
}

absl::StatusOr<std::string> small_name(absl::string_view name) {
    const std::map<std::string, std::string> small = {
        {"ffn", "ffn:tokens=256,d_model=64,d_ff=256"},
        {"llama-block:tokens=1024", absl::StrCat("llama-block:tokens=16,", kSmallLlama)},
        {"llama-block:tokens=8192", absl::StrCat("llama-block:tokens=128,", kSmallLlama)},
        {"llama-block:tokens=131072", absl::StrCat("llama-block:tokens=2048,", kSmallLlama)},
        {"llama-block:seqs=8x1024", absl::StrCat("llama-block:seqs=8x16,", kSmallLlama)},
        {"llama-block:seqs=128x1024", absl::StrCat("llama-block:seqs=128x16,", kSmallLlama)},
    };
    auto it = small.find(std::string(name));
    if (it != small.end()) {
        return it->second;
    }
    if (name.size() == 7 && absl::StartsWith(name, "chain:")) {
        return absl::StrCat(name, ",scale=", kSmallFactor);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("no small version of workload '", absl::CHexEscape(name.substr(0, 60)),
                     "' (small versions exist for: ", absl::StrJoin(reference_names(), ", "), ")"));
}

} // namespace einsummable::workloads
