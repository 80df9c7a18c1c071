#include "runtime/cluster/local_rank_channel.h"

#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace einsummable::runtime::cluster {

LocalRankChannel::LocalRankChannel(std::vector<std::shared_ptr<RankWorker>> workers,
                                   std::shared_ptr<LoopbackNetwork> network)
    : workers_(std::move(workers)), network_(std::move(network)) {}

LocalRankChannel::~LocalRankChannel() {
    std::unique_lock<std::mutex> lock(mutex_);
    answered_.wait(lock, [this] { return answering_ == 0; });
}

std::future<absl::StatusOr<v1::RankReply>> LocalRankChannel::call(int rank,
                                                                  const v1::RankRequest& request) {
    auto promise = std::make_shared<Promise>();
    std::future<absl::StatusOr<v1::RankReply>> future = promise->get_future();
    if (rank < 1 || rank >= ranks() || workers_[rank] == nullptr) {
        promise->set_value(absl::UnavailableError(absl::StrCat("no rank ", rank)));
        return future;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t key = next_++;
    open_[key] = promise;
    if (paused_.count(rank) > 0) {
        return future; // never answered, unless fail_pending
    }
    ++answering_;
    std::thread([this, key, worker = workers_[rank], bytes = request.SerializeAsString()] {
        absl::StatusOr<v1::RankReply> answer = [&]() -> absl::StatusOr<v1::RankReply> {
            v1::RankRequest received;
            if (!received.ParseFromString(bytes)) {
                return absl::InternalError("a request that does not parse");
            }
            v1::RankReply reply;
            if (!reply.ParseFromString(worker->handle(received).SerializeAsString())) {
                return absl::InternalError("a reply that does not parse");
            }
            return reply;
        }();
        std::shared_ptr<Promise> open;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = open_.find(key);
            if (it != open_.end()) { // else failed already
                open = std::move(it->second);
                open_.erase(it);
            }
        }
        if (open != nullptr) {
            open->set_value(std::move(answer));
        }
        std::lock_guard<std::mutex> lock(mutex_);
        --answering_;
        answered_.notify_all();
    }).detach();
    return future;
}

void LocalRankChannel::fail_pending(const absl::Status& error) {
    std::map<uint64_t, std::shared_ptr<Promise>> open;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        open.swap(open_);
    }
    for (auto& [key, promise] : open) {
        promise->set_value(error);
    }
    if (network_ != nullptr) {
        network_->fail_pending(error);
    }
}

void LocalRankChannel::pause(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    paused_.insert(rank);
}

} // namespace einsummable::runtime::cluster
