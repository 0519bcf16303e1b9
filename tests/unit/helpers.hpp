// Small helpers shared by the unit tests.
#pragma once

#include <string>

namespace test_helpers {

// The message of the E that f() throws, or "" if it throws none.
template <class E, class F> std::string error_of(F f)
{
    try {
        f();
    } catch (const E &e) {
        return e.what();
    }
    return "";
}

inline bool contains(const std::string &s, const std::string &part)
{
    return s.find(part) != std::string::npos;
}

} // namespace test_helpers
