#include "lib/bcast/client.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include <zlib.h>

#include "lib/net/connection.hpp"

namespace storm::bcast {

namespace {

std::string sys(const std::string &what, int e) { return what + ": " + std::strerror(e); }

Entry entry_of(const std::string &rel, const struct stat &st)
{
    Entry e;
    e.path = rel;
    e.dir = S_ISDIR(st.st_mode);
    e.mode = st.st_mode & 07777;
    e.size = e.dir ? 0 : static_cast<uint64_t>(st.st_size);
    e.atime = st.st_atime;
    e.mtime = st.st_mtime;
    return e;
}

void check_readable(const std::string &path)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throw BcastError(sys("cannot read " + path, errno));
    ::close(fd);
}

void walk(const std::string &root, const std::string &rel, Source &src)
{
    std::string dir = rel.empty() ? root : root + "/" + rel;
    DIR *d = opendir(dir.c_str());
    if (!d)
        throw BcastError(sys("cannot read directory " + dir, errno));
    std::vector<std::string> names;
    while (dirent *e = readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
            names.push_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto &n : names) {
        std::string r = rel.empty() ? n : rel + "/" + n;
        std::string p = root + "/" + r;
        struct stat st;
        if (lstat(p.c_str(), &st) != 0)
            throw BcastError(sys("cannot read " + p, errno));
        if (S_ISLNK(st.st_mode) && (stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)))
            throw BcastError(p + " is a symbolic link to something other than a file");
        if (S_ISDIR(st.st_mode)) {
            src.entries.push_back(entry_of(r, st));
            src.paths.emplace_back();
            walk(root, r, src);
        } else if (S_ISREG(st.st_mode)) {
            check_readable(p);
            src.entries.push_back(entry_of(r, st));
            src.paths.push_back(p);
        } else {
            throw BcastError(p + " is neither a file nor a directory");
        }
    }
}

// SIGPIPE blocked in this thread while a broadcast runs: a write to an
// agent that died must fail with EPIPE, not kill srun.
class NoSigpipe {
public:
    NoSigpipe()
    {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &s, &old_);
    }
    ~NoSigpipe()
    {
        // Discard a SIGPIPE raised meanwhile, then restore.
        sigset_t pending;
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE)) {
            sigset_t s;
            sigemptyset(&s);
            sigaddset(&s, SIGPIPE);
            timespec zero{0, 0};
            sigtimedwait(&s, nullptr, &zero);
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }

private:
    sigset_t old_;
};

} // namespace

uint64_t Source::total_bytes() const
{
    uint64_t t = 0;
    for (const auto &e : entries)
        t += e.size;
    return t;
}

Source scan(const std::string &path)
{
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
        throw BcastError(sys("cannot read " + path, errno));
    Source src;
    if (S_ISREG(st.st_mode)) {
        check_readable(path);
        src.entries.push_back(entry_of("", st));
        src.paths.push_back(path);
    } else if (S_ISDIR(st.st_mode)) {
        src.entries.push_back(entry_of("", st));
        src.paths.emplace_back();
        walk(path, "", src);
    } else {
        throw BcastError(path + " is neither a file nor a directory");
    }
    return src;
}

Source scan_files(const std::vector<std::string> &files, uint32_t dir_mode)
{
    Source src;
    Entry top;
    top.dir = true;
    top.mode = dir_mode;
    top.atime = top.mtime = time(nullptr);
    src.entries.push_back(top);
    src.paths.emplace_back();
    std::set<std::string> names;
    for (const auto &f : files) {
        struct stat st;
        if (stat(f.c_str(), &st) != 0)
            throw BcastError(sys("cannot read " + f, errno));
        if (!S_ISREG(st.st_mode))
            throw BcastError(f + " is not a file");
        check_readable(f);
        std::string base = f.substr(f.rfind('/') + 1);
        if (!names.insert(base).second)
            continue;
        src.entries.push_back(entry_of(base, st));
        src.paths.push_back(f);
    }
    return src;
}

namespace {

struct Run {
    const ClientOptions &o;
    const Source &src;
    event_base *base = nullptr;
    std::shared_ptr<net::Connection> conn;
    event *silence = nullptr;
    bool finished = false;
    std::string error;
    // sending
    size_t file = 0; // entry being read
    uint64_t offset = 0;
    int fd = -1;
    uint64_t seq = 0;
    std::deque<uint64_t> inflight; // bytes of each unanswered chunk, in order
    uint64_t done_bytes = 0, total = 0;
    bool close_sent = false;
    unsigned window = 0;

    Run(const ClientOptions &opts, const Source &s) : o(opts), src(s) {}
    ~Run()
    {
        if (fd >= 0)
            ::close(fd);
        if (silence)
            event_free(silence);
        if (conn)
            conn->close("client done");
        conn.reset();
        if (base)
            event_base_free(base);
    }

    void stop(std::string why = {})
    {
        if (finished)
            return;
        finished = true;
        error = std::move(why);
        event_base_loopbreak(base);
    }

    void arm()
    {
        auto ms = std::max<long long>(3 * o.timeout.count(), 1000);
        timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
        evtimer_add(silence, &tv);
    }

