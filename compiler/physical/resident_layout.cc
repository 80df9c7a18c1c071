#include "compiler/physical/resident_layout.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/ops/write_rows.h"

namespace einsummable::physical {
namespace {

constexpr int64_t kAlignment = 64;

int64_t align_up(int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

} // namespace

ir::Tiling ResidentTensor::tiling() const {
    ir::Tiling boxes;
    for (const ResidentBlock& block : blocks) {
        boxes.push_back(block.box);
    }
    std::sort(boxes.begin(), boxes.end());
    boxes.erase(std::unique(boxes.begin(), boxes.end()), boxes.end());
    return boxes;
}

std::string ResidentLayout::to_string() const {
    std::string out = absl::StrCat("resident layout, ", devices, " devices, arenas");
    for (int64_t bytes : arena_bytes) {
        absl::StrAppend(&out, " ", bytes);
    }
    absl::StrAppend(&out, "\n");
    for (const auto& [name, tensor] : tensors) {
        absl::StrAppend(&out, "'", name, "' ", tensor.type.to_string(), "\n");
        for (const ResidentBlock& block : tensor.blocks) {
            absl::StrAppend(&out, "  ", block.box.to_string(), " @", block.device, " +",
                            block.offset, "\n");
        }
    }
    return out;
}

std::string ResidentLayout::fingerprint() const {
    // 64-bit FNV-1a: stable across processes and builds, unlike absl::Hash.
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : to_string()) {
        hash ^= c;
        hash *= 0x100000001b3ull;
    }
    return absl::StrFormat("%016x", hash);
}

int64_t ResidentLayout::total_bytes() const {
    int64_t total = 0;
    for (int64_t bytes : arena_bytes) {
        total += bytes;
    }
    return total;
}

std::set<std::string> residable_inputs(const ir::Graph& graph, const std::set<std::string>& names) {
    std::set<std::string> residable;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        if (names.count(tensor.name) && !tensor.saved) {
            residable.insert(tensor.name);
        }
    }
    return residable;
}

absl::StatusOr<std::set<std::string>> resident_states(const ir::Graph& graph,
                                                      const std::set<std::string>& resident) {
    std::set<std::string> states;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        if (!resident.count(tensor.name)) {
            continue;
        }
        int in_place_reads = 0;
        int other_reads = 0;
        std::string writer;
        for (ir::NodeId consumer : tensor.consumers) {
            const ir::GraphNode& node = graph.node(consumer);
            const int in_place = ir::in_place_input(*node.op);
            for (int i = 0; i < static_cast<int>(node.inputs.size()); ++i) {
                if (node.inputs[i] != id) {
                    continue;
                }
                if (i == in_place) {
                    ++in_place_reads;
                    writer = node.name;
                } else {
                    ++other_reads;
                }
            }
        }
        if (in_place_reads == 0) {
            continue;
        }
        if (in_place_reads > 1 || other_reads > 0 || tensor.saved) {
            return absl::InvalidArgumentError(absl::StrCat(
                "resident state '", tensor.name, "' is updated in place by operator '", writer,
                "', so nothing else may read it", tensor.saved ? " or save it" : "", ": it has ",
                in_place_reads + other_reads, " reads", tensor.saved ? " and is saved" : "",
                " (read the operator's output instead, which holds the update)"));
        }
        states.insert(tensor.name);
    }
    return states;
}

std::map<ir::TensorId, const ResidentTensor*>
pinned_inputs(const ir::Graph& graph, const ResidentLayout* layout, int devices) {
    std::map<ir::TensorId, const ResidentTensor*> pinned;
    if (layout == nullptr || layout->devices != devices) {
        return pinned;
    }
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        auto it = layout->tensors.find(tensor.name);
        if (it != layout->tensors.end() && !tensor.saved && it->second.type == tensor.type) {
            pinned.emplace(id, &it->second);
        }
    }
    return pinned;
}

