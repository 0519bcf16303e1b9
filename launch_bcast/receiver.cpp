#include "launch_bcast/receiver.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <system_error>
#include <unistd.h>

#include <event2/event.h>

#include "launch_bcast/as_user.hpp"
#include "launch_bcast/beneath.hpp"
#include "launch_bcast/fs_worker.hpp"
#include "lib/common/timeval.hpp"
#include "lib/net/mcast.hpp"

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

// A tree's files smaller than this are not reserved when their first
// record does not bring all of them: a full disk or quota fails their
// write instead, which fails the broadcast the same way.  Each reservation
// is a system call and ext4's unwritten extents to convert; Python 3.11's
// standard library (52 MB, 1,400 files, 225 of them between 32 KiB and
// 1 MiB) to 32 virtual nodes unshaped took 2.97-3.37 s without them for
// files under 1 MiB, 3.44-3.83 s with them (2.25-2.34 s against
// 2.47-2.53 s with -C).
constexpr uint64_t kReserveFrom = 1u << 20;

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

// Descriptors of one broadcast's files kept open from their creation to
// their last byte, at most (the others are reopened, checked, for each
// piece of their data).
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
    // Not made yet: a file of a tree with bytes to come is created by its
    // first record (write_piece), so that the creation of a tree's files
    // overlaps its transfer rather than coming before it.
    bool lazy = false;
    // Its mode (and, with --preserve, times) set through its descriptor
    // as its last byte was written: the commit only checks it is still
    // the file made (see commit_entries).
    bool settled = false;
    // The inode the exclusive create made: a path the user can change is
    // reopened only if it still names it (see Receiver::data).
    dev_t dev = 0;
    ino_t ino = 0;
};

struct Receiver::Session {
    uint64_t sid = 0;
    // Set on the loop at the open, read-only after.
    Grant grant;
    std::string dest, temp, parent;   // parent: the destination's directory
    std::string dest_name, temp_name; // in parent_fd
    uint32_t flags = 0;
    std::chrono::milliseconds idle_limit{30000};
    std::chrono::milliseconds deadline{10000}; // for each step of its work
    std::unique_ptr<FsWorker> worker;          // made and reset on the loop
    std::atomic<bool> cancelled{false};        // aborted: queued chunks are not written
    // Chunks for the worker (Receiver::data): the loop appends, and the
    // job queued for them takes all that came meanwhile and writes them
    // as the user in one go.  `chunk_job`: such a job is queued and has
    // not taken them yet (a chunk that comes then joins it).
    // `bytes`: in the buffer the engine gave (Engine::AsyncChunkSink), or
    // in a copy of them where it gave none.  `n`: the bytes it holds.
    struct Chunk {
        uint64_t wait, n;
        bool sealed;
        net::DataRef bytes;
    };
    std::mutex chunks_mu;
    std::vector<Chunk> chunks;
    bool chunk_job = false;

    // The loop's.
    enum State { opening, open, committing, committed, finishing, ended } state = opening;
    std::string error; // set once a chunk failed here: every later one fails too
    size_t incomplete = 0;
    dev_t parent_dev = 0; // the destination's directory, once looked up
    ino_t parent_ino = 0;
    std::chrono::steady_clock::time_point last;
    uint64_t queued = 0; // bytes of chunks waiting for the worker
    uint64_t next_wait = 0;
    std::map<uint64_t, Done> waiting; // chunks whose work is queued or running
    std::vector<Done> removed;        // answered once the removal ran
    bool overdue = false;             // its removal's deadline passed (logged)
    // Answers (ids in `waiting`) due once the staging or the commit at work
    // ended, or half a deadline after they came while the work progresses
    // (Receiver::hold), with when they came.
    std::vector<std::pair<std::chrono::steady_clock::time_point, uint64_t>> polls;
    uint64_t blocker = 0; // the broadcast whose removal it waits for (after_removals)

