#include "compiler/physical/synthesis_cache.h"

namespace einsummable::physical {

std::optional<SynthesisCache::Body> SynthesisCache::find(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) {
        ++stats_.misses;
        return std::nullopt;
    }
    ++stats_.hits;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->body;
}

void SynthesisCache::insert(const std::string& key, Body body) {
    const int64_t bytes = entry_bytes(key, body);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.skipped += body.skipped ? 1 : 0;
    auto it = index_.find(key);
    if (it != index_.end()) {
        stats_.bytes -= it->second->bytes;
        order_.erase(it->second);
        index_.erase(it);
        --stats_.entries;
    }
    order_.push_front(Entry{key, std::move(body), bytes});
    index_.emplace(key, order_.begin());
    stats_.bytes += bytes;
    ++stats_.entries;
    evict_locked();
}

void SynthesisCache::evict_locked() {
    while (stats_.bytes > max_bytes_ && !order_.empty()) {
        const Entry& last = order_.back();
        stats_.bytes -= last.bytes;
        index_.erase(last.key);
        order_.pop_back();
        --stats_.entries;
        ++stats_.evictions;
    }
}

size_t SynthesisCache::size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return index_.size();
}

int64_t SynthesisCache::hits() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_.hits;
}

SynthesisCache::Stats SynthesisCache::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

int64_t SynthesisCache::entry_bytes(const std::string& key, const Body& body) {
    // The key twice (the list entry and the index), the program's declarations and actions
    // with their names, and the membership.
    auto name = [](const std::string& s) { return static_cast<int64_t>(sizeof(s) + s.size()); };
    int64_t bytes = static_cast<int64_t>(sizeof(Entry)) + 2 * name(key);
    const exprog::Program& program = body.program;
    for (const exprog::Partition& partition : program.partitions) {
        bytes +=
            name(partition.name) + static_cast<int64_t>(partition.members.size() * sizeof(int));
    }
    for (const exprog::InDecl& in : program.ins) {
        bytes += static_cast<int64_t>(sizeof(in)) + static_cast<int64_t>(in.atom.size());
    }
    for (const exprog::OutDecl& out : program.outs) {
        bytes += static_cast<int64_t>(sizeof(out) + out.sites.size() * sizeof(exprog::Site));
        for (const std::string& atom : out.aggregate) {
            bytes += name(atom);
        }
    }
    for (const exprog::Action& action : program.actions) {
        bytes += static_cast<int64_t>(sizeof(action));
        for (const std::string& atom : action.aggregate) {
            bytes += name(atom);
        }
        for (const std::vector<exprog::Site>& hop : action.hops) {
            bytes += static_cast<int64_t>(sizeof(hop) + hop.size() * sizeof(exprog::Site));
        }
    }
    for (const auto& [partition, members] : body.membership) {
        bytes += name(partition) + static_cast<int64_t>(members.size() * sizeof(int));
    }
    return bytes;
}

} // namespace einsummable::physical
