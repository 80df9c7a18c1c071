#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/model.h"

// Weight upload streaming (UploadTensor): one upload's buffer, fed chunk by chunk and
// published whole, and the budget all uploads in progress share. ModelStore::begin_upload
// (server/model_store.h) starts an upload from the stream's header.
namespace einsummable::server {

class ModelStore;

// The bytes held by uploads in progress, against a limit (thread-safe). An upload reserves
// what its buffer grows by before it grows, and releases it all when it commits (the bytes
// then belong to the weight), fails or is dropped. `on_change`, when set, is told every change
// (the einsummable_upload_bytes_in_flight gauge).
class UploadBudget {
public:
    explicit UploadBudget(int64_t limit, std::function<void(int64_t delta)> on_change = nullptr)
        : limit_(limit), on_change_(std::move(on_change)) {}

    // Reserves `bytes` if the total stays within the limit. Otherwise false, with the bytes
    // held at that moment in `held`.
    bool try_reserve(int64_t bytes, int64_t* held);
    void release(int64_t bytes);
    int64_t held() const { return held_.load(); }
    int64_t limit() const { return limit_; }

private:
    const int64_t limit_;
    const std::function<void(int64_t)> on_change_;
    std::atomic<int64_t> held_{0};
};

// One upload in progress (UploadTensor): created by ModelStore::begin_upload from the first
// chunk's header, fed the data in order, committed at the end of the stream. Nothing is visible
// until commit() succeeds, and a failed or abandoned upload changes nothing. The memory its
// buffer holds counts against the store's UploadBudget until it commits or is destroyed.
// For examples see tests/unit/server/model_store_test.cc and tests/integration/uploads_test.cc.
class WeightUpload {
public:
    WeightUpload(const WeightUpload&) = delete;
    WeightUpload& operator=(const WeightUpload&) = delete;
    ~WeightUpload();

    // The next chunk's data. `offset`, where the chunk starts in the tensor's bytes, is given
    // on every chunk or on none (the first chunk decides); it must equal received_bytes().
    // InvalidArgument for a wrong offset, a mix of chunks with and without one, or bytes past
    // the weight's size; ResourceExhausted when growing the buffer would take the uploads in
    // progress past max_upload_bytes_in_flight.
    absl::Status append(absl::Span<const std::byte> data,
                        std::optional<int64_t> offset = std::nullopt);
    // Publishes the weight atomically. InvalidArgument when fewer bytes than the weight's size
    // arrived; DataLoss when the header gave a CRC-32 and the bytes' differs (nothing is
    // replaced); NotFound when the model was unregistered (or replaced) during the upload.
    // Either way the upload is over: its budget is given back and it takes no more chunks.
    absl::Status commit();

    const std::string& model() const { return model_->name(); }
    const std::string& name() const { return name_; }
    int64_t expected_bytes() const { return expected_bytes_; }
    int64_t received_bytes() const { return received_bytes_; }
    // Chunks appended so far (each append() call that was accepted).
    int64_t chunks() const { return chunks_; }
    // Bytes of the upload budget this upload holds now: its buffer's capacity.
    int64_t reserved_bytes() const { return reserved_bytes_; }

private:
    friend class ModelStore;
    WeightUpload(ModelStore* store, std::shared_ptr<Model> model, std::string name,
                 int64_t expected_bytes, std::optional<uint32_t> expected_crc32);
    // Gives the buffer and its reservation back (after commit moved the bytes out, or on
    // failure).
    void release();

    ModelStore* store_;
    std::shared_ptr<Model> model_;
    std::string name_;
    int64_t expected_bytes_;
    std::optional<uint32_t> expected_crc32_;
    std::vector<std::byte> data_;
    int64_t received_bytes_ = 0;
    int64_t reserved_bytes_ = 0;
    int64_t chunks_ = 0;
    // Whether the first chunk carried an offset; unset before the first chunk.
    std::optional<bool> with_offsets_;
    uint32_t crc32_ = 0;     // of the bytes received so far
    bool committed_ = false; // commit() was called: the bytes have left the upload
};

} // namespace einsummable::server
