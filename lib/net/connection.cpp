#include "lib/net/connection.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <system_error>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "lib/common/seconds.hpp"

namespace storm::net {
namespace {

constexpr size_t kMaxCredential = 4096;
constexpr uint32_t kNoIndex = UINT32_MAX;

// 128 random bits, as 32 hex digits (getrandom: unpredictable).
std::string make_nonce()
{
    unsigned char r[16];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = getrandom(r + got, sizeof r - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            throw std::system_error(errno, std::generic_category(), "getrandom");
        got += static_cast<size_t>(n);
    }
    char b[33];
    for (size_t i = 0; i < sizeof r; ++i)
        snprintf(b + 2 * i, 3, "%02x", r[i]);
    return b;
}

std::string addr_str(const sockaddr_in &a)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

std::string hello_payload(uint32_t to, uint32_t from, const std::string &nonce, const std::string &challenge)
{
    return "storm:v2:" + std::to_string(to) + ":" + std::to_string(from) + ":" + nonce + ":" + challenge;
}

// libevent writes at most 16 KiB per system call by default: a 64 KiB chunk
// would take four.
void tune(bufferevent *bev) { bufferevent_set_max_single_write(bev, 1 << 20); }

// An input block's usual size, and the least room a read is given.
constexpr size_t kReadSize = 256u << 10;
constexpr size_t kMinRoom = 16u << 10;

} // namespace

bool parse_hello(const std::string &p, uint32_t &to, uint32_t &from, std::string &nonce,
                 std::string &challenge)
{
    unsigned long t, f;
    char n[65], c[65];
    int end = 0;
    if (std::sscanf(p.c_str(), "storm:v2:%lu:%lu:%64[0-9a-f]:%64[0-9a-f]%n", &t, &f, n, c, &end) != 4 ||
        static_cast<size_t>(end) != p.size() || t > UINT32_MAX || f > UINT32_MAX)
        return false;
    to = static_cast<uint32_t>(t);
    from = static_cast<uint32_t>(f);
    nonce = n;
    challenge = c;
    return true;
}

Connection::Connection(event_base *base, bufferevent *bev, Authenticator &auth, bool client, uint32_t index)
    : base_(base), bev_(bev), fd_(static_cast<int>(bufferevent_getfd(bev))),
      out_(bufferevent_get_output(bev)), auth_(auth), client_(client), peer_(client ? index : kNoIndex),
      self_(client ? kNoIndex : index)
{
}

Connection::~Connection()
{
    if (rev_)
        event_free(rev_);
    if (bev_)
        bufferevent_free(bev_);
}

// The bufferevent writes (and connects); reads are ours, one read per
// readable event straight into the input block: libevent's own read asks
// the kernel how much is there first (an ioctl per read) and copies each
// frame out of its buffer.
void Connection::watch_reads()
{
    rev_ = event_new(base_, fd_, EV_READ | EV_PERSIST, on_readable, this);
    if (!rev_ || event_add(rev_, nullptr) < 0)
        throw std::runtime_error("cannot watch a connection's socket");
}

void Connection::prepare_input()
{
    size_t pending = in_end_ - in_begin_;
    // Bytes the block must hold from in_begin_: the frame being read, and
    // room for a read of a useful size.
    size_t need = std::max(in_need_, pending + kMinRoom);
    bool alone = in_ && in_.use_count() == 1;
    if (alone && pending == 0) {
        if (in_cap_ > kReadSize) // done with a large frame's block: give it back
            in_.reset();
        in_begin_ = in_end_ = 0;
    }
    if (in_) {
        if (in_cap_ - in_begin_ >= need)
            return;
        if (alone && in_cap_ >= need) {
            std::memmove(in_.get(), in_.get() + in_begin_, pending);
            in_begin_ = 0;
            in_end_ = pending;
            return;
        }
    }
    size_t cap = std::max(kReadSize, need);
    std::shared_ptr<char[]> block(new char[cap]); // not zero-filled: read into
    if (pending)
        std::memcpy(block.get(), in_.get() + in_begin_, pending);
    in_ = std::move(block);
    in_cap_ = cap;
    in_begin_ = 0;
    in_end_ = pending;
}

void Connection::on_readable(evutil_socket_t fd, short, void *arg)
{
    auto *c = static_cast<Connection *>(arg);
    auto keep = c->shared_from_this();
    if (c->reads_held())
        return;
    // Frames read before a pause, handed over first (resume_reading()).
    if (c->in_need_ == 0 && c->in_end_ - c->in_begin_ >= kHeaderSize) {
        c->handle_input();
        if (c->reads_held())
            return;
    }
    try {
        c->prepare_input();
    } catch (const std::bad_alloc &) {
        c->close("out of memory reading from " + c->name_);
        return;
    }
    ssize_t n = read(fd, c->in_.get() + c->in_end_, c->in_cap_ - c->in_end_);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        c->close_on_error(errno);
        return;
    }
    if (n == 0) {
        c->close_by_peer();
        return;
    }
    c->in_end_ += static_cast<size_t>(n);
    c->handle_input();
}

