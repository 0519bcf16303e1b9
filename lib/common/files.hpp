// Replacing a small file whole, so that readers see the old or the new
// content, never a part.
#pragma once

#include <cerrno>
#include <fcntl.h>
#include <stdio.h>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unistd.h>

namespace storm {

// Writes `text` to PATH.new with `mode` and puts it in place of `path`.
// Returns false with errno set (and PATH.new removed) if any step fails.
//
// An existing `path` is swapped with the new file (RENAME_EXCHANGE), then
// removed under the temporary name, rather than renamed over: ext4
// (auto_da_alloc) writes a file renamed over another to disk before the
// rename returns, a block write per call from every node agent's status
// files.  Nothing here is fsync'ed: these files are status and state that
// a restarted daemon rebuilds when they are missing or stale.  Where the
// file system cannot exchange (EINVAL), or `path` does not exist, a plain
// rename.
inline bool replace_file(const std::string &path, std::string_view text, mode_t mode) noexcept
{
    std::string tmp = path + ".new";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    if (fd >= 0)
        ok = close(fd) == 0 && ok;
    if (ok) {
        if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
            unlink(tmp.c_str()); // the old content
            return true;
        }
        if ((errno == ENOENT || errno == EINVAL) && rename(tmp.c_str(), path.c_str()) == 0)
            return true;
    }
    int e = errno;
    unlink(tmp.c_str());
    errno = e;
    return false;
}

} // namespace storm
