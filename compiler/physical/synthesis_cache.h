#pragma once

#include <cstdint>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "compiler/exprog/program.h"
#include "compiler/exprog/semantics.h"

namespace einsummable::physical {

// Synthesised exchange bodies by the canonical form of what determines them (docs/physical.md
// "The exchange cache"): the preamble's text — GPUS, the partitions F<k>, the atoms a<cell>_<f>
// with their bytes and GPUs, the OUT aggregates and sites, all named by position (cell index,
// function index), never by tensor or operator — the topology's text, and the synthesis options
// that change the result (mode, seed, iterations, chunks, skip margin). compile_physical derives
// each exchange's seed from that same text, so identical layers, repeated operators, later
// compiles and other shapes that meet the same exchange synthesise it once, and a hit is
// byte-for-byte what a fresh search would give (synthesis is deterministic for these inputs).
//
// Bounded in bytes (an estimate of what an entry holds: key, actions, membership), least
// recently used evicted first; thread-safe. No I/O: the daemon holds one across models and
// shapes and exports its counters (server/metrics.h).
class SynthesisCache {
public:
    struct Body {
        exprog::Program program;
        exprog::Membership membership;
        double simulated_s = 0.0;
        double naive_simulated_s = 0.0;
        // The search was skipped: naive was within the skip margin of the lower bound
        // (exprog::SynthesisResult::skipped).
        bool skipped = false;
    };
    struct Stats {
        int64_t hits = 0;
        int64_t misses = 0;    // finds that found nothing (each is followed by a search)
        int64_t evictions = 0; // entries dropped to stay within max_bytes
        int64_t skipped = 0;   // bodies inserted whose search was skipped (Body::skipped)
        int64_t entries = 0;
        int64_t bytes = 0; // the entries' estimated size
    };

    static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
    explicit SynthesisCache(int64_t max_bytes = kUnbounded) : max_bytes_(max_bytes) {}
    SynthesisCache(const SynthesisCache&) = delete;
    SynthesisCache& operator=(const SynthesisCache&) = delete;

    // The cached body for `key`, if any (then it becomes the most recently used).
    std::optional<Body> find(const std::string& key) const;
    // Adds (or replaces) `key`'s body, then evicts the least recently used entries until the
    // cache holds at most max_bytes (an entry larger than that alone is not kept).
    void insert(const std::string& key, Body body);
    size_t size() const;
    int64_t hits() const;
    Stats stats() const;
    int64_t max_bytes() const { return max_bytes_; }

    // The estimated bytes an entry of `key` and `body` holds.
    static int64_t entry_bytes(const std::string& key, const Body& body);

private:
    struct Entry {
        std::string key;
        Body body;
        int64_t bytes = 0;
    };
    using Order = std::list<Entry>; // most recently used first
    void evict_locked();

    const int64_t max_bytes_;
    mutable std::mutex mutex_;
    mutable Order order_;
    std::unordered_map<std::string, Order::iterator> index_;
    mutable Stats stats_;
};

} // namespace einsummable::physical
