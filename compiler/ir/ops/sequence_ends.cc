#include "compiler/ir/ops/sequence_ends.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "compiler/ir/internal_error.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<std::vector<int64_t>> sequence_ends_attribute(const Attributes& attributes,
                                                             int64_t length,
                                                             const std::string& name,
                                                             bool may_end_early) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<int64_t> ends, attributes.get_ints_or(name, {length}));
    if (ends.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " is empty; give at least the length"));
    }
    int64_t previous = 0;
    for (size_t idx = 0; idx < ends.size(); ++idx) {
        const int64_t end = ends[idx];
        if (end <= 0 || end > length) {
            return absl::InvalidArgumentError(
                absl::StrCat(name, "[", idx, "] = ", end, " is out of range: ends must lie in (0, ",
                             length, "]"));
        }
        if (end <= previous) {
            return absl::InvalidArgumentError(absl::StrCat(
                name, "[", idx, "] = ", end, " is not increasing (previous end ", previous, ")"));
        }
        previous = end;
    }
    if (previous != length && !may_end_early) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " end at ", previous, ", not at the sequence length ", length));
    }
    return ends;
}

int64_t sequence_start(const std::vector<int64_t>& ends, int64_t position) {
    auto it = std::upper_bound(ends.begin(), ends.end(), position);
    return it == ends.begin() ? 0 : *(it - 1);
}

int64_t sequence_end(const std::vector<int64_t>& ends, int64_t position) {
    auto it = std::upper_bound(ends.begin(), ends.end(), position);
    EINSUMMABLE_CHECK(it != ends.end(),
                      absl::StrCat("position ", position, " is past the last sequence end ",
                                   ends.empty() ? 0 : ends.back()));
    return *it;
}

} // namespace einsummable::ir
