#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "server/engine.h"

// The engine's token buckets: an Execute of a model with batching and buckets runs padded to
// its bucket, the padding packed as a sequence of its own, so that one plan per bucket (and the
// plans rebuilt from it for other lengths, bucket_sibling) serves every length.
namespace einsummable::server {
namespace {

// `tensor` with its first dimension grown from `rows` to `bucket` rows, each new row a copy of
// its last (data every operator accepts: the request's own, unlike zeros under a log).
void pad_rows(v1::Tensor& tensor, int64_t rows, int64_t bucket) {
    const std::string& data = tensor.data();
    const size_t row_bytes = rows == 0 ? 0 : data.size() / static_cast<size_t>(rows);
    std::string padded;
    padded.reserve(row_bytes * static_cast<size_t>(bucket));
    padded.append(data);
    const std::string last = data.substr(data.size() - row_bytes);
    for (int64_t row = rows; row < bucket; ++row) {
        padded.append(last);
    }
    tensor.set_shape(0, bucket);
    tensor.set_data(std::move(padded));
}

// `tensor`'s first `rows` rows of its `bucket`.
void cut_rows(v1::Tensor& tensor, int64_t rows, int64_t bucket) {
    const size_t row_bytes = tensor.data().size() / static_cast<size_t>(bucket);
    tensor.mutable_data()->resize(row_bytes * static_cast<size_t>(rows));
    tensor.set_shape(0, rows);
}

} // namespace

absl::StatusOr<v1::ExecuteResponse> Engine::execute_bucketed(const v1::ExecuteRequest& req,
                                                             RequestShape shape,
                                                             std::vector<std::string> outputs,
                                                             const CancelCheck& cancelled) {
    const BatchSpec& spec = *shape.model->batching();
    const int64_t tokens = shape.bindings.at(spec.symbol);
    std::optional<int64_t> bucket = spec.bucket_for(tokens);
    if (bucket && req.options().ByteSizeLong() == 0) {
        // The warm-up's plans have the default options: while it runs, a larger ready bucket
        // serves the request, or the request waits for its own bucket's plan (joining the
        // warm-up's compile of it when that has begun), so that its own ends rebuild from it.
        if (std::optional<int64_t> ready = warm_up_->serving_bucket(*shape.model, *bucket)) {
            bucket = ready;
        } else {
            EINSUMMABLE_RETURN_IF_ERROR(
                bucket_plan(shape.model, *bucket, cancelled, /*request_path=*/true));
        }
    }
    if (metrics_) {
        metrics_->bucket_tokens(shape.model->name(), tokens, bucket.value_or(tokens));
    }
    if (!bucket || *bucket == tokens) {
        return execute_batched(req, std::move(shape), std::move(outputs), cancelled);
    }
    // The padding is one more sequence after the request's: attention and rope never cross a
    // sequence's end, and every operator computes its rows apart (the batching checks), so no
    // row of the request sees it.
    v1::ExecuteRequest padded = req;
    (*padded.mutable_dims())[spec.symbol] = *bucket;
    for (v1::NamedTensor& named : *padded.mutable_inputs()) {
        pad_rows(*named.mutable_tensor(), tokens, *bucket);
    }
    std::vector<int64_t> ends = shape.sequence_ends;
    ends.push_back(*bucket);
    padded.clear_sequence_ends();
    for (int64_t end : ends) {
        padded.add_sequence_ends(end);
    }
    graphdef::Bindings bindings = shape.bindings;
    bindings[spec.symbol] = *bucket;
    absl::StatusOr<RequestShape> padded_shape =
        shapes_.shape_with(shape.model, std::move(bindings), req.options(), std::move(ends));
    if (absl::IsResourceExhausted(padded_shape.status())) {
        // Over a limit only padded (--max_tensor_bytes, --max_operator_devices): run as it is.
        return execute_batched(req, std::move(shape), std::move(outputs), cancelled);
    }
    if (!padded_shape.ok()) {
        return padded_shape.status();
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(
        v1::ExecuteResponse response,
        execute_batched(padded, *std::move(padded_shape), std::move(outputs), cancelled));
    for (v1::NamedTensor& named : *response.mutable_outputs()) {
        cut_rows(*named.mutable_tensor(), tokens, *bucket);
    }
    return response;
}

std::shared_ptr<CachedPlan> Engine::bucket_sibling(const PlanKey& key) const {
    for (const std::shared_ptr<CachedPlan>& cached : cache_.entries()) {
        if (cached == nullptr || cached->plan == nullptr) {
            continue;
        }
        PlanKey other = cached->key;
        if (other.sequence_ends == key.sequence_ends) {
            continue;
        }
        other.sequence_ends = key.sequence_ends;
        if (other == key) {
            return cached;
        }
    }
    return nullptr;
}

} // namespace einsummable::server