std::map<ir::TensorId, ir::Tiling> pinned_tilings(const ir::Graph& graph,
                                                  const ResidentLayout* layout, int devices) {
    std::map<ir::TensorId, ir::Tiling> tilings;
    for (const auto& [id, tensor] : pinned_inputs(graph, layout, devices)) {
        tilings.emplace(id, tensor->tiling());
    }
    return tilings;
}

ResidentLayout pack_resident_layout(int devices, std::map<std::string, ResidentTensor> tensors) {
    ResidentLayout layout;
    layout.devices = devices;
    layout.arena_bytes.assign(devices, 0);
    for (auto& [name, tensor] : tensors) {
        std::sort(tensor.blocks.begin(), tensor.blocks.end(),
                  [](const ResidentBlock& a, const ResidentBlock& b) {
                      return std::tie(a.device, a.box) < std::tie(b.device, b.box);
                  });
        tensor.blocks.erase(std::unique(tensor.blocks.begin(), tensor.blocks.end(),
                                        [](const ResidentBlock& a, const ResidentBlock& b) {
                                            return a.device == b.device && a.box == b.box;
                                        }),
                            tensor.blocks.end());
        const int64_t element_bytes = ir::dtype_size(tensor.type.dtype);
        for (ResidentBlock& block : tensor.blocks) {
            block.offset = layout.arena_bytes[block.device];
            layout.arena_bytes[block.device] += align_up(block.box.volume() * element_bytes);
        }
    }
    layout.tensors = std::move(tensors);
    return layout;
}

namespace {

constexpr absl::string_view kRecordHeader = "einsummable-resident-layout 1";

// A C-escaped, double-quoted token at the start of `text`, consumed with the space after it.
bool take_quoted(absl::string_view& text, std::string& out) {
    if (text.empty() || text.front() != '"') {
        return false;
    }
    size_t end = 1;
    while (end < text.size() && text[end] != '"') {
        end += text[end] == '\\' ? 2 : 1;
    }
    if (end >= text.size() || !absl::CUnescape(text.substr(1, end - 1), &out)) {
        return false;
    }
    text.remove_prefix(end + 1);
    text = absl::StripLeadingAsciiWhitespace(text);
    return true;
}

// A whitespace-separated token at the start of `text`, consumed.
absl::string_view take_token(absl::string_view& text) {
    const size_t end = std::min(text.find(' '), text.size());
    absl::string_view token = text.substr(0, end);
    text.remove_prefix(end);
    text = absl::StripLeadingAsciiWhitespace(text);
    return token;
}

// "[0,16)x[0,10)" (ir::Box::to_string) back into a box.
bool parse_box(absl::string_view text, ir::Box& box) {
    std::vector<ir::Interval> dims;
    if (text == "[]") {
        box = ir::Box();
        return true;
    }
    for (absl::string_view part : absl::StrSplit(text, 'x')) {
        if (part.size() < 5 || part.front() != '[' || part.back() != ')') {
            return false;
        }
        std::vector<absl::string_view> bounds =
            absl::StrSplit(part.substr(1, part.size() - 2), ',');
        ir::Interval interval;
        if (bounds.size() != 2 || !absl::SimpleAtoi(bounds[0], &interval.lower) ||
            !absl::SimpleAtoi(bounds[1], &interval.upper) || interval.upper < interval.lower) {
            return false;
        }
        dims.push_back(interval);
    }
    box = ir::Box(std::move(dims));
    return true;
}

} // namespace

std::string resident_layout_record(const ResidentLayout& layout) {
    std::string out = absl::StrCat(kRecordHeader, "\ndevices ", layout.devices, "\n");
    for (const auto& [name, tensor] : layout.tensors) {
        absl::StrAppend(&out, "tensor \"", absl::CEscape(name), "\" ",
                        ir::dtype_name(tensor.type.dtype), " ", tensor.type.rank());
        for (const ir::Dim& dim : tensor.type.dims) {
            absl::StrAppend(&out, " \"", absl::CEscape(dim.name), "\" ", dim.size);
        }
        absl::StrAppend(&out, "\n");
        for (const ResidentBlock& block : tensor.blocks) {
            absl::StrAppend(&out, "block ", block.device, " ", block.box.to_string(), "\n");
        }
    }
    absl::StrAppend(&out, "end\n");
    return out;
}

