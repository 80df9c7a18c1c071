#include "server/weight_upload.h"

#include <algorithm>
#include <utility>

#include <zlib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/model_store.h"

namespace einsummable::server {

bool UploadBudget::try_reserve(int64_t bytes, int64_t* held) {
    int64_t now = held_.load();
    do {
        if (bytes > limit_ - now) {
            *held = now;
            return false;
        }
    } while (!held_.compare_exchange_weak(now, now + bytes));
    if (on_change_ && bytes != 0) {
        on_change_(bytes);
    }
    return true;
}

void UploadBudget::release(int64_t bytes) {
    held_.fetch_sub(bytes);
    if (on_change_ && bytes != 0) {
        on_change_(-bytes);
    }
}

absl::StatusOr<std::unique_ptr<WeightUpload>>
ModelStore::begin_upload(absl::string_view model_name, absl::string_view name, v1::DType dtype,
                         absl::Span<const int64_t> shape, std::optional<uint32_t> crc32) {
    std::shared_ptr<Model> model;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = models_.find(model_name);
        if (it == models_.end()) {
            return absl::NotFoundError(absl::StrCat("model '", model_name, "' is not registered"));
        }
        model = it->second;
    }
    const ir::TensorType* type = model->weight_type(name);
    if (type == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            graphdef::quote_name(name), " is not a weight of model '", model_name, "' (weights: ",
            model->weights().empty() ? "none" : absl::StrJoin(model->weights(), ", "), ")"));
    }
    if (to_wire_dtype(type->dtype) != dtype) {
        return absl::InvalidArgumentError(absl::StrCat("weight '", name, "' is ",
                                                       ir::dtype_name(type->dtype), "; got ",
                                                       wire_dtype_name(dtype)));
    }
    const std::vector<int64_t> expected_shape = type->shape();
    if (!std::equal(expected_shape.begin(), expected_shape.end(), shape.begin(), shape.end())) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight '", name, "' has shape ", shape_string(expected_shape), " (",
                         type->to_string(), "); got ", shape_string(shape)));
    }
    const int64_t bytes = type->bytes();
    if (bytes > limits_.max_tensor_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "weight '", name, "' takes ", bytes, " bytes; the server accepts tensors of at most ",
            limits_.max_tensor_bytes, " bytes (--max_tensor_bytes)"));
    }
    // Refused now rather than after most of it arrived: it could never be held at once.
    if (bytes > upload_budget_.limit()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "weight '", name, "' takes ", bytes, " bytes; uploads in progress may hold at most ",
            upload_budget_.limit(), " bytes together (--max_upload_bytes_in_flight)"));
    }
    return std::unique_ptr<WeightUpload>(
        new WeightUpload(this, std::move(model), std::string(name), bytes, crc32));
}

absl::Status ModelStore::commit(WeightUpload& upload) {
    auto bytes = std::make_shared<const WeightData>(std::move(upload.data_));
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = models_.find(upload.model_->name());
    if (it == models_.end() || it->second != upload.model_) {
        return absl::NotFoundError(absl::StrCat("model '", upload.model_->name(),
                                                "' was unregistered during the upload of '",
                                                upload.name_, "'"));
    }
    // Under the store's lock, so an unregister cannot slip between the check and the publish.
    std::lock_guard<std::mutex> model_lock(upload.model_->mutex_);
    upload.model_->weight_values_.values[upload.name_] = std::move(bytes);
    upload.model_->weight_values_.generation = next_generation_++;
    return absl::OkStatus();
}

WeightUpload::WeightUpload(ModelStore* store, std::shared_ptr<Model> model, std::string name,
                           int64_t expected_bytes, std::optional<uint32_t> expected_crc32)
    : store_(store), model_(std::move(model)), name_(std::move(name)),
      expected_bytes_(expected_bytes), expected_crc32_(expected_crc32),
      crc32_(static_cast<uint32_t>(::crc32_z(0, nullptr, 0))) {}

WeightUpload::~WeightUpload() {
    release();
}

void WeightUpload::release() {
    data_ = std::vector<std::byte>();
    store_->upload_budget_.release(reserved_bytes_);
    reserved_bytes_ = 0;
}

