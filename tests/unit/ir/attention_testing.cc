#include "tests/unit/ir/attention_testing.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/support/status_macros.h"
#include "gtest/gtest.h"

namespace einsummable::ir::testing {

std::vector<int64_t> ends_of(const std::vector<int64_t>& lengths) {
    std::vector<int64_t> ends;
    int64_t end = 0;
    for (int64_t length : lengths) {
        ends.push_back(end += length);
    }
    return ends;
}

HostTensor gather_rows(const HostTensor& whole, const std::vector<int64_t>& rows) {
    std::vector<Interval> dims = whole.box().dims();
    dims[0] = {0, static_cast<int64_t>(rows.size())};
    HostTensor gathered{Box(dims)};
    const int64_t row_size = whole.size() / whole.box()[0].size();
    for (size_t idx = 0; idx < rows.size(); ++idx) {
        std::copy_n(whole.data() + rows[idx] * row_size, row_size,
                    gathered.data() + static_cast<int64_t>(idx) * row_size);
    }
    return gathered;
}

double max_difference(const HostTensor& a, const HostTensor& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0.0;
    for (int64_t idx = 0; idx < std::min(a.size(), b.size()); ++idx) {
        const double gap = std::abs(a.data()[idx] - b.data()[idx]);
        worst = std::isnan(gap) ? std::numeric_limits<double>::infinity() : std::max(worst, gap);
    }
    return worst;
}

absl::StatusOr<PartialBlock> combine_in_random_order(std::vector<PartialBlock> partials,
                                                     std::mt19937_64& rng) {
    std::shuffle(partials.begin(), partials.end(), rng);
    while (partials.size() > 1) {
        std::uniform_int_distribution<size_t> pick(0, partials.size() - 1);
        const size_t i = pick(rng);
        size_t j = pick(rng);
        while (j == i) {
            j = pick(rng);
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(PartialBlock merged,
                                     combine_log_sum_exp(partials[i], partials[j]));
        partials[std::min(i, j)] = std::move(merged);
        partials.erase(partials.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
    }
    return std::move(partials[0]);
}

} // namespace einsummable::ir::testing
