#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir/graph.h"
#include "einsummable/v1/service.pb.h"
#include "proto/graph_def.h"

// Batched execution's pack and unpack (server/batcher.h): a batch of requests to a model with
// batching runs as one execution of the model's graph with the batch dimension `slots` times
// one request's, each request's rows end to end along it. A batch may have fewer requests than
// slots (a preferred batch size): the idle slots repeat the last request, and their results
// are dropped.
namespace einsummable::server {

class BatchLayout {
public:
    // The layout of `requests` requests (1 to `slots`) to model `model`, each bound as
    // `one` with sequence ends `one_ends`, in `slots` slots along the batch dimension `symbol`.
    // ResourceExhausted when the batch's dimension would exceed kMaxDimensionSize.
    static absl::StatusOr<BatchLayout> make(const std::string& model, const std::string& symbol,
                                            const graphdef::Bindings& one,
                                            absl::Span<const int64_t> one_ends, int requests,
                                            int slots);

    int requests() const { return requests_; }
    int slots() const { return slots_; }
    // The batch's bindings: one request's, with the batch dimension `slots` times as large.
    const graphdef::Bindings& bindings() const { return bindings_; }
    // The batch's sequence ends: every slot's ends, moved to where the slot starts.
    const std::vector<int64_t>& sequence_ends() const { return sequence_ends_; }

    // One input's bytes for the batch from each request's (`per_request`, requests() of them,
    // all of one size): the requests' rows end to end, the idle slots repeating the last.
    std::vector<std::byte> pack(absl::Span<const absl::string_view> per_request) const;
    // The rows of slot `slot` in an output's bytes for the batch.
    absl::Span<const std::byte> rows(absl::Span<const std::byte> output, int slot) const;

    // The outputs a batch offloads: the union of those its requests ask for (`wanted`, one
    // list per request), in the order of `graph`'s saved tensors.
    static std::vector<std::string>
    outputs(const ir::Graph& graph, absl::Span<const std::vector<std::string>* const> wanted);

private:
    BatchLayout() = default;

    int requests_ = 0;
    int slots_ = 0;
    graphdef::Bindings bindings_;
    std::vector<int64_t> sequence_ends_;
};

// `tensor` of a plan's graph as a reply's tensor: its name, dtype and shape, with dimension 0
// divided by `slots` (one request's rows of a batch; 1 outside batches), and `bytes`.
void set_output(v1::NamedTensor* out, const ir::GraphTensor& tensor, int slots,
                absl::Span<const std::byte> bytes);

// Sorts `response`'s outputs into the order `wanted` names them in.
void order_outputs(v1::ExecuteResponse& response, const std::vector<std::string>& wanted);

} // namespace einsummable::server
