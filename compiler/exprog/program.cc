#include "compiler/exprog/program.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace einsummable::exprog {

std::string aggregate_to_string(const Aggregate& aggregate) {
    return absl::StrJoin(aggregate, "+");
}

std::string Site::to_string() const {
    return is_partition ? partition : absl::StrCat(gpu);
}

std::string Action::to_string() const {
    std::string text = absl::StrCat(aggregate_to_string(aggregate), " @ ", source.to_string());
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
        a.actions.size() != b.actions.size()) {
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