    // The next chunk of the current file, or false at the end of all files.
    bool next_chunk(ChunkHeader &h, std::string &bytes)
    {
        while (file < src.entries.size() &&
               (src.entries[file].dir || offset >= src.entries[file].size)) {
            if (fd >= 0) {
                ::close(fd);
                fd = -1;
            }
            ++file;
            offset = 0;
        }
        if (file >= src.entries.size())
            return false;
        const Entry &e = src.entries[file];
        const std::string &path = src.paths[file];
        if (fd < 0) {
            fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                throw BcastError(sys("cannot read " + path, errno));
            posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        }
        size_t len = static_cast<size_t>(std::min<uint64_t>(o.chunk_size, e.size - offset));
        std::string raw(len, '\0');
        size_t got = 0;
        while (got < len) {
            ssize_t n = pread(fd, raw.data() + got, len - got, static_cast<off_t>(offset + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                throw BcastError(sys("cannot read " + path, errno));
            if (n == 0)
                throw BcastError(path + " shrank while being sent");
            got += static_cast<size_t>(n);
        }
        h.entry = static_cast<uint32_t>(file);
        h.offset = offset;
        h.raw_len = static_cast<uint32_t>(len);
        h.crc = crc32(raw);
        h.compressed = false;
        offset += len;
        if (o.compress) {
            uLongf clen = compressBound(len);
            std::string c(clen, '\0');
            if (compress2(reinterpret_cast<Bytef *>(c.data()), &clen, reinterpret_cast<const Bytef *>(raw.data()),
                          len, 1) == Z_OK &&
                clen < len) {
                c.resize(clen);
                h.compressed = true;
                bytes = std::move(c);
                return true;
            }
        }
        bytes = std::move(raw);
        return true;
    }

    void pump()
    {
        while (!finished && inflight.size() < window) {
            ChunkHeader h;
            std::string bytes;
            if (!next_chunk(h, bytes)) {
                if (inflight.empty() && !close_sent) {
                    close_sent = true;
                    conn->send(net::MsgType::bcast_close, 0, std::string_view());
                }
                return;
            }
            net::Writer w;
            h.encode(w);
            std::string payload = w.take();
            payload += bytes;
            conn->send(net::MsgType::bcast_data, seq++, payload);
            inflight.push_back(h.raw_len);
        }
    }

    void on_reply(const net::FrameHeader &, std::string_view payload)
    {
        Reply r = Reply::decode(payload);
        arm();
        switch (r.kind) {
        case Reply::opened:
            pump();
            break;
        case Reply::done:
            if (inflight.empty())
                throw net::FrameError("answer for a chunk never sent");
            done_bytes += inflight.front();
            inflight.pop_front();
            if (o.progress)
                o.progress(done_bytes, total);
            pump();
            break;
        case Reply::committed:
            stop();
            break;
        case Reply::failed:
            stop(r.message.empty() ? "the broadcast failed" : r.message);
            break;
        }
    }
};

} // namespace

void broadcast(net::Authenticator &auth, const ClientOptions &o, const Source &src)
{
    if (src.entries.empty() || src.entries.size() != src.paths.size())
        throw BcastError("nothing to broadcast");
    if (o.chunk_size == 0 || o.chunk_size > kMaxChunk)
        throw BcastError("chunk size must be 1 byte to " + std::to_string(kMaxChunk >> 20) + " MiB");
    NoSigpipe guard;
    OpenRequest req;
    req.cred = o.cred;
    req.dest = o.dest;
    req.flags = o.flags;
    req.fanout = o.fanout;
    req.timeout_ms = static_cast<uint32_t>(o.timeout.count());
    req.entries = src.entries;
    std::string open = req.encode();

    Run run(o, src);
    run.total = src.total_bytes();
    run.window = o.window ? o.window : std::max<unsigned>(2, (16u << 20) / o.chunk_size);
    run.base = event_base_new();
    if (!run.base)
        throw BcastError("cannot create an event loop");
    run.silence = evtimer_new(
        run.base,
        [](evutil_socket_t, short, void *arg) {
            auto *r = static_cast<Run *>(arg);
            r->stop("no answer from the Storm agent for " + std::to_string(3 * r->o.timeout.count() / 1000) +
                    " s");
        },
        &run);
    try {
        run.conn = net::Connection::connect(run.base, o.agent, o.agent_index, auth);
    } catch (const std::exception &e) {
        throw BcastError(std::string("cannot connect to the Storm agent: ") + e.what());
    }
    run.conn->on_frame([&run](net::Connection &, const net::FrameHeader &h, std::string_view p) {
        if (h.type != net::MsgType::bcast_reply)
            throw net::FrameError("unexpected frame from the agent");
        try {
            run.on_reply(h, p);
        } catch (const BcastError &e) {
            run.stop(e.what());
        }
    });
    run.conn->on_close([&run](net::Connection &, const std::string &why) {
        run.stop("lost the connection to the Storm agent: " + why);
    });
    run.conn->send(net::MsgType::bcast_open, 0, open);
    run.arm();
    event_base_dispatch(run.base);
    if (!run.finished)
        throw BcastError("the broadcast stopped unexpectedly");
    if (!run.error.empty())
        throw BcastError(run.error);
}

} // namespace storm::bcast
