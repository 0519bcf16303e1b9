// Percentiles of a sample, for the latency figures Storm reports.
#pragma once

#include <algorithm>
#include <vector>

namespace storm {

// The q-quantile (0 <= q <= 1) of a non-empty sample, nearest rank below;
// reorders the sample.
template <class T> T percentile(std::vector<T> &sample, double q)
{
    size_t k = static_cast<size_t>(q * static_cast<double>(sample.size() - 1));
    std::nth_element(sample.begin(), sample.begin() + static_cast<long>(k), sample.end());
    return sample[k];
}

} // namespace storm