    // The worker's (the session's jobs, in order).
    std::vector<gid_t> groups;
    // Every access goes through these: the destination's directory (as the
    // user opened it at the open) and the staged tree's top (a directory
    // broadcast), never through a path the user may change meanwhile.
    int parent_fd = -1, root_fd = -1;
    std::vector<File> files;
    size_t fds = 0; // of `files` open (kKeptDescriptors at most)
    // The directory (O_PATH, beneath the staged top) the last file made by
    // its first record went into, for the next ones there.
    beneath::ParentCache made_in;
    std::string failed; // a chunk failed here: later ones are not written
    // In place here, the replaced one (kept_old) under `temp`, until the
    // head says every node committed (finish) or not (abort).
    bool in_place = false;
    bool kept_old = false;
    bool finishing_here = false; // the finish started removing the replaced one

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
    // Registers a chunk's answer to come (the loop's).
    uint64_t wait(Done done)
    {
        waiting.emplace(++next_wait, std::move(done));
        return next_wait;
    }
    Done take(uint64_t id)
    {
        auto it = waiting.find(id);
        if (it == waiting.end())
            return [](const std::string &) {};
        Done d = std::move(it->second);
        waiting.erase(it);
        return d;
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
    // Whether the step at work on its worker has gone without progress
    // for longer than its deadline (its file system stopped answering);
    // `what`, if given, says what that step is.  The loop's.
    bool stuck(std::string *what = nullptr) const { return worker && worker->busy_for(what) > deadline; }
    // Where entry `rel` ("" for the top) lands, for messages: its path
    // under the destination.
    std::string dest_path(const std::string &rel) const { return rel.empty() ? dest : dest + "/" + rel; }
    // Whether `st` is what the broadcast made for entry `f`.
    bool made(const File &f, const struct stat &st) const
    {
        Entry::Kind k = f.kind == Entry::hardlink ? Entry::file : f.kind;
        return is_kind(st.st_mode, k) && st.st_dev == f.dev && st.st_ino == f.ino;
    }
};

namespace {

using Session = Receiver::Session;
using File = Receiver::File;

// ---- the journal: one file per open session, "uid gid ngroups groups...\ntemp\n"
// In root's spool directory (never the user's): written by the workers,
// as root, before a session stages anything and after it removed it all.

void journal_add(const std::string &dir, const Session &s)
{
    if (dir.empty())
        return;
    std::string path = dir + "/" + session_hex(s.sid), tmp = path + ".new";
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

void journal_remove(const std::string &dir, uint64_t sid)
{
    if (!dir.empty())
        unlink((dir + "/" + session_hex(sid)).c_str());
}

// On the worker, as the user: opens the destination's directory and checks
// the destination and the room for `need` bytes.  "" or why not.
std::string look_up(Session &s, bool top_dir, uint64_t need, dev_t &dev, ino_t &ino)
{
    s.parent_fd = ::open(s.parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (s.parent_fd < 0)
        return errno == ENOTDIR ? s.parent + " is not a directory"
                                : err("destination directory " + s.parent, errno);
    FsWorker::progress();
    struct stat st;
    if (fstatat(s.parent_fd, s.dest_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!top_dir && S_ISDIR(st.st_mode))
            return s.dest + " is a directory";
        if (top_dir && !S_ISDIR(st.st_mode))
            return s.dest + " exists and is not a directory";
        if (!(s.flags & kForce))
            return s.dest + " exists (--force replaces it)";
    } else if (errno != ENOENT) {
        return err(s.dest, errno);
    }
    if (fstat(s.parent_fd, &st) != 0)
        return err("destination directory " + s.parent, errno);
    dev = st.st_dev;
    ino = st.st_ino;
    FsWorker::progress();
    // A disk too small fails here, not midway: first against the free
    // space, then exactly, as each file's blocks are reserved (stage()).
    struct statvfs vfs;
    if (need > 0 && fstatvfs(s.parent_fd, &vfs) == 0) {
        uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
        if (need > avail)
            return "not enough space in " + s.parent + ": " + std::to_string(need) + " bytes needed, " +
                   std::to_string(avail) + " free";
    }
    return "";
}

// On the worker, as the user: stages every entry under the temporary
// name; on any failure removes what was made.  "" or why not;
// `incomplete`: the files that wait for bytes.
std::string stage_entries(Session &s, const OpenRequest &req, size_t &incomplete)
{
    auto fail = [&](const std::string &why) {
        for (auto &made_file : s.files)
            if (made_file.fd >= 0) {
                ::close(made_file.fd);
                made_file.fd = -1;
            }
        s.fds = 0;
        beneath::remove_tree(s.parent_fd, s.temp_name);
        return why;
    };
    // A tree's files with bytes are made by their first record, but for
    // those a hard link of the tree names (made here, as their links are).
    const bool tree = req.entries.size() > 1;
    std::vector<bool> linked(req.entries.size());
    for (const auto &e : req.entries)
        if (e.kind == Entry::hardlink && e.link < linked.size())
            linked[e.link] = true;
    beneath::ParentCache staged_in;
    for (size_t i = 0; i < req.entries.size(); ++i) {
        FsWorker::progress();
        if (s.cancelled) // aborted while it staged: its removal comes next
            return fail("aborted while staging " + s.dest);
        const Entry &e = req.entries[i];
        File f;
        f.rel = e.path;
        f.path = i == 0 ? s.temp : s.temp + "/" + e.path;
        f.kind = e.kind;
        f.dir = e.dir();
        f.mode = e.mode;
        f.size = e.size;
        f.atime = e.atime;
        f.mtime = e.mtime;
        if (tree && e.kind == Entry::file && e.size > 0 && !linked[i]) {
            f.lazy = true;
            incomplete++;
            s.files.push_back(std::move(f));
            continue;
        }
        const std::string name = s.dest_path(e.path); // in messages
        // The directory to create the entry in, beneath the staging
        // directory: a symbolic link on the way (the user's) fails.
        // Opened once for the entries that follow one another there.
        std::string leaf = s.temp_name;
        int at = s.parent_fd;
        if (i > 0) {
            at = staged_in.at(s.root_fd, e.path, leaf);
            if (at < 0)
                return fail(err("cannot create " + name, errno));
        }
        struct stat made;
        if (e.kind == Entry::directory) {
            if (mkdirat(at, leaf.c_str(), 0700) != 0 ||
                fstatat(at, leaf.c_str(), &made, AT_SYMLINK_NOFOLLOW) != 0)
                return fail(err("cannot create " + name, errno));
            if (i == 0) {
                s.root_fd = openat(at, leaf.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                struct stat opened;
                if (s.root_fd < 0 || fstat(s.root_fd, &opened) != 0 || opened.st_ino != made.st_ino ||
                    opened.st_dev != made.st_dev)
                    return fail(name + ": the staging directory " + s.temp + " was replaced");
            }
        } else if (e.kind == Entry::symlink) {
            if (symlinkat(e.target.c_str(), at, leaf.c_str()) != 0 ||
                fstatat(at, leaf.c_str(), &made, AT_SYMLINK_NOFOLLOW) != 0)
                return fail(err("cannot create the symbolic link " + name, errno));
        } else if (e.kind == Entry::hardlink) {
            // To the file this broadcast made (linkat without
            // AT_SYMLINK_FOLLOW: a link the user swapped in is linked
            // as itself, and found below).
            const File &to = s.files[e.link];
            std::string to_leaf;
            int to_at = s.open_entry_parent(to, to_leaf);
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
            if (reserved == 0 && e.size > 0 && s.fds < kKeptDescriptors) {
                f.fd = fd;
                ++s.fds;
            } else {
                ::close(fd);
            }
            if (reserved != 0) {
                s.files.push_back(std::move(f));
                return fail(err("cannot reserve " + std::to_string(e.size) + " bytes for " + name, reserved));
            }
            if (e.size > 0)
                incomplete++;
        }
        f.dev = made.st_dev;
        f.ino = made.st_ino;
        s.files.push_back(std::move(f));
    }
    return "";
}

// On the worker, as the user: writes `bytes` at `offset` of file `f`,
// checked to continue it (write_chunk).  "" or why not; `files_done`
// counts the files now complete.
std::string write_piece(Session &s, File &f, uint64_t offset, std::string_view bytes, size_t &files_done)
{
    if (f.lazy) {
        // Its first record (check_record: at offset 0): the exclusive
        // create, beneath the staging directory, in the directory staged
        // for it (a link the user swapped in on the way fails), opened
        // once for the files that follow one another there.
        std::string leaf;
        int at = s.made_in.at(s.root_fd, f.rel, leaf);
        int fd = at < 0
                     ? -1
                     : openat(at, leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        int e = errno;
        struct stat made;
        if (fd < 0 || fstat(fd, &made) != 0) {
            e = fd < 0 ? e : errno;
            if (fd >= 0)
                ::close(fd);
            return err("cannot create " + s.dest_path(f.rel) + " (staged as " + f.path + ")", e);
        }
        f.lazy = false;
        f.dev = made.st_dev;
        f.ino = made.st_ino;
        f.fd = fd;
        ++s.fds;
        // Its blocks reserved, unless this record brings all of it (the
        // write then fails as the reservation would) or it is smaller
        // than kReserveFrom.
        if (int r = bytes.size() < f.size && f.size >= kReserveFrom ? reserve(fd, f.size) : 0)
            return err("cannot reserve " + std::to_string(f.size) + " bytes for " + s.dest_path(f.rel), r);
    } else if (f.fd < 0) {
        // The staged file sits in a directory the user can write: between
        // its creation and now it may have been swapped for a FIFO (whose
        // open would block until a reader came), a device or another file.
        // O_NONBLOCK keeps the open from waiting, and the descriptor is
        // used only if it is still the regular file created.
        int fd = s.open_entry(f, O_WRONLY | O_NONBLOCK | O_NOCTTY);
        if (fd < 0)
            return err("cannot open " + f.path, errno);
        struct stat now;
        if (fstat(fd, &now) != 0 || !S_ISREG(now.st_mode) || now.st_dev != f.dev || now.st_ino != f.ino) {
            ::close(fd);
            return f.path + " was replaced while it was being received (it is no longer the file " +
                   "this broadcast created)";
        }
        f.fd = fd;
        ++s.fds;
    }
    size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = pwrite(f.fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return err("cannot write " + s.dest_path(f.rel), n < 0 ? errno : EIO);
        done += static_cast<size_t>(n);
    }
    f.received += bytes.size();
    // Complete: its mode and times, through the descriptor (the commit
    // then needs no descriptor of its own for it).
    if (f.received == f.size) {
        timespec ts[2] = {{static_cast<time_t>(f.atime), 0}, {static_cast<time_t>(f.mtime), 0}};
        if (fchmod(f.fd, f.mode & 0777) != 0)
            return err("cannot set the mode of " + f.path, errno);
        if ((s.flags & kPreserve) && futimens(f.fd, ts) != 0)
            return err("cannot set the times of " + f.path, errno);
        f.settled = true;
    }
    // Closed once complete, or at once past kKeptDescriptors open (records
    // that begin many files and end none).
    if (f.received == f.size || s.fds > kKeptDescriptors) {
        int rc = ::close(f.fd);
        f.fd = -1;
        --s.fds;
        if (rc != 0)
            return err("cannot write " + s.dest_path(f.rel), errno);
        if (f.received == f.size)
            ++files_done;
    }
    return "";
}

// On the worker, acting as the user (write_chunks' AsUser: the user's disk
// quota and reserved blocks hold for the data as for the files' creation,
// CAP_SYS_RESOURCE dropped): checks and writes one chunk, a file's bytes,
// or records packed for several (every record checked before any is
// written).  "" or why not; `files_done`: how many files now hold every
// byte.
std::string write_chunk(Session &s, std::string_view payload, bool sealed, size_t &files_done)
{
    if (!s.failed.empty())
        return s.failed;
    auto failed = [&](const std::string &why) {
        s.failed = why;
        return why;
    };
    net::Reader r(payload);
    ChunkHeader h = ChunkHeader::decode(r);
    std::string_view bytes = r.rest();
    if (!h.packed && (h.entry >= s.files.size() || s.files[h.entry].kind != Entry::file))
        return failed("chunk for entry " + std::to_string(h.entry) + ", which is not a file");
    if (!h.packed && (h.offset != s.files[h.entry].received ||
                      h.raw_len > s.files[h.entry].size - s.files[h.entry].received))
        return failed("chunk [" + std::to_string(h.offset) + ", +" + std::to_string(h.raw_len) +
                      ") out of order or beyond the " + std::to_string(s.files[h.entry].size) + " bytes of " +
                      s.files[h.entry].path);
    // Kept from chunk to chunk on this worker: no allocation and no fill
    // for chunks of one size.
    thread_local std::string inflated;
    if (h.codec != Codec::none) {
        std::string why = decompress(h.codec, bytes, h.raw_len, inflated);
        if (!why.empty())
            return failed("chunk at " + std::to_string(h.offset) + " " + why);
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
    std::vector<PackRecord> records;
    if (h.packed) {
        // Entries strictly increase (decode_pack): each record is checked
        // against its file as it is before this chunk.
        try {
            records = decode_pack(bytes);
        } catch (const net::DecodeError &e) {
            return failed(std::string(e.what()) + " (" + s.dest + ")");
        }
        for (const auto &rec : records) {
            const File *f = rec.entry < s.files.size() ? &s.files[rec.entry] : nullptr;
            std::string why =
                check_record(rec, f && f->kind == Entry::file, f ? f->size : 0, f ? f->received : 0);
            if (!why.empty())
                return failed(why + " (" + s.dest + ")");
        }
    } else {
        records.push_back(PackRecord{h.entry, h.offset, bytes});
    }
    // One record, one step of the worker's job (FsWorker::progress): a
    // chunk packs up to hundreds of small files, each created, written
    // and closed, and a file system slowed by every node at once (1000
    // virtual nodes staging a tree) still answers each of them.
    for (const auto &rec : records) {
        FsWorker::progress();
        std::string why = write_piece(s, s.files[rec.entry], rec.offset, rec.bytes, files_done);
        if (!why.empty())
            return failed(why);
    }
    return "";
}

// On the worker, as the user: checks every staged entry, sets modes and
// times, and swaps the whole into place.  "" or why not.
std::string commit_entries(Session &s)
{
    std::string why;
    // Every staged entry must still be the one this broadcast made: the
    // user can rename, replace or swap anything in the staging area.
    // Each is opened beneath it (no link followed) and checked, then
    // its mode and times set through the descriptor; a file settled as
    // its last byte came is looked at (fstatat, no link followed) in its
    // directory, opened beneath it once for its files that follow one
    // another.  Contents first, so that directories' times stay as set.
    beneath::ParentCache parent;
    for (auto f = s.files.rbegin(); f != s.files.rend() && why.empty(); ++f) {
        FsWorker::progress();
        if (f->settled) {
            std::string leaf = s.temp_name;
            int at = s.parent_fd;
            if (!f->rel.empty())
                at = parent.at(s.root_fd, f->rel, leaf);
            struct stat now;
            if (at < 0 || fstatat(at, leaf.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 || !s.made(*f, now))
                why = f->path + " was replaced while it was being received (it is no longer the " +
                      kind_name(f->kind) + " this broadcast created)";
            continue;
        }
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
    FsWorker::progress();
    if (why.empty())
        why = swap_into_place(s.parent_fd, s.temp_name, s.dest_name, s.files.front().dir, s.kept_old, s.dest);
    if (why.empty())
        s.in_place = true;
    return why;
}

// On the worker, as the user: removes what the session left here (the
// staged files, or, committed but not finished, puts back what it
// replaced).  Returns the messages to log.
std::vector<std::string> discard(Session &s)
{
    std::vector<std::string> out;
    for (auto &f : s.files)
        if (f.fd >= 0) {
            ::close(f.fd);
            f.fd = -1;
        }
    s.fds = 0;
    s.made_in.reset();
    if (s.parent_fd < 0)
        return out;
    AsUser as(s.grant.uid, s.grant.gid, s.groups);
    if (s.in_place && (!s.kept_old || s.finishing_here)) {
        if (s.finishing_here) {
            // Its finish had started removing the replaced one: the new
            // one stays, whatever is left of the old one goes.
            if (int e = beneath::remove_tree(s.parent_fd, s.temp_name))
                out.push_back("cannot remove " + s.temp + ": " + std::strerror(e));
            out.push_back(s.dest + " stays in place here: its finish had begun");
            return out;
        }
        // In place here, but not everywhere: the destination was new.
        if (int e = beneath::remove_tree(s.parent_fd, s.dest_name))
            out.push_back("cannot remove " + s.dest + ": " + std::strerror(e));
        return out;
    }
    if (s.in_place &&
        renameat2(s.parent_fd, s.temp_name.c_str(), s.parent_fd, s.dest_name.c_str(), RENAME_EXCHANGE) != 0) {
        // The earlier one cannot go back: both stay, and the log says where.
        out.push_back("cannot put the earlier " + s.dest + " back from " + s.temp + ": " +
                      std::strerror(errno) + " (the new one stays in place)");
        return out;
    }
    if (int e = beneath::remove_tree(s.parent_fd, s.temp_name))
        out.push_back("cannot remove " + s.temp + ": " + std::strerror(e));
    return out;
}

std::string seconds(std::chrono::milliseconds ms)
{
    char b[32];
    snprintf(b, sizeof b, "%g s", ms.count() / 1000.0);
    return b;
}

} // namespace

Receiver::Receiver(event_base *base, prim::Engine &engine, Authorizer &auth, ReceiverConfig cfg, Logger log)
    : engine_(engine), auth_(auth), cfg_(std::move(cfg)), log_(std::move(log)),
      inbox_(std::make_shared<Inbox>(base))
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
    if (!timer_)
        throw std::runtime_error("cannot create the broadcast receiver's timer");
}

void Receiver::want_sweeps()
{
    if (timer_)
        arm_timer(timer_, std::chrono::milliseconds(250));
}

Receiver::~Receiver()
{
    if (timer_)
        event_free(timer_);
    timer_ = nullptr; // the aborts below arm no sweep
    std::vector<uint64_t> open;
    for (auto &kv : sessions_)
        open.push_back(kv.first);
    for (uint64_t sid : open)
        abort(sid, "the agent is stopping");
    // The removals run on the workers: wait for them, 2 s at most in all;
    // a worker stuck in the kernel is left to end alone (the journal has
    // its session for the next start).
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    auto left = [&] {
        return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                          until - std::chrono::steady_clock::now()));
    };
    for (auto &kv : draining_)
        if (!kv.second->worker->stop(left())) {
            log_.error("broadcast %s: the file system at %s still does not answer as the agent stops: %s is "
                       "removed when slurmd starts again",
                       session_hex(kv.first).c_str(), kv.second->parent.c_str(), kv.second->temp.c_str());
            kv.second->worker->abandon();
        }
    if (recovery_ && !recovery_->stop(left()))
        recovery_->abandon();
    inbox_->run(); // what the workers finished: logged, forgotten
    inbox_->close();
    for (auto &kv : draining_)
        kv.second->worker.reset();
    recovery_.reset();
}

void Receiver::on_chunk(const std::string &event, uint64_t sid, const net::DataRef &chunk, bool sealed,
                        Done done)
{
    // "bcast:<kind>:<sid>"
    size_t colon = event.rfind(':');
    if (colon == std::string::npos || colon < 6 || event.substr(colon + 1) != session_hex(sid))
        return done("malformed broadcast event " + event);
    std::string kind = event.substr(6, colon - 6);
    const std::string_view payload(chunk.ptr, chunk.len);
    try {
        if (kind == "open")
            return open(sid, payload, done);
        if (kind == "data")
            return data(sid, chunk, sealed, done);
        if (kind == "commit")
            return commit(sid, done);
        if (kind == "finish")
            return finish(sid, done);
        if (kind == "abort")
            return abort(sid, "aborted by the head of the broadcast", done);
        if (kind == "wait")
            return wait(sid, done);
        if (kind == "alive") { // unanswered: the head is there
            if (auto it = sessions_.find(sid); it != sessions_.end())
                it->second->last = std::chrono::steady_clock::now();
            return done("");
        }
    } catch (const std::exception &e) {
        return done(e.what()); // a second answer does nothing (Engine::ChunkDone)
    }
    done("unknown broadcast event " + event);
}

void Receiver::open(uint64_t sid, std::string_view payload, Done done)
{
    if (sessions_.count(sid) || draining_.count(sid))
        return done("broadcast " + session_hex(sid) + " is already open");
    auto req = std::make_shared<OpenRequest>(OpenRequest::decode(payload));
    if (sessions_.size() + draining_.size() >= kMaxSessions)
        return done(cfg_.node_name + " has " + std::to_string(sessions_.size() + draining_.size()) +
                    " broadcasts open or waiting for their file systems: no more until some end");
    auto s = std::make_shared<Session>();
    s->sid = sid;
    s->flags = req->flags;
    s->idle_limit =
        std::max(std::chrono::milliseconds(3 * uint64_t(req->timeout_ms)), std::chrono::milliseconds(30000));
    s->deadline = std::chrono::milliseconds(req->timeout_ms);
    try {
        s->worker = std::make_unique<FsWorker>(inbox_, cfg_.fs_hook);
    } catch (const std::exception &e) {
        return done(std::string("cannot start a worker thread: ") + e.what());
    }
    s->last = std::chrono::steady_clock::now();
    hold(s, std::move(done)); // answered once staged, or while the staging progresses
    sessions_.emplace(sid, s);
    want_sweeps();
    // The credential is checked on the worker: munge may keep it waiting
    // (a busy munged), and the loop answers heartbeats and every other
    // broadcast meanwhile.  It waits for munged three quarters of the step's
    // deadline (5 s at least), so that munged's last answer comes before
    // the sweep gives up on the step.
    const auto patience = net::Patience::worker_for(s->deadline * 3 / 4);
    s->worker->submit("checking the credential", [this, s, req, patience]() -> FsWorker::Done {
        std::string refused;
        Grant grant;
        try {
            grant = auth_.authorize(req->cred, patience);
        } catch (const std::exception &e) {
            refused = e.what();
        }
        return [this, s, req, refused, grant = std::move(grant)]() mutable {
            if (s->state == Session::ended)
                return; // aborted meanwhile: answered then
            if (!refused.empty()) {
                log_.error("broadcast %s: credential refused: %s", session_hex(s->sid).c_str(),
                           refused.c_str());
                return fail_open(s, "credential refused: " + refused);
            }
            if (!grant.nodes.contains(cfg_.self))
                return fail_open(s, "not a node of job " + std::to_string(grant.job_id));
            s->grant = std::move(grant);
            opened(s, req);
        };
    });
}

void Receiver::opened(const Ptr &s, std::shared_ptr<OpenRequest> req)
{
    s->dest = req->dest;
    if (s->dest.back() == '/')
        s->dest += "slurm_bcast_" + std::to_string(s->grant.job_id) + "." + std::to_string(s->grant.step_id) +
                   "_" + cfg_.node_name;
    s->parent = dirname_of(s->dest);
    s->temp = s->parent + "/." + basename_of(s->dest) + ".storm-" + session_hex(s->sid);
    s->dest_name = basename_of(s->dest);
    s->temp_name = "." + s->dest_name + ".storm-" + session_hex(s->sid);
    bool top_dir = req->entries.front().dir();
    uint64_t need = req->total_bytes();
    s->worker->submit("opening " + s->parent, [this, s, req, top_dir, need]() -> FsWorker::Done {
        std::string why;
        dev_t dev = 0;
        ino_t ino = 0;
        try {
            s->groups = s->grant.gids.empty() ? groups_of(s->grant.user, s->grant.gid) : s->grant.gids;
            FsWorker::progress();
            AsUser as(s->grant.uid, s->grant.gid, s->groups);
            why = look_up(*s, top_dir, need, dev, ino);
        } catch (const std::exception &e) {
            why = e.what();
        }
        return [this, s, req, why, dev, ino] {
            if (s->state == Session::ended)
                return; // aborted meanwhile: answered then
            if (!why.empty())
                return fail_open(s, why);
            // One broadcast at a time per destination (the same name in the
            // same directory, however it is spelled): a later one would swap
            // files under the earlier, whose abort could then undo a
            // broadcast that reported success.  The later one fails, clearly.
            for (const auto &[other, o] : sessions_)
                if (o != s && o->parent_dev == dev && o->parent_ino == ino && o->dest_name == s->dest_name)
                    return fail_open(s, s->dest + " is being written by broadcast " + session_hex(other) +
                                            " (job " + std::to_string(o->grant.job_id) + ") on " +
                                            cfg_.node_name + ": one broadcast at a time per destination");
            s->parent_dev = dev;
            s->parent_ino = ino;
            after_removals(s, req);
        };
    });
}

void Receiver::after_removals(const Ptr &s, std::shared_ptr<OpenRequest> req)
{
    if (s->state == Session::ended)
        return;
    s->blocker = 0;
    // A broadcast to the same destination that failed here and whose
    // removal still runs (a retry right after a failure): this one stages
    // once that removal ended, its answers given meanwhile as the removal
    // progresses; if the removal's file system does not answer (its step
    // at work is past its deadline), this one fails, saying so.
    for (const auto &[other, o] : draining_) {
        if (o->parent_dev != s->parent_dev || o->parent_ino != s->parent_ino || o->dest_name != s->dest_name)
            continue;
        if (o->stuck())
            return fail_open(s, s->dest + " is being removed by broadcast " + session_hex(other) + " (job " +
                                    std::to_string(o->grant.job_id) + ") on " + cfg_.node_name +
                                    ", whose file system at " + o->parent + " did not answer within " +
                                    seconds(o->deadline) +
                                    ": one broadcast at a time per destination; retry once it is removed "
                                    "(when that file system answers, or slurmd starts again)");
        log_.info("broadcast %s: %s waits for the removal of broadcast %s", session_hex(s->sid).c_str(),
                  s->dest.c_str(), session_hex(other).c_str());
        s->blocker = other;
        o->removed.push_back([this, s, req](const std::string &) { after_removals(s, req); });
        return;
    }
    stage(s, req);
}

void Receiver::hold(const Ptr &s, Done done)
{
    s->polls.emplace_back(std::chrono::steady_clock::now(), s->wait(std::move(done)));
}

void Receiver::settled(const Ptr &s)
{
    auto polls = std::move(s->polls);
    s->polls.clear();
    for (auto &p : polls)
        s->take(p.second)("");
}

void Receiver::fail_open(const Ptr &s, const std::string &why)
{
    s->state = Session::ended;
    sessions_.erase(s->sid);
    s->worker.reset();
    failed(s->sid, why);
    auto waiting = std::move(s->waiting);
    s->waiting.clear();
    s->polls.clear();
    for (auto &w : waiting)
        w.second(why);
}

void Receiver::failed(uint64_t sid, const std::string &why)
{
    if (failed_.emplace(sid, why).second)
        failed_order_.push_back(sid);
    while (failed_order_.size() > kMaxSessions) {
        failed_.erase(failed_order_.front());
        failed_order_.pop_front();
    }
}

void Receiver::stage(const Ptr &s, std::shared_ptr<OpenRequest> req)
{
    s->worker->submit("staging " + s->temp, [this, s, req, jdir = cfg_.journal_dir]() -> FsWorker::Done {
        std::string why;
        size_t incomplete = 0;
        try {
            // Journaled before anything is staged: a slurmd killed while it
            // stages (a large tree takes a while) removes the part it made
            // when it starts again.
            journal_add(jdir, *s);
            AsUser as(s->grant.uid, s->grant.gid, s->groups);
            why = stage_entries(*s, *req, incomplete);
        } catch (const std::exception &e) {
            why = e.what();
            bool removed = false;
            try {
                AsUser as(s->grant.uid, s->grant.gid, s->groups);
                removed = beneath::remove_tree(s->parent_fd, s->temp_name) == 0;
            } catch (const std::exception &) {
            }
            if (!removed) // the journal keeps it for the next start
                why += " (" + s->temp + " may be left until slurmd starts again)";
        }
        if (!why.empty() && why.find(" may be left until slurmd starts again") == std::string::npos)
            journal_remove(jdir, s->sid);
        return [this, s, req, why, incomplete] {
            if (s->state == Session::ended)
                return;
            if (!why.empty())
                return fail_open(s, why);
            s->state = Session::open;
            s->incomplete = incomplete;
            s->last = std::chrono::steady_clock::now();
            engine_.set_variable(var_prefix(s->sid) + "complete", incomplete == 0 ? 1 : 0);
            engine_.set_variable(var_prefix(s->sid) + "ready", kStaged);
            log_.info("broadcast %s: receiving %s (%zu entries, %" PRIu64 " bytes) for job %u, uid %u",
                      session_hex(s->sid).c_str(), s->dest.c_str(), req->entries.size(), req->total_bytes(),
                      s->grant.job_id, static_cast<unsigned>(s->grant.uid));
            if (gate_)
                gate_->opened(s->sid);
            settled(s);
        };
    });
}

void Receiver::wait(uint64_t sid, Done done)
{
    std::string why;
    Ptr s = session(sid, why);
    if (!s)
        return done(why);
    s->last = std::chrono::steady_clock::now();
    if (!s->error.empty())
        return done(s->error);
    if (s->state == Session::opening || s->state == Session::committing)
        return hold(s, std::move(done));
    done("");
}

void Receiver::data(uint64_t sid, const net::DataRef &payload, bool sealed, Done done)
{
    std::string why;
    Ptr s = session(sid, why);
    if (!s)
        return done(why);
    if (!s->error.empty())
        return done(s->error);
    if (s->state != Session::open)
        return done("data for " + s->dest +
                    (s->state == Session::opening ? " before it was opened" : " after its commit"));
    // Kept in its buffer where the engine gave an owner (no copy of every
    // chunk on every node), counted at that buffer's size.  A chunk of
    // less than half a buffer (storm-bcast -s) is copied out of it and
    // counted at its own size: kept, the 80 chunks of 16 KiB a slower node
    // had waiting for its writes counted 63 MiB and failed the broadcast as
    // "too slow" (1.3 MB of bytes).
    const bool keep = payload.owner != nullptr && payload.len >= net::kMcastChunkSize / 2;
    uint64_t n = keep ? std::max<uint64_t>(payload.len, net::kMcastChunkSize) : payload.len;
    if (s->queued + n > kMaxQueuedBytes || queued_ + n > kMaxQueuedBytesAll)
        return refuse(sid,
                      std::to_string((s->queued + n > kMaxQueuedBytes ? s->queued : queued_) >> 20) +
                          " MiB of chunks wait for the file system at " + s->parent + " on " +
                          cfg_.node_name +
                          (s->queued + n > kMaxQueuedBytes ? " for this broadcast" : " for all broadcasts") +
                          ": it is too slow (or does not answer)",
                      done);
    s->last = std::chrono::steady_clock::now();
    s->queued += n;
    queued_ += n;
    uint64_t w = s->wait(std::move(done));
    net::DataRef bytes = payload;
    if (!keep) {
        auto copy = std::make_shared<const std::string>(payload.ptr, payload.len);
        bytes = net::DataRef{copy, copy->data(), copy->size()};
    }
    bool submit;
    {
        std::lock_guard<std::mutex> l(s->chunks_mu);
        s->chunks.push_back(Session::Chunk{w, n, sealed, std::move(bytes)});
        submit = !s->chunk_job;
        s->chunk_job = true;
    }
    if (submit)
        s->worker->submit("writing " + s->temp, [this, s]() -> FsWorker::Done { return write_chunks(s); });
}

// On the worker: writes every chunk that came for the session since the
// last such job, under one switch to the user (not one a chunk: 14 system
// calls saved each), and answers them on the loop in order.
FsWorker::Done Receiver::write_chunks(const Ptr &s)
{
    std::vector<Session::Chunk> batch;
    {
        std::lock_guard<std::mutex> l(s->chunks_mu);
        batch.swap(s->chunks);
        s->chunk_job = false;
    }
    struct Written {
        uint64_t wait, n;
        std::string why;
        size_t files_done = 0;
    };
    std::vector<Written> out;
    out.reserve(batch.size());
    {
        std::optional<AsUser> as;
        for (auto &c : batch) {
            Written r{c.wait, c.n, "", 0};
            if (!s->cancelled) {
                try {
                    if (!as && s->failed.empty())
                        as.emplace(s->grant.uid, s->grant.gid, s->groups);
                    r.why =
                        write_chunk(*s, std::string_view(c.bytes.ptr, c.bytes.len), c.sealed, r.files_done);
                } catch (const std::exception &e) {
                    r.why = s->failed = e.what();
                }
            }
            out.push_back(std::move(r));
            FsWorker::progress();
        }
    }
    return [this, s, out = std::move(out)] {
        for (const auto &r : out) {
            s->queued -= r.n;
            queued_ -= r.n;
            if (s->state == Session::ended)
                continue;
            Done done = s->take(r.wait);
            if (!r.why.empty()) {
                if (s->error.empty())
                    s->error = r.why;
                done(r.why);
                continue;
            }
            // Each file completes once (its bytes continue it exactly:
            // write_chunk), so this stays exact.
            if (r.files_done > 0 && (s->incomplete -= r.files_done) == 0)
                engine_.set_variable(var_prefix(s->sid) + "complete", 1);
            done("");
        }
    };
}

Receiver::Ptr Receiver::session(uint64_t sid, std::string &why)
{
    auto it = sessions_.find(sid);
    if (it != sessions_.end())
        return it->second;
    auto f = failed_.find(sid);
    why = f != failed_.end()
              ? "broadcast " + session_hex(sid) + " failed on " + cfg_.node_name + ": " + f->second
              : "no broadcast " + session_hex(sid) + " is open on this node";
    return nullptr;
}

void Receiver::refuse(uint64_t sid, const std::string &why, Done done)
{
    abort(sid, why);
    done(why);
}

void Receiver::commit(uint64_t sid, Done done)
{
    std::string why;
    Ptr s = session(sid, why);
    if (!s)
        return done(why);
    if (s->state != Session::open || s->incomplete != 0 || !s->error.empty() ||
        engine_.variable(var_prefix(sid) + "commit") != 1)
        return refuse(sid, "commit of " + s->dest + " before every node confirmed every byte", done);
    s->state = Session::committing;
    s->last = std::chrono::steady_clock::now();
    hold(s, std::move(done)); // answered once in place, or while the commit progresses
    s->worker->submit("committing " + s->dest, [this, s]() -> FsWorker::Done {
        std::string why;
        try {
            AsUser as(s->grant.uid, s->grant.gid, s->groups);
            why = commit_entries(*s);
        } catch (const std::exception &e) {
            why = e.what();
        }
        return [this, s, why] {
            if (s->state == Session::ended)
                return;
            if (!why.empty())
                return abort(s->sid, why); // answers the commit with why
            s->state = Session::committed;
            s->last = std::chrono::steady_clock::now();
            engine_.set_variable(var_prefix(s->sid) + "ready", kPlaced);
            settled(s);
        };
    });
}

void Receiver::finish(uint64_t sid, Done done)
{
    std::string why;
    Ptr s = session(sid, why);
    if (!s)
        return done(why);
    if (s->state != Session::committed)
        return refuse(sid, "finish of " + s->dest + " before its commit", done);
    s->state = Session::finishing;
    s->last = std::chrono::steady_clock::now();
    uint64_t w = s->wait(std::move(done));
    s->worker->submit(
        "removing the replaced " + s->dest, [this, s, w, jdir = cfg_.journal_dir]() -> FsWorker::Done {
            int e = 0;
            if (s->kept_old) {
                s->finishing_here = true;
                try {
                    AsUser as(s->grant.uid, s->grant.gid, s->groups);
                    e = beneath::remove_tree(s->parent_fd, s->temp_name);
                } catch (const std::system_error &x) {
                    e = x.code().value();
                }
            }
            journal_remove(jdir, s->sid);
            return [this, s, w, e] {
                if (e)
                    log_.error("broadcast %s: cannot remove the replaced %s (now %s): %s",
                               session_hex(s->sid).c_str(), s->dest.c_str(), s->temp.c_str(),
                               std::strerror(e));
                if (s->state == Session::ended)
                    return;
                Done done = s->take(w);
                s->state = Session::ended;
                engine_.erase_variables(var_prefix(s->sid));
                log_.info("broadcast %s: %s in place", session_hex(s->sid).c_str(), s->dest.c_str());
                sessions_.erase(s->sid);
                s->worker.reset();
                if (gate_)
                    gate_->ended(s->sid, "");
                done("");
            };
        });
}

void Receiver::abort(uint64_t sid, const std::string &why, Done removed)
{
    auto it = sessions_.find(sid);
    if (it == sessions_.end()) {
        if (!removed)
            return;
        auto d = draining_.find(sid);
        if (d != draining_.end() && !d->second->overdue)
            d->second->removed.push_back(std::move(removed));
        else
            removed("");
        return;
    }
    Ptr s = it->second;
    sessions_.erase(it);
    log_.info("broadcast %s: %s not kept: %s", session_hex(sid).c_str(), s->dest.c_str(), why.c_str());
    s->state = Session::ended;
    s->cancelled = true;
    if (s->error.empty())
        s->error = why;
    failed(sid, why);
    auto waiting = std::move(s->waiting);
    s->waiting.clear();
    s->polls.clear();
    for (auto &w : waiting)
        w.second(why);
    engine_.erase_variables(var_prefix(sid));
    if (gate_)
        gate_->ended(sid, why);
    if (removed)
        s->removed.push_back(std::move(removed));
    draining_.emplace(sid, s);
    want_sweeps();
    s->worker->submit("removing " + s->temp, [this, s, jdir = cfg_.journal_dir]() -> FsWorker::Done {
        std::vector<std::string> said;
        try {
            said = discard(*s);
        } catch (const std::exception &e) {
            said.push_back(e.what());
        }
        journal_remove(jdir, s->sid);
        return [this, s, said] {
            for (const auto &m : said)
                log_.error("broadcast %s: %s", session_hex(s->sid).c_str(), m.c_str());
            drained(s);
        };
    });
}

void Receiver::drained(const Ptr &s)
{
    if (s->overdue)
        log_.info("broadcast %s: %s removed at last", session_hex(s->sid).c_str(), s->temp.c_str());
    draining_.erase(s->sid);
    s->worker.reset();
    auto removed = std::move(s->removed);
    s->removed.clear();
    for (auto &d : removed)
        d("");
}

void Receiver::sweep()
{
    auto now = std::chrono::steady_clock::now();
    // What stopped answering a failing session's own step: munged (the
    // credential is checked before the parent is known) or the file system
    // at its parent.  Only those failures, this node's own, are logged
    // here: not one waiting on another session's removal (that one is
    // logged below) nor one whose head fell silent.
    enum class Silent { none, munged, file_system };
    struct Failing {
        uint64_t sid;
        Silent silent;
        std::string why;
    };
    std::vector<Failing> failing;
    for (auto &[sid, s] : sessions_) {
        std::string what;
        auto b = s->blocker ? draining_.find(s->blocker) : draining_.end();
        if (b != draining_.end() && b->second->stuck())
            failing.push_back({sid, Silent::none,
                               s->dest + " is being removed by broadcast " + session_hex(s->blocker) +
                                   " on " + cfg_.node_name + ", whose file system at " + s->parent +
                                   " stopped answering: retry once it is removed"});
        else if (s->stuck(&what)) {
            Silent silent = s->parent.empty() ? Silent::munged : Silent::file_system;
            failing.push_back(
                {sid, silent,
                 (silent == Silent::munged ? std::string("munged") : "the file system at " + s->parent) +
                     " did not answer within " + seconds(s->deadline) + " on " + cfg_.node_name + " (while " +
                     what + ")"});
        } else if (now - s->last > s->idle_limit && s->waiting.empty())
            failing.push_back(
                {sid, Silent::none, "no word from the head of the broadcast (it or its client died)"});
    }
    for (auto &f : failing) {
        if (f.silent != Silent::none)
            log_.error("broadcast %s: %s", session_hex(f.sid).c_str(), f.why.c_str());
        abort(f.sid, f.why);
    }
    // The staging or commit at work progresses (its current step is under
    // half its deadline): the answers that waited half a deadline say so,
    // and the head asks again (protocol.hpp, "ready").  One that stopped
    // progressing is answered by its deadline above, with the reason.
    for (auto &[sid, s] : sessions_) {
        if (s->polls.empty() || (s->worker && s->worker->busy_for() >= s->deadline / 2))
            continue;
        auto polls = std::move(s->polls);
        s->polls.clear();
        for (auto &p : polls)
            if (now - p.first >= s->deadline / 2)
                s->take(p.second)("");
            else
                s->polls.push_back(p);
    }
    // A removal stuck behind a step that never ended: the head hears the
    // abort was taken (the broadcast failed anyway); the removal runs if
    // the file system answers, else at the next start (the journal).
    for (auto &[sid, s] : draining_) {
        std::string what;
        if (!s->overdue && s->stuck(&what)) {
            s->overdue = true;
            log_.error("broadcast %s: %s is not removed yet: the file system at %s did not answer within %s "
                       "(while %s); it is removed once it answers, or when slurmd starts again",
                       session_hex(sid).c_str(), s->temp.c_str(), s->parent.c_str(),
                       seconds(s->deadline).c_str(), what.c_str());
            auto removed = std::move(s->removed);
            s->removed.clear();
            for (auto &d : removed)
                d("");
        }
    }
    if (gate_ && ++ticks_ % 4 == 0)
        gate_->sweep();
    if (sessions_.empty() && draining_.empty() && (!gate_ || gate_->idle()))
        event_del(timer_); // until the next session or removal
}

void Receiver::recover()
{
    if (cfg_.journal_dir.empty())
        return;
    // The journal is root's, in slurmd's spool: read here.  What it names
    // lies in the users' file systems: removed on a worker.
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
    struct Left {
        std::string entry, temp;
        uid_t uid;
        gid_t gid;
        std::vector<gid_t> groups;
    };
    std::vector<Left> left;
    for (const auto &n : names) {
        std::string path = cfg_.journal_dir + "/" + n;
        std::ifstream in(path);
        Left l{path, "", 0, 0, {}};
        size_t ng = 0;
        if (in >> l.uid >> l.gid >> ng && ng < 65536) {
            l.groups.resize(ng);
            for (auto &g : l.groups)
                in >> g;
            in >> std::ws;
            std::getline(in, l.temp);
        }
        if (in && l.temp.size() > 1 && l.temp[0] == '/' && l.temp.find("/.") != std::string::npos &&
            l.temp.find(".storm-") != std::string::npos) {
            left.push_back(std::move(l));
        } else {
            log_.error("ignoring unreadable broadcast journal entry %s", path.c_str());
            unlink(path.c_str());
        }
    }
    if (left.empty())
        return;
    recovery_ = std::make_unique<FsWorker>(inbox_, cfg_.fs_hook);
    recovering_ = true;
    recovery_->submit("removing what broadcasts left", [this, left]() -> FsWorker::Done {
        std::vector<std::pair<bool, std::string>> said; // (an error, the message)
        for (const auto &l : left) {
            FsWorker::progress();
            try {
                AsUser as(l.uid, l.gid, l.groups);
                // Staged files of a broadcast that did not commit, or what a
                // committed one replaced: either way, not wanted.  Nothing
                // there: it committed here over nothing.
                int at = ::open(dirname_of(l.temp).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
                struct stat st;
                if (at >= 0 && (fstatat(at, basename_of(l.temp).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ||
                                errno != ENOENT)) {
                    int e = beneath::remove_tree(at, basename_of(l.temp));
                    if (e == 0)
                        said.emplace_back(false,
                                          "removed " + l.temp + ", left by a broadcast that did not finish");
                    else
                        said.emplace_back(true, "cannot remove " + l.temp +
                                                    ", left by a broadcast: " + std::strerror(e));
                }
                if (at >= 0)
                    ::close(at);
            } catch (const std::exception &e) {
                said.emplace_back(true, "cannot remove " + l.temp + ", left by a broadcast: " + e.what());
            }
            unlink(l.entry.c_str());
        }
        return [this, said] {
            for (const auto &[error, m] : said)
                if (error)
                    log_.error("%s", m.c_str());
                else
                    log_.info("%s", m.c_str());
            recovering_ = false;
            recovery_.reset();
        };
    });
}

} // namespace storm::bcast
