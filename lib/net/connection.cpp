#include "lib/net/connection.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/tcp.h>
#include <random>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

namespace storm::net {
namespace {

constexpr size_t kMaxCredential = 4096;
constexpr uint32_t kNoIndex = UINT32_MAX;

std::string make_nonce()
{
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    char b[17];
    snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(rng()));
    return b;
}

std::string addr_str(const sockaddr_in &a)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// "storm:v1:<to>:<from>:<nonce>" -> fields; false if malformed.
bool parse_hello(const std::string &p, uint32_t &to, uint32_t &from, std::string &nonce)
{
    unsigned long t, f;
    char n[64];
    if (std::sscanf(p.c_str(), "storm:v1:%lu:%lu:%63s", &t, &f, n) != 3)
        return false;
    to = static_cast<uint32_t>(t);
    from = static_cast<uint32_t>(f);
    nonce = n;
    return true;
}

// libevent writes at most 16 KiB per system call by default: a 64 KiB chunk
// would take four.
void tune(bufferevent *bev) { bufferevent_set_max_single_write(bev, 1 << 20); }

// What one read asks the kernel for, at most.
constexpr size_t kReadSize = 256u << 10;

} // namespace

Connection::Connection(event_base *base, bufferevent *bev, Authenticator &auth, bool client, uint32_t index)
    : base_(base), bev_(bev), auth_(auth), client_(client), peer_(client ? index : kNoIndex),
      self_(client ? kNoIndex : index)
{
}

Connection::~Connection()
{
    if (rev_)
        event_free(rev_);
    if (in_)
        evbuffer_free(in_);
    if (bev_)
        bufferevent_free(bev_);
}

// The bufferevent writes (and connects); reads are ours, one readv per
// readable event straight into our input buffer: libevent's own read asks
// the kernel how much is there first (an ioctl per read).
void Connection::watch_reads()
{
    in_ = evbuffer_new();
    if (!in_)
        throw std::runtime_error("cannot allocate a connection's input buffer");
    rev_ = event_new(base_, bufferevent_getfd(bev_), EV_READ | EV_PERSIST, on_readable, this);
    if (!rev_ || event_add(rev_, nullptr) < 0)
        throw std::runtime_error("cannot watch a connection's socket");
}

void Connection::on_readable(evutil_socket_t fd, short, void *arg)
{
    auto *c = static_cast<Connection *>(arg);
    auto keep = c->shared_from_this();
    if (c->closed_)
        return;
    evbuffer *in = c->in_;
    evbuffer_iovec v[2];
    int nv = evbuffer_reserve_space(in, kReadSize, v, 2);
    if (nv <= 0) {
        c->close("out of memory reading from " + c->name_);
        return;
    }
    iovec iov[2];
    for (int i = 0; i < nv; ++i)
        iov[i] = {v[i].iov_base, v[i].iov_len};
    ssize_t n = readv(fd, iov, nv);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return; // the reservation is simply not committed
        c->close_on_error(errno);
        return;
    }
    if (n == 0) {
        c->close_by_peer();
        return;
    }
    size_t left = static_cast<size_t>(n);
    for (int i = 0; i < nv; ++i) {
        v[i].iov_len = std::min(v[i].iov_len, left);
        left -= v[i].iov_len;
    }
    evbuffer_commit_space(in, v, nv);
    c->handle_input();
}

std::shared_ptr<Connection> Connection::connect(event_base *base, const sockaddr_in &addr, uint32_t peer,
                                                Authenticator &auth)
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
    c->name_ = "agent " + std::to_string(peer) + " (" + addr_str(addr) + ")";
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
                                               bool users)
{
    bufferevent *bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        ::close(fd);
        throw std::runtime_error("bufferevent_socket_new failed");
    }
    std::shared_ptr<Connection> c(new Connection(base, bev, auth, false, self));
    c->users_ = users;
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
    return c;
}

void Connection::send(MsgType type, uint64_t op, std::string_view payload)
{
    if (closed_)
        return;
    std::string frame;
    encode_frame(frame, type, op, payload);
    if (client_ && !ready_ && type != MsgType::hello) {
        held_ += frame;
        return;
    }
    write_now(frame.data(), frame.size(), nullptr);
}