std::shared_ptr<Connection> Connection::connect(event_base *base, const sockaddr_in &addr, uint32_t peer,
                                                Authenticator &auth, AuthOffload *offload)
{
    // Our own socket, close-on-exec: slurmd forks and execs slurmstepd.
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    bufferevent *bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        ::close(fd);
        throw std::runtime_error("bufferevent_socket_new failed");
    }
    std::shared_ptr<Connection> c(new Connection(base, bev, auth, true, peer));
    c->offload_ = offload;
    c->name_ = "agent " + std::to_string(peer) + " (" + addr_str(addr) + ")";
    c->started_ = std::chrono::steady_clock::now();
    c->self_ref_ = c;
    bufferevent_setcb(bev, nullptr, nullptr, event_cb, c.get());
    tune(bev);
    bufferevent_enable(bev, EV_WRITE);
    c->watch_reads();
    if (bufferevent_socket_connect(bev, reinterpret_cast<const sockaddr *>(&addr), sizeof addr) < 0) {
        // Reported through the close handler, like any other failure.
        c->closed_ = true;
        c->self_ref_.reset();
        throw std::runtime_error("connect to " + c->name_ + " failed: " + std::strerror(errno));
    }
    return c;
}

std::shared_ptr<Connection> Connection::accept(event_base *base, int fd, uint32_t self, Authenticator &auth,
                                               bool users, AuthOffload *offload)
{
    bufferevent *bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        ::close(fd);
        throw std::runtime_error("bufferevent_socket_new failed");
    }
    std::shared_ptr<Connection> c(new Connection(base, bev, auth, false, self));
    c->users_ = users;
    c->offload_ = offload;
    sockaddr_in a{};
    socklen_t len = sizeof a;
    getpeername(fd, reinterpret_cast<sockaddr *>(&a), &len);
    c->name_ = "peer " + addr_str(a);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->self_ref_ = c;
    bufferevent_setcb(bev, nullptr, nullptr, event_cb, c.get());
    tune(bev);
    bufferevent_enable(bev, EV_WRITE);
    c->watch_reads();
    // The challenge the client's hello must bind: a hello made for another
    // connection is refused (handle_hello).
    c->challenge_ = make_nonce();
    Writer w;
    w.bytes(c->challenge_);
    c->send(MsgType::challenge, 0, w.data());
    return c;
}

void Connection::send(MsgType type, uint64_t op, std::string_view payload)
{
    if (closed_)
        return;
    if (client_ && !ready_ && type != MsgType::hello) {
        encode_frame(held_, type, op, payload);
        return;
    }
    char header[kHeaderSize];
    encode_header(header, type, op, payload.size());
    write_now(header, payload, nullptr);
}

