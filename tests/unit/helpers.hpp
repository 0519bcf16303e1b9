// Small helpers shared by the unit tests.
#pragma once

#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <unistd.h>

// (no iostreams: this header may come after cmocka's, whose fail() macro
// breaks them)

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

// A file's bytes ("" if it cannot be read).
inline std::string slurp(const std::string &p)
{
    std::string out;
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return out;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0)
        out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
}

// A new directory under /tmp named after `prefix`, removed with all it
// holds when the object goes; path is "" if it could not be made.
struct TempDir {
    std::string path;
    explicit TempDir(const std::string &prefix = "storm-test")
    {
        std::string t = "/tmp/" + prefix + ".XXXXXX";
        if (mkdtemp(t.data()))
            path = t;
    }
    ~TempDir()
    {
        if (!path.empty())
            std::system(("rm -rf '" + path + "'").c_str());
    }
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
};

} // namespace test_helpers
