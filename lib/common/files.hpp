// Small files read whole, and replaced whole, so that readers see the old
// or the new content, never a part.
#pragma once

#include <cerrno>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdio.h>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace storm {

// What replace_file does with the file it replaced.
enum class Spare {
    remove, // unlinked: only `path` is left (state files: nothing stale beside them)
    keep,   // kept as PATH.new, holding the previous content, and written
            // over by the next call (status files rewritten while daemons
            // run): no inode is created or freed per call.  Creating one
            // can be dear: ext4 without a journal passes over every inode
            // freed in the last minute or so, reading its block.  With 64
            // node agents on one machine rewriting storm-pool.stats at each
            // step launch, that took about 9% of the machine's CPU during
            // the launches.
};

// Writes `text` to PATH.new with `mode` and puts it in place of `path`.
// Returns false with errno set (and PATH.new removed) if any step fails.
//
// An existing `path` is swapped with the new file (RENAME_EXCHANGE) rather
// than renamed over: ext4 (auto_da_alloc) writes a file renamed over
// another to disk before the rename returns, a block write per call from
// every node agent's status files.  The old content, now PATH.new, is then
// removed or kept (`spare`).  A reader that opened `path` before a swap
// reads the old content whole, unless it still reads when the next call
// (with Spare::keep) writes over it.  Nothing here is fsync'ed: these files
// are status and state that a restarted daemon rebuilds when they are
// missing or stale.  Where the file system cannot exchange (EINVAL), or
// `path` does not exist, a plain rename.
inline bool replace_file(const std::string &path, std::string_view text, mode_t mode,
                         Spare spare = Spare::remove) noexcept
{
    std::string tmp = path + ".new";
    // Written over, then cut to length, not truncated first: a spare's
    // block stays its own.  (Truncating frees it, and on a file system
    // mounted with `discard` each freed block is a discard request the
    // writer waits for.)
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
    bool ok = fd >= 0 && fchmod(fd, mode) == 0 && // a kept spare has the mode of its time
              write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
              ftruncate(fd, static_cast<off_t>(text.size())) == 0;
    if (fd >= 0)
        ok = close(fd) == 0 && ok;
    if (ok) {
        if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
            if (spare == Spare::remove)
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

// The whole of a small file (bytes as they are); nullopt if it cannot be
// opened (missing, or a process's /proc entry gone).
inline std::optional<std::string> read_file(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return std::nullopt;
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Removes `path` and the spare replace_file may have kept beside it.
inline void remove_file(const std::string &path) noexcept
{
    unlink(path.c_str());
    unlink((path + ".new").c_str());
}

} // namespace storm