absl::Status WeightUpload::append(absl::Span<const std::byte> data, std::optional<int64_t> offset) {
    if (committed_) {
        return absl::FailedPreconditionError(
            absl::StrCat("the upload of '", name_, "' is over (commit was called)"));
    }
    const int64_t chunk_idx = chunks_;
    if (!with_offsets_.has_value()) {
        with_offsets_ = offset.has_value();
    } else if (*with_offsets_ != offset.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("chunk ", chunk_idx, " of the upload of '", name_, "' ",
                         offset.has_value() ? "carries an offset; the first chunk carried none"
                                            : "carries no offset; the first chunk carried one",
                         " (send an offset on every chunk or on none)"));
    }
    if (offset.has_value() && *offset != received_bytes_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", chunk_idx, " of the upload of '", name_, "' starts at byte ", *offset,
            "; expected ", received_bytes_, " (a chunk was lost or repeated)"));
    }
    if (static_cast<int64_t>(data.size()) > expected_bytes_ - received_bytes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "weight '", name_, "' takes ", expected_bytes_, " bytes; the upload sent at least ",
            received_bytes() + static_cast<int64_t>(data.size())));
    }
    // Grow with the data actually received (a header alone reserves nothing), never past the
    // weight's size, so the resident copy carries no slack. The growth is reserved from the
    // store's budget first: what counts is the memory the buffer really holds. When doubling
    // does not fit, growing by just this chunk may.
    const size_t needed = data_.size() + data.size();
    if (needed > data_.capacity()) {
        size_t capacity =
            std::min(static_cast<size_t>(expected_bytes_), std::max(needed, 2 * data_.capacity()));
        int64_t growth = static_cast<int64_t>(capacity) - reserved_bytes_;
        UploadBudget& budget = store_->upload_budget_;
        int64_t held = 0;
        bool reserved = budget.try_reserve(growth, &held);
        if (!reserved && capacity > needed) {
            capacity = needed;
            growth = static_cast<int64_t>(capacity) - reserved_bytes_;
            reserved = budget.try_reserve(growth, &held);
        }
        if (!reserved) {
            return absl::ResourceExhaustedError(
                absl::StrCat("chunk ", chunk_idx, " of the upload of '", name_, "' needs ", growth,
                             " more bytes, but uploads in progress hold ", held,
                             " bytes; the server holds at most ", budget.limit(),
                             " (--max_upload_bytes_in_flight); retry when they finish"));
        }
        reserved_bytes_ += growth;
        data_.reserve(capacity);
    }
    data_.insert(data_.end(), data.begin(), data.end());
    if (expected_crc32_.has_value()) {
        crc32_ = static_cast<uint32_t>(
            ::crc32_z(crc32_, reinterpret_cast<const Bytef*>(data.data()), data.size()));
    }
    received_bytes_ += static_cast<int64_t>(data.size());
    ++chunks_;
    return absl::OkStatus();
}

absl::Status WeightUpload::commit() {
    if (committed_) {
        return absl::FailedPreconditionError(
            absl::StrCat("the upload of '", name_, "' is over (commit was called)"));
    }
    absl::Status status = [&]() -> absl::Status {
        if (received_bytes() != expected_bytes_) {
            return absl::InvalidArgumentError(
                absl::StrCat("weight '", name_, "' takes ", expected_bytes_,
                             " bytes; the upload sent ", received_bytes()));
        }
        if (expected_crc32_.has_value() && *expected_crc32_ != crc32_) {
            return absl::DataLossError(absl::StrFormat(
                "weight '%s' of model '%s': the bytes received have CRC-32 0x%08x; the upload's "
                "header gave 0x%08x (the data was corrupted on the way; the weight is unchanged)",
                name_, model_->name(), crc32_, *expected_crc32_));
        }
        return store_->commit(*this);
    }();
    // Whatever the outcome the upload is over: its bytes moved into the weight or are dropped,
    // no longer held by an upload in progress, and it cannot be committed again.
    release();
    committed_ = true;
    return status;
}

} // namespace einsummable::server
