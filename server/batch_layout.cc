#include "server/batch_layout.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/model.h"
#include "server/tensor_limits.h"

namespace einsummable::server {

absl::StatusOr<BatchLayout> BatchLayout::make(const std::string& model, const std::string& symbol,
                                              const graphdef::Bindings& one,
                                              absl::Span<const int64_t> one_ends, int requests,
                                              int slots) {
    const int64_t length = one.at(symbol);
    if (length > kMaxDimensionSize / slots) {
        return absl::ResourceExhaustedError(
            absl::StrCat("model '", model, "': a batch of ", slots, " requests of '", symbol,
                         "' = ", length, " exceeds the largest dimension, ", kMaxDimensionSize));
    }
    BatchLayout layout;
    layout.requests_ = requests;
    layout.slots_ = slots;
    layout.bindings_ = one;
    layout.bindings_[symbol] = length * slots;
    layout.sequence_ends_.reserve(one_ends.size() * slots);
    for (int slot = 0; slot < slots; ++slot) {
        for (int64_t end : one_ends) {
            layout.sequence_ends_.push_back(slot * length + end);
        }
    }
    return layout;
}

std::vector<std::byte> BatchLayout::pack(absl::Span<const absl::string_view> per_request) const {
    const absl::string_view last = per_request.back();
    std::vector<std::byte> packed(last.size() * slots_);
    for (int slot = 0; slot < slots_; ++slot) {
        const absl::string_view data = slot < requests_ ? per_request[slot] : last;
        std::memcpy(packed.data() + slot * last.size(), data.data(), data.size());
    }
    return packed;
}

absl::Span<const std::byte> BatchLayout::rows(absl::Span<const std::byte> output, int slot) const {
    const size_t rows = output.size() / slots_;
    return output.subspan(slot * rows, rows);
}

std::vector<std::string>
BatchLayout::outputs(const ir::Graph& graph,
                     absl::Span<const std::vector<std::string>* const> wanted) {
    std::vector<std::string> outputs;
    for (ir::TensorId id : graph.saved()) {
        const std::string& name = graph.tensor(id).name;
        for (const std::vector<std::string>* names : wanted) {
            if (std::find(names->begin(), names->end(), name) != names->end()) {
                outputs.push_back(name);
                break;
            }
        }
    }
    return outputs;
}

void set_output(v1::NamedTensor* out, const ir::GraphTensor& tensor, int slots,
                absl::Span<const std::byte> bytes) {
    out->set_name(tensor.name);
    out->mutable_tensor()->set_dtype(to_wire_dtype(tensor.type.dtype));
    std::vector<int64_t> shape = tensor.type.shape();
    if (!shape.empty()) {
        shape[0] /= slots;
    }
    for (int64_t size : shape) {
        out->mutable_tensor()->add_shape(size);
    }
    out->mutable_tensor()->set_data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void order_outputs(v1::ExecuteResponse& response, const std::vector<std::string>& wanted) {
    std::sort(response.mutable_outputs()->begin(), response.mutable_outputs()->end(),
              [&](const v1::NamedTensor& a, const v1::NamedTensor& b) {
                  return std::find(wanted.begin(), wanted.end(), a.name()) <
                         std::find(wanted.begin(), wanted.end(), b.name());
              });
}

} // namespace einsummable::server
