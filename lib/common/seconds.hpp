// A duration for messages, in seconds to a tenth ("12.3 s").
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace storm {

template <class Rep, class Period> std::string tenths_of_seconds(std::chrono::duration<Rep, Period> d)
{
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s", std::chrono::duration<double>(d).count());
    return b;
}

} // namespace storm