absl::StatusOr<ResidentLayout> parse_resident_layout_record(absl::string_view text) {
    std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
    auto error = [&](size_t line, absl::string_view why) {
        return absl::InvalidArgumentError(
            absl::StrCat("resident layout record line ", line + 1, ": ", why));
    };
    if (lines.empty() || lines[0] != kRecordHeader) {
        return error(0, absl::StrCat("expected '", kRecordHeader, "'"));
    }
    int devices = 0;
    if (lines.size() < 2 || !absl::ConsumePrefix(&lines[1], "devices ") ||
        !absl::SimpleAtoi(lines[1], &devices) || devices < 1) {
        return error(1, "expected 'devices N' with N at least 1");
    }
    std::map<std::string, ResidentTensor> tensors;
    ResidentTensor* current = nullptr;
    for (size_t at = 2; at < lines.size(); ++at) {
        absl::string_view line = lines[at];
        if (line.empty()) {
            continue;
        }
        if (line == "end") {
            return pack_resident_layout(devices, std::move(tensors));
        }
        if (absl::ConsumePrefix(&line, "tensor ")) {
            std::string name;
            if (!take_quoted(line, name)) {
                return error(at, "expected a quoted tensor name");
            }
            ResidentTensor tensor;
            absl::StatusOr<ir::DType> dtype = ir::parse_dtype(take_token(line));
            int rank = 0;
            if (!dtype.ok() || !absl::SimpleAtoi(take_token(line), &rank) || rank < 0) {
                return error(at, "expected a dtype and a rank after the name");
            }
            tensor.type.dtype = *dtype;
            for (int d = 0; d < rank; ++d) {
                ir::Dim dim;
                if (!take_quoted(line, dim.name) ||
                    !absl::SimpleAtoi(take_token(line), &dim.size) || dim.size < 1) {
                    return error(at, absl::StrCat("dimension ", d,
                                                  ": expected a quoted name and "
                                                  "a positive size"));
                }
                tensor.type.dims.push_back(std::move(dim));
            }
            if (!line.empty() || !tensors.emplace(name, std::move(tensor)).second) {
                return error(at, absl::StrCat("tensor '", name, "' repeated or malformed"));
            }
            current = &tensors.at(name);
            continue;
        }
        if (absl::ConsumePrefix(&line, "block ")) {
            ResidentBlock block;
            if (current == nullptr || !absl::SimpleAtoi(take_token(line), &block.device) ||
                block.device < 0 || block.device >= devices || !parse_box(line, block.box) ||
                block.box.rank() != current->type.rank() ||
                !current->type.box().contains(block.box)) {
                return error(at, "expected 'block DEVICE BOX' inside the tensor, after it");
            }
            current->blocks.push_back(std::move(block));
            continue;
        }
        return error(at, "expected 'tensor', 'block' or 'end'");
    }
    return error(lines.size() - 1, "no 'end' line (truncated)");
}

ResidentLayout define_resident_layout(const ir::Graph& graph, const PhysicalPlan& plan,
                                      const std::set<std::string>& names) {
    const std::set<std::string> residable = residable_inputs(graph, names);
    std::map<std::string, ResidentTensor> tensors;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        if (residable.count(tensor.name)) {
            tensors[tensor.name].type = tensor.type;
        }
    }
    for (const OperatorPlacement& op : plan.operators) {
        const ir::GraphNode& node = graph.node(op.node);
        for (size_t i = 0; i < node.inputs.size(); ++i) {
            auto it = tensors.find(graph.tensor(node.inputs[i]).name);
            if (it == tensors.end()) {
                continue;
            }
            for (size_t k = 0; k < op.spec.functions.size(); ++k) {
                it->second.blocks.push_back({op.devices[k], op.spec.functions[k].inputs[i], 0});
            }
        }
    }
    return pack_resident_layout(plan.devices, std::move(tensors));
}

} // namespace einsummable::physical