// With nothing queued, the bytes go to the kernel at once: no write event
// to arm and disarm (two epoll_ctl calls) and no loop iteration to wait
// for.  What the kernel does not take now, or any error, is left to the
// bufferevent, which queues it in order and reports the error.
void Connection::write_now(const char *header, std::string_view head, const DataRef *data)
{
    evbuffer *out = out_;
    size_t data_len = data ? data->len : 0;
    size_t sent = 0, total = kHeaderSize + head.size() + data_len;
    int fd = fd_;
    if (ready_ && fd >= 0 && evbuffer_get_length(out) == 0) {
        iovec iov[3] = {{const_cast<char *>(header), kHeaderSize},
                        {const_cast<char *>(head.data()), head.size()},
                        {data ? const_cast<char *>(data->ptr) : nullptr, data_len}};
        msghdr m{};
        m.msg_iov = iov;
        m.msg_iovlen = data_len ? 3 : 2;
        ssize_t n = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0)
            sent = static_cast<size_t>(n);
        if (sent == total)
            return;
    }
    // The rest, in order: header and head copied, data referenced.
    if (sent < kHeaderSize)
        evbuffer_add(out, header + sent, kHeaderSize - sent);
    size_t head_done = sent > kHeaderSize ? std::min(sent - kHeaderSize, head.size()) : 0;
    if (head_done < head.size())
        evbuffer_add(out, head.data() + head_done, head.size() - head_done);
    if (data_len) {
        size_t skip = sent > kHeaderSize + head.size() ? sent - kHeaderSize - head.size() : 0;
        auto *keep = new std::shared_ptr<const void>(data->owner);
        evbuffer_add_reference(
            out, data->ptr + skip, data_len - skip,
            [](const void *, size_t, void *arg) { delete static_cast<std::shared_ptr<const void> *>(arg); },
            keep);
    }
}

void Connection::send(MsgType type, uint64_t op, std::string_view head, const DataRef &data)
{
    if (closed_)
        return;
    if (!data.len) {
        send(type, op, head);
        return;
    }
    if (client_ && !ready_) { // rare: before hello_ok; copy
        std::string payload(head);
        payload.append(data.ptr, data.len);
        send(type, op, payload);
        return;
    }
    char header[kHeaderSize];
    encode_header(header, type, op, head.size() + data.len);
    write_now(header, head, &data);
}

void Connection::close(const std::string &why)
{
    if (closed_)
        return;
    closed_ = true;
    if (rev_)
        event_del(rev_);
    bufferevent_disable(bev_, EV_READ | EV_WRITE);
    bufferevent_setcb(bev_, nullptr, nullptr, nullptr, nullptr);
    auto keep = shared_from_this(); // handlers may drop the last other reference
    self_ref_.reset();
    if (close_handler_)
        close_handler_(*this, why);
    frame_handler_ = nullptr;
    close_handler_ = nullptr;
    ready_handler_ = nullptr;
}

