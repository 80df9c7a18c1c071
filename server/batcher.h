#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/support/clock.h"
#include "einsummable/v1/service.pb.h"
#include "server/cancel_watcher.h"

namespace einsummable::server {

// Dynamic batching (docs/server.md, "Dynamic batching"; after Triton's dynamic batcher).
// Requests that may run as one execution share a key (the Engine's: model, dims, options,
// sequence ends). The first request of a batch opens it; others join until it holds
// `max_size` requests, which runs it at once, or until `delay` has passed since it opened and
// fewer than `concurrency` batches of the key are running, which runs it then. So under load,
// while every plan instance is busy, requests gather into larger batches; when idle, a request
// waits at most `delay`. A batch that is not full takes the largest preferred size its open
// requests reach, and the rest stay open for the next instance: under load, batches of the
// preferred sizes run whole, with no idle slots (with 31 open and sizes 16 and 32, 16 run and
// 15 wait, rather than 31 completed to 32 and then 1 completed to 16).
//
// There is no batcher thread: one of the batch's own requests runs it on its thread (the
// RunBatch callback) and hands every member its answer. Thread-safe.
class Batcher {
public:
    using TimePoint = support::Clock::time_point;
    using CancelCheck = std::function<absl::Status()>;

    struct Settings {
        int max_size = 8;
        std::chrono::microseconds delay{0};
        std::vector<int> preferred; // ascending; none: a batch takes every open request
    };

    // One request in a batch: what the engine checked of it, and its answer once the batch ran.
    struct Item {
        const v1::ExecuteRequest* request = nullptr;
        std::vector<std::string> outputs; // the saved tensors it asked for
        TimePoint enqueued;
        double queue_seconds = 0.0; // set when its batch starts
        bool started = false;       // its batch was taken to run
        // Written by RunBatch with no lock held; read by the item's own thread only once
        // `done` is set (under the batcher's lock, after RunBatch returned).
        std::optional<absl::StatusOr<v1::ExecuteResponse>> result;
        bool done = false; // its batch ran and `result` holds its answer
        // Wakes this item's waiting thread alone (under the batcher's lock): its answer came,
        // or it leads the open batch and that batch may be ready, or its request was cancelled
        // (the CancelWatcher's stop). Waking every waiting request on every change cost more
        // CPU than the batches saved (bench/serving: 32 waiting threads woken per event).
        std::condition_variable wake;
    };

    // Runs a batch: sets every item's result (an item left without one gets an Internal
    // error). Returns how many batches of the key may run at once from now on (the plan's
    // instances), at least 1. Called with no lock held.
    using RunBatch = std::function<int(std::vector<std::shared_ptr<Item>>& batch)>;

    // Queues `item` in the open batch of `key` and waits until its batch has run, on this
    // thread or on another member's; returns its result. When `cancelled` fails before the
    // batch starts, the item leaves it and the cancellation's status is returned (the watcher
    // looks at it while the item waits); once it started, the batch reads the item's request,
    // so submit waits for its end.
    absl::StatusOr<v1::ExecuteResponse> submit(const std::string& key, const Settings& settings,
                                               std::shared_ptr<Item> item, const RunBatch& run,
                                               const CancelCheck& cancelled);

    // Keys with an open or running batch (tests).
    int64_t groups() const;
    // Requests of `key` waiting in its open batch, not yet started (tests).
    int64_t open_requests(const std::string& key) const;

    // `watcher` looks at the cancellation of waiting requests (submit's `cancelled`); `clock`
    // times the delay (the steady clock; tests move a fake one by hand).
    explicit Batcher(std::shared_ptr<CancelWatcher> watcher =
                         std::make_shared<CancelWatcher>(std::chrono::milliseconds(20)),
                     std::shared_ptr<const support::Clock> clock = support::Clock::steady());

private:
    struct Group {
        Settings settings;
        std::vector<std::shared_ptr<Item>> open; // arrival order
        TimePoint deadline;                      // the open batch's first item + delay
        int running = 0;
        int concurrency = 1; // until the first batch tells the plan's instances
    };

    // Whether the open batch of `group` should run now.
    static bool ready(const Group& group, TimePoint now);
    // How many of the open requests of `group`, in arrival order, the batch that runs now takes.
    static size_t batch_size(const Group& group);
    // Wakes the first open request of `group`, which runs the open batch when it is ready.
    static void wake_leader(const Group& group);
    void erase_if_idle(const std::string& key, const std::shared_ptr<Group>& group);

    const std::shared_ptr<CancelWatcher> watcher_;
    const std::shared_ptr<const support::Clock> clock_;
    mutable std::mutex mutex_;
    std::map<std::string, std::shared_ptr<Group>> groups_; // guarded by mutex_
};

} // namespace einsummable::server
