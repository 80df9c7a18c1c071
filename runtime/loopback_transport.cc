#include "runtime/loopback_transport.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace einsummable::runtime {

class LoopbackNetwork::Endpoint final : public Transport {
public:
    Endpoint(LoopbackNetwork* network, int rank) : network_(network), rank_(rank) {}
    int rank() const override { return rank_; }
    int ranks() const override { return network_->ranks(); }
    void send(int peer, int tag, absl::Span<const std::byte> data, Done done) override {
        network_->send(rank_, peer, tag, data, std::move(done));
    }
    void recv(int peer, int tag, absl::Span<std::byte> data, Done done) override {
        network_->recv(peer, rank_, tag, data, std::move(done));
    }

private:
    LoopbackNetwork* network_;
    const int rank_;
};

LoopbackNetwork::LoopbackNetwork(int ranks) {
    for (int r = 0; r < ranks; ++r) {
        transports_.push_back(std::make_shared<Endpoint>(this, r));
    }
}

LoopbackNetwork::~LoopbackNetwork() = default;

namespace {

absl::Status size_check(int from, int to, int tag, size_t sent, size_t expected) {
    if (sent == expected) {
        return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("message ", tag, " from rank ", from,
                                                   " to rank ", to, " has ", sent,
                                                   " bytes; the receiver expects ", expected));
}

} // namespace

void LoopbackNetwork::send(int from, int to, int tag, absl::Span<const std::byte> data,
                           Transport::Done done) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto key = std::make_tuple(from, to, tag);
    auto it = pending_.find(key);
    if (it == pending_.end()) {
        Pending& pending = pending_[key];
        pending.data.assign(data.begin(), data.end());
        lock.unlock();
        done(absl::OkStatus());
        return;
    }
    if (!it->second.is_recv) {
        lock.unlock();
        done(absl::InternalError(absl::StrCat("message ", tag, " from rank ", from, " to rank ", to,
                                              " was sent twice")));
        return;
    }
    Pending recv = std::move(it->second);
    pending_.erase(it);
    lock.unlock();
    absl::Status status = size_check(from, to, tag, data.size(), recv.target.size());
    if (status.ok() && !data.empty()) {
        std::memcpy(recv.target.data(), data.data(), data.size());
    }
    done(status);
    recv.done(status);
}

void LoopbackNetwork::recv(int from, int to, int tag, absl::Span<std::byte> data,
                           Transport::Done done) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto key = std::make_tuple(from, to, tag);
    auto it = pending_.find(key);
    if (it == pending_.end() && !failed_.ok()) {
        const absl::Status failed = failed_;
        lock.unlock();
        done(failed);
        return;
    }
    if (it == pending_.end()) {
        Pending& pending = pending_[key];
        pending.target = data;
        pending.done = std::move(done);
        pending.is_recv = true;
        return;
    }
    if (it->second.is_recv) {
        lock.unlock();
        done(absl::InternalError(absl::StrCat("message ", tag, " from rank ", from, " to rank ", to,
                                              " was received twice")));
        return;
    }
    Pending sent = std::move(it->second);
    pending_.erase(it);
    lock.unlock();
    absl::Status status = size_check(from, to, tag, sent.data.size(), data.size());
    if (status.ok() && !data.empty()) {
        std::memcpy(data.data(), sent.data.data(), data.size());
    }
    done(status);
}

void LoopbackNetwork::fail_pending(const absl::Status& error) {
    std::vector<Transport::Done> waiting;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (failed_.ok()) {
            failed_ = error;
        }
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->second.is_recv) {
                waiting.push_back(std::move(it->second.done));
                it = pending_.erase(it);
            } else {
                ++it;
            }
        }
    }
    for (Transport::Done& done : waiting) {
        done(error);
    }
}

} // namespace einsummable::runtime
