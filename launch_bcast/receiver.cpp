#include "launch_bcast/receiver.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <event2/event.h>
#include <zlib.h>

#include "launch_bcast/as_user.hpp"
#include "launch_bcast/beneath.hpp"

namespace storm::bcast {

namespace {

std::string err(const std::string &what, int e) { return what + ": " + std::strerror(e); }

// Allocates a file's `size` bytes before any arrives, so that a full disk
// or an exhausted quota fails the open on that node rather than a write
// midway (and ext4 writes into reserved blocks for less than it spends on
// delayed allocation).  0, or the errno; a file system that cannot reserve
// (EOPNOTSUPP) is no error: the free-space check before stands.
int reserve(int fd, uint64_t size)
{
    if (size == 0)
        return 0;
    int rc; // fallocate(2), not posix_fallocate: no emulation by writing zeros
    do
        rc = fallocate(fd, 0, 0, static_cast<off_t>(size)) == 0 ? 0 : errno;
    while (rc == EINTR);
    return rc == EOPNOTSUPP || rc == ENOSYS ? 0 : rc;
}

std::string dirname_of(const std::string &p)
{
    size_t s = p.rfind('/');
    return s == 0 ? "/" : p.substr(0, s);
}

std::string basename_of(const std::string &p) { return p.substr(p.rfind('/') + 1); }

// Moves the staged `temp` to `dest`, both names in the directory `dir`.
// An existing destination is swapped
// with the new one (RENAME_EXCHANGE): readers see the old or the new,
// never neither, and the old one stays under the temporary name
// (`kept_old`) until the broadcast is finished everywhere (then removed)
// or aborted (then swapped back).  A file is swapped too rather than
// renamed over: ext4 (auto_da_alloc) writes a file renamed over another
// to disk before the rename returns, about 10 ms per 12 MB on each node,
// where the broadcast never promised more than the page cache (neither
// does stock sbcast, which truncates and rewrites).  Where the file system
// cannot exchange (EINVAL), or the destination went away meanwhile, a
// plain rename (nothing kept).  Returns "" or why it failed; `shown` names
// the destination in it.
std::string swap_into_place(int dir, const std::string &temp, const std::string &dest, bool is_dir,
                            bool &kept_old, const std::string &shown)
{
    kept_old = false;
    struct stat st;
    bool exists = fstatat(dir, dest.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (exists && (is_dir || !S_ISDIR(st.st_mode))) {
        if (renameat2(dir, temp.c_str(), dir, dest.c_str(), RENAME_EXCHANGE) == 0) {
            kept_old = true;
            return "";
        }
        if (is_dir || (errno != EINVAL && errno != ENOENT))
            return err("cannot replace " + shown, errno);
    }
    if (renameat(dir, temp.c_str(), dir, dest.c_str()) != 0)
        return err("cannot rename into " + shown, errno);
    return "";
}

const char *kind_name(Entry::Kind k)
{
    switch (k) {
    case Entry::directory:
        return "directory";
    case Entry::symlink:
        return "symbolic link";
    default:
        return "file";
    }
}

bool is_kind(mode_t m, Entry::Kind k)
{
    switch (k) {
    case Entry::directory:
        return S_ISDIR(m);
    case Entry::symlink:
        return S_ISLNK(m);
    default:
        return S_ISREG(m);
    }
}

} // namespace

std::string event_name(const char *kind, uint64_t sid)
{
    return std::string("bcast:") + kind + ":" + session_hex(sid);
}
std::string var_prefix(uint64_t sid) { return "bcast:" + session_hex(sid) + ":"; }

// Files of one broadcast whose descriptors stay open from their creation
// to their last byte (the others are reopened, checked, for their data).
constexpr size_t kKeptDescriptors = 64;

struct Receiver::File {
    std::string path; // in the staging area, for messages
    std::string rel;  // beneath the staging directory; "" for the top entry
    Entry::Kind kind = Entry::file;
    bool dir = false;
    uint32_t mode = 0;
    uint64_t size = 0, received = 0;
    int64_t atime = 0, mtime = 0;
    int fd = -1;
    // The inode the exclusive create made: a path the user can change is
    // reopened only if it still names it (see Receiver::data).
    dev_t dev = 0;
    ino_t ino = 0;
};

struct Receiver::Session {
    Grant grant;
    std::vector<gid_t> groups;
    std::string dest, temp;
    // Every access goes through these: the destination's directory (as the
    // user opened it at the open) and the staged tree's top (a directory
    // broadcast), never through a path the user may change meanwhile.
    int parent_fd = -1, root_fd = -1;
    std::string dest_name, temp_name; // in parent_fd
    uint32_t flags = 0;
    std::vector<File> files;
    size_t incomplete = 0;
    std::string error; // set once a chunk failed here: every later one fails too
    // Committed: in place here, the replaced one (kept_old) under `temp`,
    // until the head says every node committed (finish) or not (abort).
    bool committed = false;
    bool kept_old = false;
    dev_t parent_dev = 0; // the destination's directory
    ino_t parent_ino = 0;
    std::chrono::steady_clock::time_point last;
    std::chrono::milliseconds idle_limit{30000};
    ~Session()
    {
        for (auto &f : files)
            if (f.fd >= 0)
                ::close(f.fd);
        if (root_fd >= 0)
            ::close(root_fd);
        if (parent_fd >= 0)
            ::close(parent_fd);
    }
    // Opens entry `f` of the staged tree (O_NOFOLLOW, beneath the staging
    // directory); -1 and errno on failure.
    int open_entry(const File &f, int flags) const
    {
        if (f.rel.empty())
            return openat(parent_fd, temp_name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
        return beneath::open(root_fd, f.rel, flags);
    }
    // The directory holding entry `f` (O_PATH) and its name there.
    int open_entry_parent(const File &f, std::string &name) const
    {
        if (f.rel.empty()) {
            name = temp_name;
            return fcntl(parent_fd, F_DUPFD_CLOEXEC, 0);
        }
        return beneath::open_parent(root_fd, f.rel, name);
    }
    // Whether `st` is what the broadcast made for entry `f`.
    bool made(const File &f, const struct stat &st) const
    {
        Entry::Kind k = f.kind == Entry::hardlink ? Entry::file : f.kind;
        return is_kind(st.st_mode, k) && st.st_dev == f.dev && st.st_ino == f.ino;
    }
};

Receiver::Receiver(event_base *base, prim::Engine &engine, Authorizer &auth, ReceiverConfig cfg, Logger log)
    : engine_(engine), auth_(auth), cfg_(std::move(cfg)), log_(std::move(log))
{
    if (!cfg_.gate_socket.empty()) {
        try {
            gate_ = std::make_unique<LaunchGate>(base, cfg_.gate_socket, cfg_.gate_trusted, log_);
            gate_->start();
        } catch (const std::exception &e) {
            gate_.reset();
            log_.child("bcast").warning(
                "the launch gate is off on this node (srun --bcast steps cannot start): %s", e.what());
        }
    }
    timer_ = event_new(
        base, -1, EV_PERSIST,
        [](evutil_socket_t, short, void *arg) { static_cast<Receiver *>(arg)->sweep(); }, this);
    timeval tv{1, 0};
    evtimer_add(timer_, &tv);
}

Receiver::~Receiver()
{
    if (timer_)
        event_free(timer_);
    std::vector<uint64_t> open;
    for (auto &kv : sessions_)
        open.push_back(kv.first);
    for (uint64_t sid : open)
        abort(sid, "the agent is stopping");
}

std::string Receiver::on_chunk(const std::string &event, uint64_t sid, std::string_view payload, bool sealed)
{
    // "bcast:<kind>:<sid>"
    size_t colon = event.rfind(':');
    if (colon == std::string::npos || event.substr(colon + 1) != session_hex(sid))
        return "malformed broadcast event " + event;
    std::string kind = event.substr(6, colon - 6);
    try {
        if (kind == "open")
            return open(sid, payload);
        if (kind == "data")
            return data(sid, payload, sealed);
        if (kind == "commit")
            return commit(sid);
        if (kind == "finish")
            return finish(sid);
        if (kind == "abort") {
            abort(sid, "aborted by the head of the broadcast");
            return "";
        }
    } catch (const std::exception &e) {
        return e.what();
    }
    return "unknown broadcast event " + event;
}

std::string Receiver::open(uint64_t sid, std::string_view payload)
{
    if (sessions_.count(sid))
        return "broadcast " + session_hex(sid) + " is already open";
    OpenRequest req = OpenRequest::decode(payload);
    auto s = std::make_unique<Session>();
    try {
        s->grant = auth_.authorize(req.cred);
    } catch (const std::exception &e) {
        log_.error("broadcast %s: credential refused: %s", session_hex(sid).c_str(), e.what());
        return std::string("credential refused: ") + e.what();
    }
    if (!s->grant.nodes.contains(cfg_.self))
        return "not a node of job " + std::to_string(s->grant.job_id);
    s->groups = s->grant.gids.empty() ? groups_of(s->grant.user, s->grant.gid) : s->grant.gids;
    s->flags = req.flags;
    s->dest = req.dest;
    if (s->dest.back() == '/')
        s->dest += "slurm_bcast_" + std::to_string(s->grant.job_id) + "." + std::to_string(s->grant.step_id) +
                   "_" + cfg_.node_name;
    s->temp = dirname_of(s->dest) + "/." + basename_of(s->dest) + ".storm-" + session_hex(sid);
    s->idle_limit =
        std::max(std::chrono::milliseconds(3 * uint64_t(req.timeout_ms)), std::chrono::milliseconds(30000));
    bool top_dir = req.entries.front().dir();
    s->dest_name = basename_of(s->dest);
    s->temp_name = "." + s->dest_name + ".storm-" + session_hex(sid);

    {
        AsUser as(s->grant.uid, s->grant.gid, s->groups);
        std::string parent = dirname_of(s->dest);
        s->parent_fd = ::open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (s->parent_fd < 0)
            return errno == ENOTDIR ? parent + " is not a directory"
                                    : err("destination directory " + parent, errno);
        struct stat st;
        if (fstatat(s->parent_fd, s->dest_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (!top_dir && S_ISDIR(st.st_mode))
                return s->dest + " is a directory";
            if (top_dir && !S_ISDIR(st.st_mode))
                return s->dest + " exists and is not a directory";
            if (!(req.flags & kForce))
                return s->dest + " exists (--force replaces it)";
        } else if (errno != ENOENT) {
            return err(s->dest, errno);
        }
        if (fstat(s->parent_fd, &st) != 0)
            return err("destination directory " + parent, errno);
        // One broadcast at a time per destination (the same name in the
        // same directory, however it is spelled): a later one would swap
        // files under the earlier, whose abort could then undo a broadcast
        // that reported success.  The later one fails, clearly.
        s->parent_dev = st.st_dev;
        s->parent_ino = st.st_ino;
        for (const auto &[other, o] : sessions_)
            if (o->parent_dev == st.st_dev && o->parent_ino == st.st_ino &&
                basename_of(o->dest) == basename_of(s->dest))
                return s->dest + " is being written by broadcast " + session_hex(other) + " (job " +
                       std::to_string(o->grant.job_id) + ") on " + cfg_.node_name +
                       ": one broadcast at a time per destination";

        // A disk too small fails here, not midway: first against the free
        // space, then exactly, as each file's blocks are reserved below.
        struct statvfs vfs;
        uint64_t need = req.total_bytes();
        if (need > 0 && fstatvfs(s->parent_fd, &vfs) == 0) {
            uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
            if (need > avail)
                return "not enough space in " + parent + ": " + std::to_string(need) + " bytes needed, " +
                       std::to_string(avail) + " free";
        }
    }
    // Journaled before anything is staged: a slurmd killed while it stages
    // (a large tree takes a while) removes the part it made when it starts
    // again.
    try {
        journal_add(sid, *s);
    } catch (const std::exception &e) {
        return e.what();
    }
    std::string unstaged = [&]() -> std::string {
        AsUser as(s->grant.uid, s->grant.gid, s->groups);
        // Stage everything; on any failure remove what was made.
        size_t kept = 0;
        auto fail = [&](const std::string &why) {
            for (auto &made_file : s->files)
                if (made_file.fd >= 0) {
                    ::close(made_file.fd);
                    made_file.fd = -1;
                }
            beneath::remove_tree(s->parent_fd, s->temp_name);
            return why;
        };
        for (size_t i = 0; i < req.entries.size(); ++i) {
            const Entry &e = req.entries[i];
            File f;
            f.rel = e.path;
            f.path = i == 0 ? s->temp : s->temp + "/" + e.path;
            f.kind = e.kind;
            f.dir = e.dir();
            f.mode = e.mode;
            f.size = e.size;
            f.atime = e.atime;
            f.mtime = e.mtime;
            const std::string name = i == 0 ? s->dest : s->dest + "/" + e.path; // in messages
            // The directory to create the entry in, beneath the staging
            // directory: a symbolic link on the way (the user's) fails.
            std::string leaf = s->temp_name;
            int at = s->parent_fd;
            struct Closer {
                int fd = -1;
                ~Closer()
                {
                    if (fd >= 0)
                        ::close(fd);
                }
            } parent_of;
            if (i > 0) {
                parent_of.fd = at = beneath::open_parent(s->root_fd, e.path, leaf);
                if (at < 0)
                    return fail(err("cannot create " + name, errno));
            }
            struct stat made;
            if (e.kind == Entry::directory) {
                if (mkdirat(at, leaf.c_str(), 0700) != 0 ||
                    fstatat(at, leaf.c_str(), &made, AT_SYMLINK_NOFOLLOW) != 0)
                    return fail(err("cannot create " + name, errno));
                if (i == 0) {
                    s->root_fd = openat(at, leaf.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                    struct stat opened;
                    if (s->root_fd < 0 || fstat(s->root_fd, &opened) != 0 || opened.st_ino != made.st_ino ||
                        opened.st_dev != made.st_dev)
                        return fail(name + ": the staging directory " + s->temp + " was replaced");
                }
            } else if (e.kind == Entry::symlink) {
                if (symlinkat(e.target.c_str(), at, leaf.c_str()) != 0 ||
                    fstatat(at, leaf.c_str(), &made, AT_SYMLINK_NOFOLLOW) != 0)
                    return fail(err("cannot create the symbolic link " + name, errno));
            } else if (e.kind == Entry::hardlink) {
                // To the file this broadcast made (linkat without
                // AT_SYMLINK_FOLLOW: a link the user swapped in is linked
                // as itself, and found below).
                const File &to = s->files[e.link];
                std::string to_leaf;
                int to_at = s->open_entry_parent(to, to_leaf);
                int rc = to_at < 0 ? -1 : linkat(to_at, to_leaf.c_str(), at, leaf.c_str(), 0);
                int e2 = errno;
                if (to_at >= 0)
                    ::close(to_at);
                if (rc != 0)
                    return fail(err("cannot create the hard link " + name, e2));
                if (fstatat(at, leaf.c_str(), &made, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(made.st_mode) ||
                    made.st_dev != to.dev || made.st_ino != to.ino)
                    return fail(name + ": the file it links to was replaced while it was being received");
            } else {
                int fd = openat(at, leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (fd < 0)
                    return fail(err("cannot create " + name, errno));
                if (fstat(fd, &made) != 0) {
                    int e2 = errno;
                    ::close(fd);
                    return fail(err("cannot create " + name, e2));
                }
                int reserved = reserve(fd, e.size);
                // The first files keep the descriptor of their exclusive
                // create: their data never goes through a path the user can
                // change.  A bounded number, for trees of any size.
                if (reserved == 0 && e.size > 0 && kept < kKeptDescriptors) {
                    f.fd = fd;
                    ++kept;
                } else {
                    ::close(fd);
                }
                if (reserved != 0) {
                    s->files.push_back(std::move(f));
                    return fail(
                        err("cannot reserve " + std::to_string(e.size) + " bytes for " + name, reserved));
                }
                if (e.size > 0)
                    s->incomplete++;
            }
            f.dev = made.st_dev;
            f.ino = made.st_ino;
            s->files.push_back(std::move(f));
        }
        return "";
    }();
    if (!unstaged.empty()) {
        journal_remove(sid);
        return unstaged;
    }
    s->last = std::chrono::steady_clock::now();
    engine_.set_variable(var_prefix(sid) + "complete", s->incomplete == 0 ? 1 : 0);
    log_.info("broadcast %s: receiving %s (%zu entries, %" PRIu64 " bytes) for job %u, uid %u",
              session_hex(sid).c_str(), s->dest.c_str(), s->files.size(), req.total_bytes(), s->grant.job_id,
              static_cast<unsigned>(s->grant.uid));
    if (gate_)
        gate_->opened(sid);
    sessions_.emplace(sid, std::move(s));
    return "";
}

std::string Receiver::data(uint64_t sid, std::string_view payload, bool sealed)
{
    std::string none;
    Session *sp = session(sid, none);
    if (!sp)
        return none;
    Session &s = *sp;
    if (!s.error.empty())
        return s.error;
    if (s.committed)
        return "data for " + s.dest + " after its commit";
    s.last = std::chrono::steady_clock::now();
    auto failed = [&](const std::string &why) {
        s.error = why;
        return why;
    };
    net::Reader r(payload);
    ChunkHeader h = ChunkHeader::decode(r);
    std::string_view bytes = r.rest();
    if (h.entry >= s.files.size() || s.files[h.entry].kind != Entry::file)
        return failed("chunk for entry " + std::to_string(h.entry) + ", which is not a file");
    File &f = s.files[h.entry];
    if (h.offset != f.received || h.raw_len > f.size - f.received)
        return failed("chunk [" + std::to_string(h.offset) + ", +" + std::to_string(h.raw_len) +
                      ") out of order or beyond the " + std::to_string(f.size) + " bytes of " + f.path);
    std::string inflated;
    if (h.compressed) {
        inflated.resize(h.raw_len);
        uLongf len = h.raw_len;
        if (uncompress(reinterpret_cast<Bytef *>(inflated.data()), &len,
                       reinterpret_cast<const Bytef *>(bytes.data()), bytes.size()) != Z_OK ||
            len != h.raw_len)
            return failed("chunk at " + std::to_string(h.offset) + " does not decompress");
        bytes = inflated;
    } else if (bytes.size() != h.raw_len) {
        return failed("chunk of " + std::to_string(bytes.size()) + " bytes, header says " +
                      std::to_string(h.raw_len));
    }
    // Sealed bytes are those of the node that multicast them, whose own
    // check of this CRC came first (Engine::ChunkSink): here it would only
    // repeat what the seal proved.
    if (!sealed && crc32(bytes) != h.crc)
        return failed("chunk at " + std::to_string(h.offset) + " of " + s.dest + " fails its CRC check");
    if (f.fd < 0) {
        // The staged file sits in a directory the user can write: between
        // its creation and now it may have been swapped for a FIFO (whose
        // open would block this loop until a reader came), a device or
        // another file.  O_NONBLOCK keeps the open from waiting, and the
        // descriptor is used only if it is still the regular file created.
        AsUser as(s.grant.uid, s.grant.gid, s.groups);
        int fd = s.open_entry(f, O_WRONLY | O_NONBLOCK | O_NOCTTY);
        if (fd < 0)
            return failed(err("cannot open " + f.path, errno));
        struct stat now;
        if (fstat(fd, &now) != 0 || !S_ISREG(now.st_mode) || now.st_dev != f.dev || now.st_ino != f.ino) {
            ::close(fd);
            return failed(f.path + " was replaced while it was being received (it is no longer the file " +
                          "this broadcast created)");
        }
        f.fd = fd;
    }
    // As the user: the user's disk quota and reserved blocks hold for the
    // data as for the files' creation (AsUser drops CAP_SYS_RESOURCE).
    AsUser as(s.grant.uid, s.grant.gid, s.groups);
    size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n =
            pwrite(f.fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(h.offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return failed(err("cannot write " + s.dest, n < 0 ? errno : EIO));
        done += static_cast<size_t>(n);
    }
    f.received += bytes.size();
    if (f.received == f.size) {
        if (::close(f.fd) != 0) {
            f.fd = -1;
            return failed(err("cannot write " + s.dest, errno));
        }
        f.fd = -1;
        if (--s.incomplete == 0)
            engine_.set_variable(var_prefix(sid) + "complete", 1);
    }
    return "";
}

Receiver::Session *Receiver::session(uint64_t sid, std::string &why)
{
    auto it = sessions_.find(sid);
    if (it != sessions_.end())
        return it->second.get();
    why = "no broadcast " + session_hex(sid) + " is open on this node";
    return nullptr;
}

std::string Receiver::refuse(uint64_t sid, std::string why)
{
    abort(sid, why.c_str());
    return why;
}

std::string Receiver::commit(uint64_t sid)
{
    std::string why;
    Session *sp = session(sid, why);
    if (!sp)
        return why;
    Session &s = *sp;
    if (s.incomplete != 0 || !s.error.empty() || engine_.variable(var_prefix(sid) + "commit") != 1)
        return refuse(sid, "commit of " + s.dest + " before every node confirmed every byte");
    {
        AsUser as(s.grant.uid, s.grant.gid, s.groups);
        // Every staged entry must still be the one this broadcast made: the
        // user can rename, replace or swap anything in the staging area.
        // Each is opened beneath it (no link followed) and checked, then
        // its mode and times set through the descriptor.  Contents first,
        // so that directories' times stay as set.
        for (auto f = s.files.rbegin(); f != s.files.rend() && why.empty(); ++f) {
            int fd = s.open_entry(*f, f->kind == Entry::directory ? O_RDONLY | O_DIRECTORY
                                      : f->kind == Entry::file    ? O_RDONLY | O_NONBLOCK | O_NOCTTY
                                                                  : O_PATH);
            struct stat now;
            if (fd < 0 || fstat(fd, &now) != 0 || !s.made(*f, now)) {
                why = f->path + " was replaced while it was being received (it is no longer the " +
                      kind_name(f->kind) + " this broadcast created)";
            } else if (f->kind == Entry::file || f->kind == Entry::directory) {
                if (fchmod(fd, f->mode & 0777) != 0)
                    why = err("cannot set the mode of " + f->path, errno);
                timespec ts[2] = {{static_cast<time_t>(f->atime), 0}, {static_cast<time_t>(f->mtime), 0}};
                if (why.empty() && (s.flags & kPreserve) && futimens(fd, ts) != 0)
                    why = err("cannot set the times of " + f->path, errno);
            } else if (f->kind == Entry::symlink && (s.flags & kPreserve)) {
                std::string leaf;
                int at = s.open_entry_parent(*f, leaf);
                timespec ts[2] = {{static_cast<time_t>(f->atime), 0}, {static_cast<time_t>(f->mtime), 0}};
                if (at < 0 || utimensat(at, leaf.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0)
                    why = err("cannot set the times of " + f->path, errno);
                if (at >= 0)
                    ::close(at);
            }
            if (fd >= 0)
                ::close(fd);
        }
        if (why.empty())
            why = swap_into_place(s.parent_fd, s.temp_name, s.dest_name, s.files.front().dir, s.kept_old,
                                  s.dest);
    }
    if (!why.empty())
        return refuse(sid, why);
    s.committed = true;
    s.last = std::chrono::steady_clock::now();
    return "";
}

std::string Receiver::finish(uint64_t sid)
{
    std::string why;
    Session *sp = session(sid, why);
    if (!sp)
        return why;
    Session &s = *sp;
    if (!s.committed)
        return refuse(sid, "finish of " + s.dest + " before its commit");
    if (s.kept_old) {
        AsUser as(s.grant.uid, s.grant.gid, s.groups);
        if (int e = beneath::remove_tree(s.parent_fd, s.temp_name))
            log_.error("broadcast %s: cannot remove the replaced %s (now %s): %s", session_hex(sid).c_str(),
                       s.dest.c_str(), s.temp.c_str(), std::strerror(e));
    }
    journal_remove(sid);
    engine_.erase_variables(var_prefix(sid));
    log_.info("broadcast %s: %s in place", session_hex(sid).c_str(), s.dest.c_str());
    sessions_.erase(sid);
    if (gate_)
        gate_->ended(sid, "");
    return "";
}

void Receiver::discard(Session &s)
{
    for (auto &f : s.files)
        if (f.fd >= 0) {
            ::close(f.fd);
            f.fd = -1;
        }
    AsUser as(s.grant.uid, s.grant.gid, s.groups);
    if (s.committed && !s.kept_old) {
        // In place here, but not everywhere: the destination was new.
        if (int e = beneath::remove_tree(s.parent_fd, s.dest_name))
            log_.error("cannot remove %s: %s", s.dest.c_str(), std::strerror(e));
        return;
    }
    if (s.committed &&
        renameat2(s.parent_fd, s.temp_name.c_str(), s.parent_fd, s.dest_name.c_str(), RENAME_EXCHANGE) != 0) {
        // The earlier one cannot go back: both stay, and the log says where.
        log_.error("cannot put the earlier %s back from %s: %s (the new one stays in place)", s.dest.c_str(),
                   s.temp.c_str(), std::strerror(errno));
        return;
    }
    if (s.parent_fd < 0)
        return;
    if (int e = beneath::remove_tree(s.parent_fd, s.temp_name))
        log_.error("cannot remove %s: %s", s.temp.c_str(), std::strerror(e));
}

void Receiver::abort(uint64_t sid, const char *why)
{
    auto it = sessions_.find(sid);
    if (it == sessions_.end())
        return;
    log_.info("broadcast %s: %s not kept: %s", session_hex(sid).c_str(), it->second->dest.c_str(), why);
    try {
        discard(*it->second);
    } catch (const std::exception &e) {
        log_.error("broadcast %s: %s", session_hex(sid).c_str(), e.what());
    }
    journal_remove(sid);
    engine_.erase_variables(var_prefix(sid));
    sessions_.erase(it);
    if (gate_)
        gate_->ended(sid, why);
}

void Receiver::sweep()
{
    auto now = std::chrono::steady_clock::now();
    std::vector<uint64_t> stale;
    for (auto &kv : sessions_)
        if (now - kv.second->last > kv.second->idle_limit)
            stale.push_back(kv.first);
    for (uint64_t sid : stale)
        abort(sid, "no word from the head of the broadcast (it or its client died)");
    if (gate_)
        gate_->sweep();
}

// ---- journal: one file per open session, "uid gid ngroups groups...\ntemp\n"

void Receiver::journal_add(uint64_t sid, const Session &s)
{
    if (cfg_.journal_dir.empty())
        return;
    std::string path = cfg_.journal_dir + "/" + session_hex(sid), tmp = path + ".new";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << s.grant.uid << " " << s.grant.gid << " " << s.groups.size();
        for (gid_t g : s.groups)
            out << " " << g;
        out << "\n" << s.temp << "\n";
        out.flush();
        if (!out)
            throw std::runtime_error("cannot write the journal " + tmp);
    }
    if (rename(tmp.c_str(), path.c_str()) != 0)
        throw std::runtime_error(err("cannot write the journal " + path, errno));
}

void Receiver::journal_remove(uint64_t sid)
{
    if (!cfg_.journal_dir.empty())
        unlink((cfg_.journal_dir + "/" + session_hex(sid)).c_str());
}

void Receiver::recover()
{
    if (cfg_.journal_dir.empty())
        return;
    if (mkdir(cfg_.journal_dir.c_str(), 0700) != 0 && errno != EEXIST)
        throw std::runtime_error(err("cannot create " + cfg_.journal_dir, errno));
    DIR *d = opendir(cfg_.journal_dir.c_str());
    if (!d)
        throw std::runtime_error(err("cannot read " + cfg_.journal_dir, errno));
    std::vector<std::string> names;
    while (dirent *e = readdir(d))
        if (e->d_name[0] != '.')
            names.push_back(e->d_name);
    closedir(d);
    for (const auto &n : names) {
        std::string path = cfg_.journal_dir + "/" + n;
        std::ifstream in(path);
        uid_t uid;
        gid_t gid;
        size_t ng = 0;
        std::vector<gid_t> groups;
        std::string temp;
        if (in >> uid >> gid >> ng && ng < 65536) {
            groups.resize(ng);
            for (auto &g : groups)
                in >> g;
            in >> std::ws;
            std::getline(in, temp);
        }
        if (in && temp.size() > 1 && temp[0] == '/' && temp.find("/.") != std::string::npos &&
            temp.find(".storm-") != std::string::npos) {
            try {
                AsUser as(uid, gid, groups);
                // Staged files of a broadcast that did not commit, or what a
                // committed one replaced: either way, not wanted.  Nothing
                // there: it committed here over nothing.
                int at = ::open(dirname_of(temp).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
                struct stat st;
                if (at >= 0 && (fstatat(at, basename_of(temp).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ||
                                errno != ENOENT)) {
                    int e = beneath::remove_tree(at, basename_of(temp));
                    if (e == 0)
                        log_.info("removed %s, left by a broadcast that did not finish", temp.c_str());
                    else
                        log_.error("cannot remove %s, left by a broadcast: %s", temp.c_str(),
                                   std::strerror(e));
                }
                if (at >= 0)
                    ::close(at);
            } catch (const std::exception &e) {
                log_.error("cannot remove %s, left by a broadcast: %s", temp.c_str(), e.what());
            }
        } else {
            log_.error("ignoring unreadable broadcast journal entry %s", path.c_str());
        }
        unlink(path.c_str());
    }
}

} // namespace storm::bcast
