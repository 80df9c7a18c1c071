#pragma once

#include <atomic>

namespace einsummable::support {

// A request, from another thread, that a long computation stop (the daemon sets it when every
// caller waiting for a compile has gone). Polled by the compiler's loops; never reset.
class Cancellation {
public:
    void cancel() noexcept { flag_.store(true, std::memory_order_release); }
    bool cancelled() const noexcept { return flag_.load(std::memory_order_acquire); }

private:
    std::atomic<bool> flag_{false};
};

} // namespace einsummable::support