void Connection::reset(const std::string &why)
{
    int fd = bev_ ? static_cast<int>(bufferevent_getfd(bev_)) : -1;
    if (fd >= 0) {
        linger l{1, 0}; // closing the socket then sends RST and drops the send queue
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(why);
}

void Connection::flush_held()
{
    if (!held_.empty()) {
        bufferevent_write(bev_, held_.data(), held_.size());
        held_.clear();
    }
}

void Connection::event_cb(bufferevent *bev, short what, void *arg)
{
    auto *c = static_cast<Connection *>(arg);
    auto keep = c->shared_from_this();
    if (what & BEV_EVENT_CONNECTED) {
        int fd = bufferevent_getfd(bev);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return; // the hello answers the server's challenge (handle_challenge)
    }
    if (what & BEV_EVENT_EOF)
        c->close_by_peer();
    else if (what & BEV_EVENT_ERROR)
        c->close_on_error(EVUTIL_SOCKET_ERROR());
}

void Connection::close_by_peer()
{
    closed_by_peer_ = true;
    close("connection closed by " + name_ + handshake_stage());
}

void Connection::close_on_error(int err)
{
    error_ = err;
    close(std::string("connection error with ") + name_ + ": " + evutil_socket_error_to_string(err) +
          (challenged_ ? handshake_stage() : std::string()));
}

std::string Connection::handshake_stage() const
{
    if (!client_ || ready_)
        return "";
    auto now = std::chrono::steady_clock::now();
    if (!challenged_)
        return " before its challenge, " + tenths_of_seconds(now - started_) +
               " after connecting: an agent closes a new connection at once while too many others are "
               "unauthenticated, or when it stops";
    std::string after = tenths_of_seconds(now - started_) + " after connecting";
    if (hello_sent_ != std::chrono::steady_clock::time_point{})
        after += " and " + tenths_of_seconds(now - hello_sent_) + " after this node's hello";
    return " during the handshake, " + after +
           ": the agent refused the hello, had not verified it within its hello deadline, or stopped (its log "
           "says which)";
}

void Connection::pause_reading()
{
    if (paused_ || closed_)
        return;
    paused_ = true;
    update_reads();
}

void Connection::resume_reading()
{
    if (!paused_)
        return;
    paused_ = false;
    update_reads(); // the frames already read, from the loop
}

void Connection::handle_input()
{
    while (!reads_held()) {
        size_t avail = in_end_ - in_begin_;
        in_need_ = 0;
        if (avail < kHeaderSize)
            return;
        const char *p = in_.get() + in_begin_;
        FrameHeader h;
        try {
            h = decode_header(p);
        } catch (const FrameError &e) {
            close("malformed frame from " + name_ + ": " + e.what());
            return;
        }
        // Before authentication only the hello exchange is taken: anything
        // else is refused on its header, before its payload is waited for
        // (or room made for it).
        if (!ready_ && h.type != MsgType::hello && h.type != MsgType::hello_ok &&
            h.type != MsgType::challenge) {
            close("bad " + std::string(msg_type_name(h.type)) + " frame from " + name_ + ": " +
                  msg_type_name(h.type) + " frame before authentication");
            return;
        }
        if (avail < kHeaderSize + h.length) {
            in_need_ = kHeaderSize + h.length;
            return;
        }
        in_begin_ += kHeaderSize + h.length;
        current_ = std::shared_ptr<const void>(in_, p + kHeaderSize); // the block, aliased
        std::string_view payload(p + kHeaderSize, h.length);
        try {
            if (h.type == MsgType::challenge) {
                if (!client_ || ready_ || challenged_)
                    throw FrameError("unexpected challenge");
                handle_challenge(payload);
            } else if (h.type == MsgType::hello) {
                if (client_ || ready_)
                    throw FrameError("unexpected hello");
                handle_hello(payload);
            } else if (h.type == MsgType::hello_ok) {
                if (!client_ || ready_)
                    throw FrameError("unexpected hello_ok");
                handle_hello_ok(payload);
            } else if (frame_handler_) { // ready: anything else was refused on its header
                frame_handler_(*this, h, payload);
            }
        } catch (const std::exception &e) {
            close("bad " + std::string(msg_type_name(h.type)) + " frame from " + name_ + ": " + e.what());
        }
        current_.reset();
    }
}

// The hello inside a verified credential ("storm:v2:<to>:<from>:<nonce>:
// <challenge>").
Connection::Hello Connection::parse_verified(const Authenticator::Verified &v)
{
    Hello h;
    if (!parse_hello(v.payload, h.to, h.from, h.nonce, h.challenge))
        throw AuthError("credential payload \"" + v.payload + "\" is not a Storm hello");
    return h;
}

void Connection::authenticate(std::function<Apply()> work)
{
    // Off the loop where there is an offload: `work` holds copies of what
    // it needs, never the connection.
    auto run = [work = std::move(work)]() -> Apply {
        try {
            return work();
        } catch (const std::exception &e) {
            std::string why = e.what();
            return [why](Connection &) -> void { throw AuthError(why); }; // apply_auth closes
        }
    };
    if (!offload_) {
        apply_auth(run());
        return;
    }
    authenticating_ = true;
    update_reads();
    std::weak_ptr<Connection> weak = shared_from_this();
    offload_->submit([run = std::move(run), weak]() -> AuthOffload::Done {
        Apply apply = run();
        return [apply = std::move(apply), weak] {
            auto c = weak.lock();
            if (!c || c->closed_)
                return;
            c->authenticating_ = false;
            c->apply_auth(apply);
            c->update_reads(); // frames that came meanwhile, now in order
        };
    });
}

// A handshake step's result, applied on the loop: a check it fails
// (AuthError) closes the connection with the reason.
void Connection::apply_auth(const Apply &apply)
{
    try {
        apply(*this);
    } catch (const AuthError &e) {
        close("authentication of " + name_ + " failed: " + e.what());
    }
}

// Reads are watched while nothing holds them: not closed, not paused by
// the handler, no handshake at work.  Frames already read are handed over
// from the loop once they are.
void Connection::update_reads()
{
    if (!rev_)
        return;
    if (reads_held()) {
        event_del(rev_);
        return;
    }
    event_add(rev_, nullptr);
    if (in_end_ - in_begin_ >= kHeaderSize)
        event_active(rev_, EV_READ, 0);
}

void Connection::handle_challenge(std::string_view payload)
{
    Reader r(payload);
    std::string challenge(r.bytes(64));
    r.finish();
    if (challenge.size() < 32 || challenge.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw FrameError("malformed challenge");
    challenged_ = true;
    challenge_ = std::move(challenge);
    nonce_ = make_nonce();
    authenticate([auth = &auth_, hello = hello_payload(peer_, kNoIndex, nonce_, challenge_)]() -> Apply {
        Writer w;
        w.bytes(auth->credential(hello));
        return [payload = w.data()](Connection &c) {
            c.hello_sent_ = std::chrono::steady_clock::now();
            c.send(MsgType::hello, 0, payload);
        };
    });
}

void Connection::handle_hello(std::string_view payload)
{
    Reader r(payload);
    std::string cred(r.bytes(kMaxCredential));
    r.finish();
    // The client's credential verified, and ours made for the nonces it
    // names (checked on the loop before it is sent).
    authenticate([auth = &auth_, cred = std::move(cred), self = self_]() -> Apply {
        auto v = auth->verify(cred);
        Hello h = parse_verified(v);
        Writer w;
        w.bytes(auth->credential(hello_payload(kNoIndex, self, h.nonce, h.challenge)));
        return [uid = v.uid, h, ok = w.data()](Connection &c) { c.accept_hello(uid, h, ok); };
    });
}

void Connection::accept_hello(uid_t uid, const Hello &h, const std::string &hello_ok)
{
    peer_uid_ = uid;
    trusted_ = auth_.trusted(uid);
    if (!trusted_ && !users_)
        throw AuthError("credential of uid " + std::to_string(peer_uid_) + ", which is not a Slurm daemon's");
    if (h.to != self_)
        throw AuthError("credential meant for agent " + std::to_string(h.to) + ", this is agent " +
                        std::to_string(self_));
    if (h.challenge != challenge_)
        throw AuthError("the hello does not answer this connection's challenge (a hello replayed from "
                        "another connection)");
    peer_ = h.from;
    // Mutual: prove to the client that this is the agent it asked for.
    ready_ = true;
    send(MsgType::hello_ok, 0, hello_ok);
    if (ready_handler_)
        ready_handler_(*this);
}

void Connection::handle_hello_ok(std::string_view payload)
{
    Reader r(payload);
    std::string cred(r.bytes(kMaxCredential));
    r.finish();
    authenticate([auth = &auth_, cred = std::move(cred)]() -> Apply {
        auto v = auth->verify(cred);
        Hello h = parse_verified(v);
        return [uid = v.uid, h](Connection &c) { c.accept_hello_ok(uid, h); };
    });
}

void Connection::accept_hello_ok(uid_t uid, const Hello &h)
{
    peer_uid_ = uid;
    trusted_ = auth_.trusted(uid);
    if (!trusted_)
        throw AuthError("the agent's credential is of uid " + std::to_string(peer_uid_) +
                        ", which is not a Slurm daemon's");
    if (h.from != peer_ || h.nonce != nonce_ || h.challenge != challenge_)
        throw AuthError("hello_ok does not come from agent " + std::to_string(peer_) +
                        " for this connection (it names agent " + std::to_string(h.from) + ")");
    ready_ = true;
    flush_held();
    if (ready_handler_)
        ready_handler_(*this);
}

} // namespace storm::net
