#include "compiler/exprog/program.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace einsummable::exprog {

std::string aggregate_to_string(const Aggregate& aggregate) {
    return absl::StrJoin(aggregate, "+");
}

bool Chunk::contains(const Chunk& other) const {
    // [index/count, (index+1)/count) contains [other.index/other.count, ...) iff both ends lie
    // inside: cross-multiplied, exact in int64 for counts up to kMaxCount.
    const int64_t i = index, k = count, j = other.index, m = other.count;
    return i * m <= j * k && (j + 1) * k <= (i + 1) * m;
}

std::string Chunk::to_string() const {
    return whole() ? std::string() : absl::StrCat("[", index, "/", count, "]");
}

bool chunks_cover_whole(std::vector<Chunk> chunks) {
    // Sweep the intervals by their start; `reach` (a fraction num/den) is how far [0, reach)
    // is covered.
    std::sort(chunks.begin(), chunks.end(), [](const Chunk& a, const Chunk& b) {
        return int64_t{a.index} * b.count < int64_t{b.index} * a.count;
    });
    int64_t num = 0;
    int64_t den = 1;
    for (const Chunk& chunk : chunks) {
        if (int64_t{chunk.index} * den > num * chunk.count) {
            return false; // a gap before this chunk
        }
        if (int64_t{chunk.index + 1} * den > num * chunk.count) {
            num = chunk.index + 1;
            den = chunk.count;
        }
    }
    return num >= den;
}

std::string Site::to_string() const {
    return is_partition ? partition : absl::StrCat(gpu);
}

std::string Action::to_string() const {
    std::string text =
        absl::StrCat(label.empty() ? "" : label + ": ", aggregate_to_string(aggregate),
                     chunk.to_string(), " @ ", source.to_string());
    for (const std::vector<Site>& hop : hops) {
        absl::StrAppend(&text, " -> ",
                        absl::StrJoin(hop, ", ", [](std::string* out, const Site& site) {
                            absl::StrAppend(out, site.to_string());
                        }));
    }
    return text;
}

const Partition* Program::find_partition(const std::string& name) const {
    for (const Partition& partition : partitions) {
        if (partition.name == name) {
            return &partition;
        }
    }
    return nullptr;
}

int Program::find_action(const std::string& label) const {
    if (label.empty()) {
        return -1;
    }
    for (size_t idx = 0; idx < actions.size(); ++idx) {
        if (actions[idx].label == label) {
            return static_cast<int>(idx);
        }
    }
    return -1;
}

namespace {

bool site_less(const Site& a, const Site& b) {
    return std::tie(a.is_partition, a.gpu, a.partition) <
           std::tie(b.is_partition, b.gpu, b.partition);
}

bool hop_less(const std::vector<Site>& a, const std::vector<Site>& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), site_less);
}

// A strict weak order on actions consistent with Action's operator== (locations ignored).
bool action_less(const Action* a, const Action* b) {
    if (a->label != b->label) {
        return a->label < b->label;
    }
    if (a->chunk != b->chunk) {
        return a->chunk < b->chunk;
    }
    if (a->aggregate != b->aggregate) {
        return a->aggregate < b->aggregate;
    }
    if (!(a->source == b->source)) {
        return site_less(a->source, b->source);
    }
    return std::lexicographical_compare(a->hops.begin(), a->hops.end(), b->hops.begin(),
                                        b->hops.end(), hop_less);
}

} // namespace

bool operator==(const Program& a, const Program& b) {
    if (a.gpus != b.gpus || a.partitions != b.partitions || a.ins != b.ins || a.outs != b.outs ||
        a.actions.size() != b.actions.size() || a.orders.size() != b.orders.size()) {
        return false;
    }
    // ORDER pairs form a multiset too.
    auto pairs = [](const std::vector<OrderDecl>& orders) {
        std::vector<std::pair<std::string, std::string>> result;
        for (const OrderDecl& order : orders) {
            result.emplace_back(order.before, order.after);
        }
        std::sort(result.begin(), result.end());
        return result;
    };
    if (pairs(a.orders) != pairs(b.orders)) {
        return false;
    }
    // Actions form a multiset: compare them sorted.
    std::vector<const Action*> sorted_a;
    std::vector<const Action*> sorted_b;
    for (const Action& action : a.actions) {
        sorted_a.push_back(&action);
    }
    for (const Action& action : b.actions) {
        sorted_b.push_back(&action);
    }
    std::sort(sorted_a.begin(), sorted_a.end(), action_less);
    std::sort(sorted_b.begin(), sorted_b.end(), action_less);
    for (size_t i = 0; i < sorted_a.size(); ++i) {
        if (!(*sorted_a[i] == *sorted_b[i])) {
            return false;
        }
    }
    return true;
}

} // namespace einsummable::exprog
