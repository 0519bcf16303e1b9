#include "launch_bcast/client.hpp"
#include "launch_bcast/send_window.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/common/signals.hpp"
#include "lib/common/stop_thread.hpp"
#include "lib/common/timeval.hpp"
#include "lib/net/connection.hpp"
#include "lib/common/thread_name.hpp"

namespace storm::bcast {

namespace {

std::string sys(const std::string &what, int e) { return what + ": " + std::strerror(e); }

Entry entry_of(const std::string &rel, const struct stat &st)
{
    Entry e;
    e.path = rel;
    e.kind = S_ISDIR(st.st_mode) ? Entry::directory : Entry::file;
    e.mode = st.st_mode & 07777;
    e.size = e.dir() ? 0 : static_cast<uint64_t>(st.st_size);
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

const char *special_kind(mode_t m)
{
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    return "of an unknown kind";
}

// The walk of a directory tree: what lstat finds, never following a link.
struct Walk {
    std::string root;
    Source &src;
    std::map<std::pair<dev_t, ino_t>, uint32_t> inodes; // files with several links: their first entry
    std::vector<std::string> refused;                   // special files, "PATH (a FIFO)"

    void dir(const std::string &rel);
    void add(const std::string &rel, const std::string &p, const struct stat &st);
};

void Walk::add(const std::string &rel, const std::string &p, const struct stat &st)
{
    if (S_ISLNK(st.st_mode)) {
        Entry e;
        e.path = rel;
        e.kind = Entry::symlink;
        e.atime = st.st_atime;
        e.mtime = st.st_mtime;
        std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
        ssize_t n = readlink(p.c_str(), target.data(), target.size());
        if (n < 0)
            throw BcastError(sys("cannot read the symbolic link " + p, errno));
        if (static_cast<size_t>(n) >= target.size())
            throw BcastError(p + " changed while being read");
        target.resize(static_cast<size_t>(n));
        e.target = std::move(target);
        src.add_other(std::move(e));
    } else if (S_ISDIR(st.st_mode)) {
        src.add_other(entry_of(rel, st));
        dir(rel);
    } else if (S_ISREG(st.st_mode)) {
        if (st.st_nlink > 1) {
            auto [it, first] = inodes.emplace(std::make_pair(st.st_dev, st.st_ino),
                                              static_cast<uint32_t>(src.entries.size()));
            if (!first) {
                Entry e;
                e.path = rel;
                e.kind = Entry::hardlink;
                e.link = it->second;
                src.add_other(std::move(e));
                return;
            }
        }
        check_readable(p);
        src.add_file(entry_of(rel, st), p, st);
    } else {
        refused.push_back(p + " (" + special_kind(st.st_mode) + ")");
    }
}

void Walk::dir(const std::string &rel)
{
    std::string d = rel.empty() ? root : root + "/" + rel;
    DIR *dp = opendir(d.c_str());
    if (!dp)
        throw BcastError(sys("cannot read directory " + d, errno));
    std::vector<std::string> names;
    while (dirent *e = readdir(dp))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
            names.push_back(e->d_name);
    closedir(dp);
    std::sort(names.begin(), names.end());
    for (const auto &n : names) {
        std::string r = rel.empty() ? n : rel + "/" + n;
        std::string p = root + "/" + r;
        struct stat st;
        if (lstat(p.c_str(), &st) != 0)
            throw BcastError(sys("cannot read " + p, errno));
        add(r, p, st);
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

void Source::add_file(Entry e, std::string path, const struct stat &st)
{
    stamps.resize(entries.size());
    stamps.push_back(FileStamp::of(st));
    entries.push_back(std::move(e));
    paths.push_back(std::move(path));
}

void Source::add_other(Entry e)
{
    entries.push_back(std::move(e));
    paths.emplace_back();
}

Source scan(const std::string &path)
{
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
        throw BcastError(sys("cannot read " + path, errno));
    Source src;
    if (S_ISREG(st.st_mode)) {
        check_readable(path);
        src.add_file(entry_of("", st), path, st);
    } else if (S_ISDIR(st.st_mode)) {
        src.add_other(entry_of("", st));
        Walk w{path, src, {}, {}};
        w.dir("");
        if (!w.refused.empty()) {
            std::string list;
            for (size_t i = 0; i < w.refused.size() && i < 10; ++i)
                list += (i ? ", " : "") + w.refused[i];
            if (w.refused.size() > 10)
                list += " and " + std::to_string(w.refused.size() - 10) + " more";
            throw BcastError(path + " holds special files, which are not sent: " + list);
        }
    } else {
        throw BcastError(path + " is neither a file nor a directory");
    }
    return src;
}

namespace {

// Reads, checksums and compresses the chunks ahead of the sender, on its
// own thread: up to `depth` chunks wait ready (double buffering and more),
// so reading the source overlaps sending.  fd() becomes readable whenever
// a chunk is ready or reading ended.
class ChunkReader {
public:
    struct Chunk {
        std::shared_ptr<std::string> frame; // the data frame's payload: header and bytes
        uint32_t raw_len = 0;               // bytes of the files it carries
    };

    ChunkReader(const Source &src, uint32_t chunk, Codec compress, unsigned depth)
        : src_(src), chunk_(chunk), compress_(compress), depth_(depth)
    {
        if (pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) != 0)
            throw BcastError(sys("pipe", errno));
        thread_ = std::thread([this] {
            name_thread("storm-read");
            // Signals are the process's business (srun's signal thread),
            // never this reader's.
            block_all_signals();
            run();
        });
    }
    ~ChunkReader()
    {
        stop_thread(m_, stop_, space_, thread_);
        ::close(pipe_[0]);
        ::close(pipe_[1]);
    }
    int fd() const { return pipe_[0]; }

    // A ready chunk, or nothing (not ready yet, or the end: see end()).
    // Throws BcastError if reading failed.
    std::optional<Chunk> take()
    {
        char drain[64];
        while (read(pipe_[0], drain, sizeof drain) > 0) {
        }
        std::lock_guard<std::mutex> l(m_);
        if (!ready_.empty()) {
            Chunk c = std::move(ready_.front());
            ready_.pop_front();
            space_.notify_one();
            return c;
        }
        if (!error_.empty())
            throw BcastError(error_);
        return std::nullopt;
    }
    bool end()
    {
        std::lock_guard<std::mutex> l(m_);
        return done_ && ready_.empty() && error_.empty();
    }

private:
    void push(Chunk c)
    {
        std::unique_lock<std::mutex> l(m_);
        space_.wait(l, [this] { return stop_ || ready_.size() < depth_; });
        if (stop_)
            return;
        ready_.push_back(std::move(c));
        l.unlock();
        (void)!write(pipe_[1], "c", 1);
    }
    void finish(std::string error)
    {
        {
            std::lock_guard<std::mutex> l(m_);
            done_ = true;
            error_ = std::move(error);
        }
        (void)!write(pipe_[1], "e", 1);
    }
    void run()
    {
        try {
            if (src_.entries.front().dir()) {
                read_packs();
            } else if (src_.entries.front().size > 0) {
                read_file(0);
            }
            finish("");
        } catch (const BcastError &e) {
            finish(e.what());
        } catch (const std::exception &e) {
            finish(e.what());
        }
    }
    bool stopping()
    {
        std::lock_guard<std::mutex> l(m_);
        return stop_;
    }
    // Reads `len` bytes of `path` at `offset` into out[at, at + len).
    static void read_exactly(int fd, const std::string &path, uint64_t offset, char *out, size_t len)
    {
        size_t got = 0;
        while (got < len) {
            ssize_t n = pread(fd, out + got, len - got, static_cast<off_t>(offset + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                throw BcastError(sys("cannot read " + path, errno));
            if (n == 0)
                throw BcastError(path + " shrank while being sent");
            got += static_cast<size_t>(n);
        }
    }
    // The listed stamp of entry i, or nullptr where none is known.
    const FileStamp *stamp_of(uint32_t i) const
    {
        return i < src_.stamps.size() && src_.stamps[i].known ? &src_.stamps[i] : nullptr;
    }
    // Opens entry i's file, which must be the file listed, as listed.
    int open_source(uint32_t i) const
    {
        const std::string &path = src_.paths[i];
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            throw BcastError(sys("cannot read " + path, errno));
        std::unique_ptr<int, void (*)(int *)> closer(&fd, [](int *f) { ::close(*f); });
        if (const FileStamp *listed = stamp_of(i)) {
            struct stat st;
            if (fstat(fd, &st) != 0)
                throw BcastError(sys("cannot read " + path, errno));
            if (st.st_dev != listed->dev || st.st_ino != listed->ino)
                throw BcastError(path + " was replaced by another file after it was listed");
            if (listed->content_differs(st))
                throw BcastError(path + " changed after it was listed" + sizes(listed->size, st.st_size));
        }
        closer.release();
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        return fd;
    }
    // Entry i's bytes have all been read from fd: the file must not have
    // changed since it was listed.
    void check_sent(uint32_t i, int fd) const
    {
        const FileStamp *listed = stamp_of(i);
        if (!listed)
            return;
        struct stat st;
        if (fstat(fd, &st) != 0)
            throw BcastError(sys("cannot read " + src_.paths[i], errno));
        if (listed->content_differs(st))
            throw BcastError(src_.paths[i] + " changed while being sent" + sizes(listed->size, st.st_size));
    }
    static std::string sizes(off_t listed, off_t now)
    {
        if (listed == now)
            return " (it was modified)";
        return " (" + std::to_string(listed) + " bytes when listed, " + std::to_string(now) + " now)";
    }
    // Checksums and compresses `raw`, and queues the chunk; `bytes` of
    // the files it carries (the progress it makes).
    void emit(ChunkHeader h, const std::string &raw, uint32_t bytes)
    {
        h.raw_len = static_cast<uint32_t>(raw.size());
        h.crc = crc32(raw);
        std::string_view body = raw;
        std::string packed;
        if (compress(compress_, raw, packed)) {
            h.codec = compress_;
            body = packed;
        }
        net::Writer w;
        h.encode(w);
        auto frame = std::make_shared<std::string>(w.take());
        frame->append(body.data(), body.size());
        push(Chunk{std::move(frame), bytes});
    }
    // A file broadcast: the file (entry i) in chunks of its own.
    void read_file(uint32_t i)
    {
        const std::string &path = src_.paths[i];
        const uint64_t size = src_.entries[i].size;
        int fd = open_source(i);
        std::unique_ptr<int, void (*)(int *)> closer(&fd, [](int *f) { ::close(*f); });
        std::string raw;
        for (uint64_t offset = 0; offset < size && !stopping();) {
            size_t len = static_cast<size_t>(std::min<uint64_t>(chunk_, size - offset));
            raw.resize(len);
            read_exactly(fd, path, offset, raw.data(), len);
            ChunkHeader h;
            h.offset = offset;
            offset += len;
            if (offset == size)
                check_sent(i, fd);
            emit(h, raw, static_cast<uint32_t>(len));
        }
    }
    // A directory broadcast: every file's bytes as records packed into
    // chunks (PackPlan), a file's descriptor open from its first record
    // to its last.
    void read_packs()
    {
        PackPlan plan(src_.entries, chunk_);
        int fd = -1;
        uint32_t open_entry = 0;
        std::unique_ptr<int, void (*)(int *)> closer(&fd, [](int *f) {
            if (*f >= 0)
                ::close(*f);
        });
        std::string raw;
        for (auto pieces = plan.next(); !pieces.empty() && !stopping(); pieces = plan.next()) {
            raw.clear();
            uint32_t bytes = 0;
            for (const auto &p : pieces) {
                const std::string &path = src_.paths[p.entry];
                if (fd < 0 || open_entry != p.entry) {
                    if (fd >= 0)
                        ::close(fd);
                    fd = -1;
                    fd = open_source(p.entry);
                    open_entry = p.entry;
                }
                encode_record_header(raw, p.entry, p.offset, p.len);
                size_t at = raw.size();
                raw.resize(at + p.len);
                read_exactly(fd, path, p.offset, raw.data() + at, p.len);
                if (p.offset + p.len == src_.entries[p.entry].size)
                    check_sent(p.entry, fd);
                bytes += p.len;
            }
            ChunkHeader h;
            h.packed = true;
            emit(h, raw, bytes);
        }
    }

    const Source &src_;
    uint32_t chunk_;
    Codec compress_;
    size_t depth_;
    int pipe_[2] = {-1, -1};
    std::thread thread_;
    std::mutex m_;
    std::condition_variable space_;
    std::deque<Chunk> ready_;
    bool stop_ = false, done_ = false;
    std::string error_;
};

struct Run {
    const ClientOptions o;
    const Source src;
    event_base *base = nullptr;
    std::shared_ptr<net::Connection> conn;
    event *silence = nullptr;
    bool finished = false;
    std::string error;
    // sending
    std::unique_ptr<ChunkReader> reader;
    event *ready = nullptr; // a chunk is ready
    uint64_t seq = 0;
    struct Unanswered {
        uint64_t bytes;
        SendWindow::clock::time_point sent;
    };
    std::deque<Unanswered> inflight; // each unanswered chunk, in order
    uint64_t done_bytes = 0, total = 0;
    bool close_sent = false, opened = false;
    // open(): the loop returns once the nodes opened.  Chunks leave from
    // the start all the same: the head holds those that come before every
    // node opened.
    bool pause_at_open = true;
    uint64_t early_bytes = 0; // of the chunk frames sent before the nodes opened (kEarlyBytes)
    uint64_t wire_bytes = 0;  // of all the chunk frames sent
    uint64_t sid = 0;
    std::optional<SendWindow> window;
    // cancel(): any thread (or a signal handler) writes, the loop stops
    int cancel_pipe[2] = {-1, -1};
    event *cancelled = nullptr;

    Run(ClientOptions opts, Source s) : o(std::move(opts)), src(std::move(s)) {}
    ~Run()
    {
        if (cancelled)
            event_free(cancelled);
        for (int fd : cancel_pipe)
            if (fd >= 0)
                ::close(fd);
        if (ready)
            event_free(ready);
        reader.reset();
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
        timeval tv =
            to_timeval(std::max<std::chrono::milliseconds>(3 * o.timeout, std::chrono::milliseconds(1000)));
        evtimer_add(silence, &tv);
    }

    // Sends the ready chunks the window allows.  While the window is full
    // the reader's readiness is of no use (an answer calls pump() again),
    // so the loop stops listening to it: it is level-triggered, and would
    // otherwise run pump() over and over, a core's worth of CPU taken from
    // the node agents for as long as the network is the bottleneck.
    void pump()
    {
        while (!finished) {
            if (inflight.size() >= window->size() || (!opened && early_bytes >= kEarlyBytes)) {
                if (event_pending(ready, EV_READ, nullptr))
                    event_del(ready);
                return;
            }
            if (!event_pending(ready, EV_READ, nullptr))
                event_add(ready, nullptr);
            auto c = reader->take();
            if (!c) {
                if (reader->end() && inflight.empty() && !close_sent) {
                    close_sent = true;
                    if (o.phase)
                        o.phase("sent");
                    conn->send(kCloseFrame, 0, std::string_view());
                }
                return;
            }
            net::DataRef ref{c->frame, c->frame->data(), c->frame->size()};
            conn->send(kDataFrame, seq++, std::string_view(), ref);
            inflight.push_back({c->raw_len, SendWindow::clock::now()});
            wire_bytes += c->frame->size();
            if (!opened)
                early_bytes += c->frame->size();
        }
    }

    void on_reply(const net::FrameHeader &, std::string_view payload)
    {
        Reply r = Reply::decode(payload);
        arm();
        switch (r.kind) {
        case Reply::opened:
            if (opened)
                throw net::FrameError("a second open answer");
            opened = true;
            sid = r.value;
            if (o.phase)
                o.phase("opened");
            if (pause_at_open)
                event_base_loopbreak(base);
            else
                pump(); // it may have stopped at kEarlyBytes
            break;
        case Reply::done:
            if (inflight.empty())
                throw net::FrameError("answer for a chunk never sent");
            done_bytes += inflight.front().bytes;
            window->answered(inflight.front().sent, SendWindow::clock::now());
            inflight.pop_front();
            if (o.progress)
                o.progress(done_bytes, total);
            pump();
            break;
        case Reply::committed:
            if (o.phase)
                o.phase("committed");
            stop();
            break;
        case Reply::failed:
            stop(r.message.empty() ? "the broadcast failed" : r.message);
            break;
        case Reply::working: // the head is alive: arm() above
            break;
        }
    }

    // Runs the loop until the broadcast finished, or (pause_at_open) until
    // the nodes opened it; throws BcastError with the reason it failed.
    void dispatch()
    {
        NoSigpipe guard;
        if (!finished)
            event_base_dispatch(base);
        if (!finished && !(pause_at_open && opened))
            throw BcastError("the broadcast stopped unexpectedly");
        if (finished && !error.empty())
            throw BcastError(error);
    }
};

} // namespace

struct Broadcast::State : Run {
    using Run::Run;
};

Broadcast::Broadcast(net::Authenticator &auth, ClientOptions o, Source src)
{
    if (src.entries.empty() || src.entries.size() != src.paths.size())
        throw BcastError("nothing to broadcast");
    const uint32_t chunk = chunk_size_of(o);
    if (chunk > kMaxChunk)
        throw BcastError("chunk size must be 1 byte to " + std::to_string(kMaxChunk >> 20) + " MiB");
    if (src.entries.front().dir() && chunk <= PackRecord::kHeader)
        throw BcastError("a directory's chunks must exceed " + std::to_string(PackRecord::kHeader) +
                         " bytes (their records' headers)");
    NoSigpipe guard;
    OpenRequest req;
    req.cred = o.cred;
    req.dest = o.dest;
    req.flags = o.flags;
    req.fanout = o.fanout;
    req.timeout_ms = static_cast<uint32_t>(o.timeout.count());
    req.entries = src.entries;
    std::string open = req.encode();

    run_ = std::make_unique<State>(std::move(o), std::move(src));
    Run &run = *run_;
    run.total = run.src.total_bytes();
    // Up to 16 MiB worth unanswered, from 1 MiB worth, as fast as the
    // answers come (send_window.hpp); a window the caller set is where it
    // starts as well as its most.
    if (run.o.window)
        run.window.emplace(run.o.window, run.o.window, run.o.timeout);
    else
        run.window.emplace(std::max(2u, (16u << 20) / chunk), (1u << 20) / chunk, run.o.timeout);
    run.base = event_base_new();
    if (!run.base)
        throw BcastError("cannot create an event loop");
    run.silence = evtimer_new(
        run.base,
        [](evutil_socket_t, short, void *arg) {
            auto *r = static_cast<Run *>(arg);
            r->stop("no answer from the Storm agent on " + r->o.agent_name + " for " +
                    std::to_string(3 * r->o.timeout.count() / 1000) + " s");
        },
        &run);
    try {
        run.conn = net::Connection::connect(run.base, run.o.agent, run.o.agent_index, auth);
    } catch (const std::exception &e) {
        throw BcastError("cannot connect to the Storm agent on " + run.o.agent_name + ": " + e.what());
    }
    run.conn->on_frame([&run](net::Connection &, const net::FrameHeader &h, std::string_view p) {
        if (h.type != kReplyFrame)
            throw net::FrameError("unexpected frame from the agent");
        try {
            run.on_reply(h, p);
        } catch (const BcastError &e) {
            run.stop(e.what());
        }
    });
    run.conn->on_close([&run](net::Connection &, const std::string &why) {
        run.stop("lost the connection to the Storm agent on " + run.o.agent_name + ": " + why);
    });
    // Reading starts at once, while the nodes open their files.
    run.reader = std::make_unique<ChunkReader>(run.src, chunk, run.o.compress, 4);
    run.ready = event_new(
        run.base, run.reader->fd(), EV_READ | EV_PERSIST,
        [](evutil_socket_t, short, void *arg) {
            auto *r = static_cast<Run *>(arg);
            try {
                r->pump();
            } catch (const BcastError &e) {
                r->stop(e.what());
            }
        },
        &run);
    event_add(run.ready, nullptr);
    if (pipe2(run.cancel_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
        throw BcastError(sys("pipe", errno));
    run.cancelled = event_new(
        run.base, run.cancel_pipe[0], EV_READ,
        [](evutil_socket_t, short, void *arg) {
            auto *r = static_cast<Run *>(arg);
            // At once: the chunks queued towards the head would otherwise
            // go first, and the nodes would wait for them.
            r->stop("cancelled");
            if (r->conn)
                r->conn->reset("cancelled");
        },
        &run);
    event_add(run.cancelled, nullptr);
    run.conn->send(kOpenFrame, 0, open);
    run.arm();
}

Broadcast::~Broadcast() = default;

uint64_t Broadcast::open()
{
    if (!run_->opened)
        run_->dispatch();
    return run_->sid;
}

void Broadcast::finish()
{
    run_->pause_at_open = false;
    run_->pump();
    run_->dispatch();
}

uint64_t Broadcast::wire_bytes() const { return run_->wire_bytes; }

void Broadcast::cancel() noexcept { (void)!write(run_->cancel_pipe[1], "x", 1); }

uint64_t broadcast(net::Authenticator &auth, const ClientOptions &o, const Source &src)
{
    Broadcast b(auth, o, src);
    b.finish();
    return b.wire_bytes();
}

} // namespace storm::bcast
