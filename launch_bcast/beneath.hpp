// File system access confined to a directory: what a node does in the
// staging area of a broadcast, which the job's user can change at any
// moment (rename, replace, swap a directory for a symbolic link).
//
// Every path is resolved from a directory descriptor, component by
// component, and never through a symbolic link: openat2(2) with
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS where the kernel has it, else a
// walk of openat(O_NOFOLLOW | O_DIRECTORY) per component.  `rel` is a
// relative path without empty, "." or ".." components
// (safe_relative_path()), so either way what is opened lies beneath the
// directory; a symbolic link anywhere on the way fails with ELOOP (or
// ENOTDIR), whoever made it -- the broadcast itself or the user.
//
// Contract: functions return a descriptor (or 0) on success, -1 with errno
// set on failure; nothing throws.  They use the calling thread's file
// system ids (AsUser).
#pragma once

#include <string>
#include <sys/types.h>

namespace storm::bcast::beneath {

// Opens `rel` beneath the directory `root` with open(2)'s `flags` (O_NOFOLLOW
// and O_CLOEXEC added) and `mode` (for O_CREAT).
int open(int root, const std::string &rel, int flags, mode_t mode = 0);

// Opens the directory that holds `rel`'s last component beneath `root`
// (O_PATH: for the *at() calls) and sets `name` to that component; `root`
// itself is duplicated for a single component.
int open_parent(int root, const std::string &rel, std::string &name);

// open_parent() for entries that come directory by directory (a tree's
// files, in order): the directory it opened last is kept, and serves
// again while the entries asked for lie in it.  Its descriptor is closed
// by the next open, reset() or the destructor.
class ParentCache {
public:
    ParentCache() = default;
    ParentCache(const ParentCache &) = delete;
    ParentCache &operator=(const ParentCache &) = delete;
    ~ParentCache() { reset(); }

    // As open_parent(root, rel, name), `root` the same at every call until
    // reset(); the descriptor stays the cache's (not to be closed), valid
    // until the next call.  A failure is not kept: the next call for that
    // directory tries again.
    int at(int root, const std::string &rel, std::string &name);
    void reset();

private:
    std::string dir_; // rel's directory part, "" for the root itself
    int fd_ = -1;
};

// Removes `name` in the directory `dir`, and everything under it if it is
// a directory (never following a symbolic link; a directory the caller
// owns but cannot write or search is made so first; entries made in a
// directory while it is removed are found by another pass, three at
// most: one that still has entries after the third is ENOTEMPTY).  0 or
// the errno; a missing `name` is no error.
int remove_tree(int dir, const std::string &name);

// Tests only: resolve by the walk even where openat2(2) exists.
void use_openat2(bool on);

// Tests only: `hook` (nullptr: none) runs in remove_tree() as each pass
// over a directory removed the entries it listed, just before the
// directory itself is removed, with the directory's descriptor and the
// pass (0 to 2): an entry it makes there is one a user's process made
// meanwhile.
void on_removal_pass(void (*hook)(int dir, int pass));

} // namespace storm::bcast::beneath