// With nothing queued, the bytes go to the kernel at once: no write event
// to arm and disarm (two epoll_ctl calls) and no loop iteration to wait
// for.  What the kernel does not take now, or any error, is left to the
// bufferevent, which queues it in order and reports the error.
void Connection::write_now(const char *head, size_t head_len, const DataRef *data)
{
    evbuffer *out = bufferevent_get_output(bev_);
    size_t sent = 0, total = head_len + (data ? data->len : 0);
    int fd = static_cast<int>(bufferevent_getfd(bev_));
    if (ready_ && fd >= 0 && evbuffer_get_length(out) == 0) {
        iovec iov[2] = {{const_cast<char *>(head), head_len},
                        {data ? const_cast<char *>(data->ptr) : nullptr, data ? data->len : 0}};
        msghdr m{};
        m.msg_iov = iov;
        m.msg_iovlen = data ? 2 : 1;
        ssize_t n = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0)
            sent = static_cast<size_t>(n);
        if (sent == total)
            return;
    }
    if (sent < head_len)
        evbuffer_add(out, head + sent, head_len - sent);
    if (data && data->len) {
        size_t skip = sent > head_len ? sent - head_len : 0;
        auto *keep = new std::shared_ptr<const void>(data->owner);
        evbuffer_add_reference(
            out, data->ptr + skip, data->len - skip,
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
    if (head.size() + data.len > max_payload(type))
        throw FrameError(std::string(msg_type_name(type)) + " payload of " +
                         std::to_string(head.size() + data.len) + " bytes exceeds the limit of " +
                         std::to_string(max_payload(type)));
    if (client_ && !ready_) { // rare: before hello_ok; copy
        std::string payload(head);
        payload.append(data.ptr, data.len);
        send(type, op, payload);
        return;
    }
    // Header and head are copied; the data is referenced.
    std::string frame;
    encode_frame(frame, type, op, "");
    Writer w;
    w.u32(static_cast<uint32_t>(head.size() + data.len));
    std::memcpy(frame.data() + 8, w.data().data(), 4); // the length field of the header
    frame.append(head.data(), head.size());
    write_now(frame.data(), frame.size(), &data);
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
        c->nonce_ = make_nonce();
        try {
            std::string payload =
                "storm:v1:" + std::to_string(c->peer_) + ":" + std::to_string(kNoIndex) + ":" + c->nonce_;
            Writer w;
            w.bytes(c->auth_.credential(payload));
            c->send(MsgType::hello, 0, w.data());
        } catch (const std::exception &e) {
            c->close(std::string("cannot authenticate: ") + e.what());
        }
        return;
    }
    if (what & BEV_EVENT_EOF)
        c->close_by_peer();
    else if (what & BEV_EVENT_ERROR)
        c->close_on_error(EVUTIL_SOCKET_ERROR());
}

void Connection::close_by_peer()
{
    closed_by_peer_ = true;
    close("connection closed by " + name_);
}

void Connection::close_on_error(int err)
{
    error_ = err;
    close(std::string("connection error with ") + name_ + ": " + evutil_socket_error_to_string(err));
}

void Connection::handle_input()
{
    evbuffer *in = in_;
    while (!closed_) {
        size_t avail = evbuffer_get_length(in);
        if (avail < kHeaderSize)
            return;
        FrameHeader h;
        try {
            unsigned char hdr[kHeaderSize];
            evbuffer_copyout(in, hdr, kHeaderSize);
            h = decode_header(hdr);
        } catch (const FrameError &e) {
            close("malformed frame from " + name_ + ": " + e.what());
            return;
        }
        if (avail < kHeaderSize + h.length)
            return;
        evbuffer_drain(in, kHeaderSize);
        // Not zero-filled first: the whole buffer is overwritten.
        std::shared_ptr<char[]> owner(new char[h.length ? h.length : 1]);
        evbuffer_remove(in, owner.get(), h.length);
        current_ = owner;
        std::string_view payload(owner.get(), h.length);
        try {
            if (h.type == MsgType::hello) {
                if (client_ || ready_)
                    throw FrameError("unexpected hello");
                handle_hello(payload);
            } else if (h.type == MsgType::hello_ok) {
                if (!client_ || ready_)
                    throw FrameError("unexpected hello_ok");
                handle_hello_ok(payload);
            } else if (!ready_) {
                throw FrameError(std::string(msg_type_name(h.type)) + " frame before authentication");
            } else if (frame_handler_) {
                frame_handler_(*this, h, payload);
            }
        } catch (const AuthError &e) {
            close("authentication of " + name_ + " failed: " + e.what());
        } catch (const std::exception &e) {
            close("bad " + std::string(msg_type_name(h.type)) + " frame from " + name_ + ": " + e.what());
        }
        current_.reset();
    }
}

// A hello or hello_ok payload: a credential whose payload is a Storm
// hello, "storm:v1:<to>:<from>:<nonce>".
Connection::Hello Connection::verify_hello(std::string_view payload)
{
    Reader r(payload);
    std::string cred(r.bytes(kMaxCredential));
    r.finish();
    auto v = auth_.verify(cred);
    peer_uid_ = v.uid;
    trusted_ = auth_.trusted(v.uid);
    Hello h;
    if (!parse_hello(v.payload, h.to, h.from, h.nonce))
        throw AuthError("credential payload \"" + v.payload + "\" is not a Storm hello");
    return h;
}

void Connection::handle_hello(std::string_view payload)
{
    Hello h = verify_hello(payload);
    if (!trusted_ && !users_)
        throw AuthError("credential of uid " + std::to_string(peer_uid_) + ", which is not a Slurm daemon's");
    if (h.to != self_)
        throw AuthError("credential meant for agent " + std::to_string(h.to) + ", this is agent " +
                        std::to_string(self_));
    peer_ = h.from;
    // Mutual: prove to the client that this is the agent it asked for.
    Writer w;
    w.bytes(auth_.credential("storm:v1:" + std::to_string(kNoIndex) + ":" + std::to_string(self_) + ":" +
                             h.nonce));
    ready_ = true;
    send(MsgType::hello_ok, 0, w.data());
    if (ready_handler_)
        ready_handler_(*this);
}

void Connection::handle_hello_ok(std::string_view payload)
{
    Hello h = verify_hello(payload);
    if (!trusted_)
        throw AuthError("the agent's credential is of uid " + std::to_string(peer_uid_) +
                        ", which is not a Slurm daemon's");
    if (h.from != peer_ || h.nonce != nonce_)
        throw AuthError("hello_ok does not come from agent " + std::to_string(peer_) +
                        " for this connection (it names agent " + std::to_string(h.from) + ")");
    ready_ = true;
    flush_held();
    if (ready_handler_)
        ready_handler_(*this);
}

} // namespace storm::net
