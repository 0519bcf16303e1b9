// Replacing a small file whole, so that readers see the old or the new
// content, never a part.
#pragma once

#include <cerrno>
#include <fcntl.h>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unistd.h>

namespace storm {

// Writes `text` to PATH.new with `mode` and renames it over `path`.
// Returns false with errno set (and PATH.new removed) if any step fails.
inline bool replace_file(const std::string &path, std::string_view text, mode_t mode) noexcept
{
    std::string tmp = path + ".new";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    if (fd >= 0)
        ok = close(fd) == 0 && ok;
    if (ok && rename(tmp.c_str(), path.c_str()) == 0)
        return true;
    int e = errno;
    unlink(tmp.c_str());
    errno = e;
    return false;
}

} // namespace storm
