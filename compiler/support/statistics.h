#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace einsummable::support {

// The median (the mean of the middle two for an even count); NaN for no values. Benchmarks and
// tools report medians of repeated timings with it.
inline double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    if (n == 0) {
        return std::nan("");
    }
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

// Pearson's correlation of two equally long series; NaN with fewer than two points or no
// variance on either side.
inline double pearson(const std::vector<double>& x, const std::vector<double>& y) {
    const size_t n = std::min(x.size(), y.size());
    if (n < 2) {
        return std::nan("");
    }
    const double mx = std::accumulate(x.begin(), x.begin() + n, 0.0) / n;
    const double my = std::accumulate(y.begin(), y.begin() + n, 0.0) / n;
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; ++i) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : std::nan("");
}

} // namespace einsummable::support
