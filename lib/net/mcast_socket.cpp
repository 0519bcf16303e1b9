// The sockets of a multicast group: McastSocket (mcast_socket.hpp), which
// carries chunks, GroupSocket, which carries short datagrams, and the
// group's addresses (mcast.hpp).
#include "lib/net/mcast_socket.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/udp.h>
#include <stdexcept>
#include <sys/socket.h>
#include <system_error>
#include <unistd.h>

#include <event2/event.h>

#include "lib/common/timeval.hpp"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace storm::net {
namespace {

std::system_error sys_error(const std::string &what)
{
    return std::system_error(errno, std::generic_category(), what);
}

// A UDP socket sending to the group from `iface` (TTL 1), and with
// `receive`, bound to the group's port and a member on `iface`.
int open_group_socket(const in_addr &group, uint16_t port, const in_addr &iface, bool loop, bool receive)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw sys_error("multicast socket");
    try {
        if (receive) {
            int one = 1;
            if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
                throw sys_error("multicast socket: SO_REUSEADDR");
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_port = htons(port);
            a.sin_addr = group; // only the group's datagrams
            if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) < 0)
                throw sys_error("multicast socket: bind to port " + std::to_string(port));
            ip_mreq m{};
            m.imr_multiaddr = group;
            m.imr_interface = iface;
            if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) < 0)
                throw sys_error("multicast socket: joining the group");
        }
        if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &iface, sizeof iface) < 0)
            throw sys_error("multicast socket: IP_MULTICAST_IF");
        unsigned char l = loop ? 1 : 0;
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &l, sizeof l);
    } catch (...) {
        ::close(fd);
        throw;
    }
    return fd;
}

} // namespace

void parse_mcast_group(const std::string &text, in_addr &group, uint16_t &port)
{
    auto colon = text.rfind(':');
    if (colon == std::string::npos)
        throw std::invalid_argument("'" + text + "' is not GROUP:PORT");
    std::string host = text.substr(0, colon), p = text.substr(colon + 1);
    if (inet_pton(AF_INET, host.c_str(), &group) != 1)
        throw std::invalid_argument("'" + host + "' is not an IPv4 address");
    if (!IN_MULTICAST(ntohl(group.s_addr)))
        throw std::invalid_argument("'" + host + "' is not a multicast group (224.0.0.0/4)");
    if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(p) < 1 || std::stoul(p) > 65535)
        throw std::invalid_argument("'" + p + "' is not a port from 1 to 65535");
    port = static_cast<uint16_t>(std::stoul(p));
}

in_addr local_address_towards(const sockaddr_in &to)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw sys_error("socket");
    sockaddr_in me{};
    socklen_t len = sizeof me;
    bool ok = connect(fd, reinterpret_cast<const sockaddr *>(&to), sizeof to) == 0 &&
              getsockname(fd, reinterpret_cast<sockaddr *>(&me), &len) == 0;
    int e = errno;
    ::close(fd);
    if (!ok) {
        errno = e;
        throw sys_error("no route to the nodes");
    }
    return me.sin_addr;
}

GroupSocket::GroupSocket(event_base *base, const in_addr &group, uint16_t port, const in_addr &iface,
                         bool loop, std::function<void(std::string_view)> receive)
    : receive_(std::move(receive))
{
    to_.sin_family = AF_INET;
    to_.sin_port = htons(port);
    to_.sin_addr = group;
    fd_ = open_group_socket(group, port, iface, loop, static_cast<bool>(receive_));
    if (receive_) {
        ev_ = event_new(base, fd_, EV_READ | EV_PERSIST, on_readable, this);
        if (!ev_ || event_add(ev_, nullptr) < 0) {
            if (ev_)
                event_free(ev_);
            ::close(fd_);
            throw std::runtime_error("multicast socket: cannot watch it");
        }
    }
}

GroupSocket::~GroupSocket()
{
    if (ev_)
        event_free(ev_);
    ::close(fd_);
}

bool GroupSocket::send(std::string_view d)
{
    return sendto(fd_, d.data(), d.size(), 0, reinterpret_cast<const sockaddr *>(&to_), sizeof to_) ==
           static_cast<ssize_t>(d.size());
}

void GroupSocket::on_readable(int, short, void *arg)
{
    auto *self = static_cast<GroupSocket *>(arg);
    char buf[2048];
    for (int i = 0; i < 64; ++i) { // then back to the loop
        ssize_t n = recv(self->fd_, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0)
            return;
        if (static_cast<size_t>(n) <= sizeof buf) // longer ones are not ours
            self->receive_(std::string_view(buf, static_cast<size_t>(n)));
    }
}

McastSocket::McastSocket(event_base *base, const McastConfig &cfg, Logger log, std::function<void()> readable,
                         std::function<void()> writable)
    : log_(log.child("multicast")), hold_(cfg.hold), readable_(std::move(readable)),
      writable_(std::move(writable))
{
    to_.sin_family = AF_INET;
    to_.sin_port = htons(cfg.port);
    to_.sin_addr = cfg.group;
    fd_ = open_group_socket(cfg.group, cfg.port, cfg.iface, cfg.loop, true);
    try {
        int one = 1;
        // Receive: room for a window of chunks in flight (root may exceed
        // rmem_max).  Send: little, so that the chunks queued before the
        // link (a few ms of it) do not delay the tree's frames that share
        // it, such as the answers to the initiator.
        int rcv = 32 << 20, snd = static_cast<int>(cfg.sndbuf);
        if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) < 0)
            setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
        if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof snd) < 0)
            setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd);
        int gso = static_cast<int>(cfg.mtu - kIpUdp);
        gso_ = setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &gso, sizeof gso) == 0;
        setsockopt(fd_, SOL_UDP, UDP_GRO, &one, sizeof one); // best effort
        rev_ = event_new(
            base, fd_, EV_READ | EV_PERSIST,
            [](evutil_socket_t, short, void *arg) { static_cast<McastSocket *>(arg)->readable_(); }, this);
        wev_ = event_new(
            base, fd_, EV_WRITE,
            [](evutil_socket_t, short, void *arg) { static_cast<McastSocket *>(arg)->writable_(); }, this);
        hold_ev_ = evtimer_new(
            base, [](evutil_socket_t, short, void *arg) { static_cast<McastSocket *>(arg)->resume_reads(); },
            this);
        if (!rev_ || !wev_ || !hold_ev_ || event_add(rev_, nullptr) < 0)
            throw std::runtime_error("multicast socket: cannot watch it");
    } catch (...) {
        if (rev_)
            event_free(rev_);
        if (wev_)
            event_free(wev_);
        if (hold_ev_)
            event_free(hold_ev_);
        ::close(fd_);
        throw;
    }
}

McastSocket::~McastSocket()
{
    event_free(rev_);
    event_free(wev_);
    event_free(hold_ev_);
    ::close(fd_);
}

unsigned McastSocket::per_send(size_t size) const noexcept
{
    return gso_ ? static_cast<unsigned>(std::min<size_t>(kMaxGsoSegments, kMaxDatagram / size)) : 1;
}

McastSocket::Sent McastSocket::send(iovec *iov, size_t niov)
{
    msghdr m{};
    m.msg_name = &to_;
    m.msg_namelen = sizeof to_;
    m.msg_iov = iov;
    m.msg_iovlen = niov;
    for (;;) {
        if (sendmsg(fd_, &m, 0) >= 0)
            return Sent::done;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
            return Sent::busy;
        if (errno == EINTR)
            continue;
        if (gso_ && (errno == EIO || errno == EINVAL)) { // no segmentation offload on this path
            int zero = 0;
            setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &zero, sizeof zero);
            gso_ = false;
            log_.info("the kernel refused segmentation offload (%s); sending one datagram per call",
                      std::strerror(errno));
            return Sent::unbatch;
        }
        return Sent::failed;
    }
}

void McastSocket::wait_writable() { event_add(wev_, nullptr); }

ssize_t McastSocket::receive(iovec *iov, size_t niov, size_t &seg, bool &truncated)
{
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = niov;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    ssize_t got = recvmsg(fd_, &m, MSG_DONTWAIT);
    if (got < 0)
        return got;
    truncated = (m.msg_flags & MSG_TRUNC) != 0;
    seg = static_cast<size_t>(got);
    if (truncated)
        return got;
    for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int g;
            std::memcpy(&g, CMSG_DATA(c), sizeof g);
            if (g > 0)
                seg = static_cast<size_t>(g);
        }
    return got;
}

bool McastSocket::reads_held() const noexcept { return !event_pending(rev_, EV_READ, nullptr); }

void McastSocket::arm_hold()
{
    timeval tv = to_timeval(hold_);
    evtimer_add(hold_ev_, &tv);
}

void McastSocket::hold_reads()
{
    if (!reads_held())
        event_del(rev_);
    if (reads_held())
        arm_hold();
}

void McastSocket::resume_reads()
{
    if (!reads_held())
        return;
    evtimer_del(hold_ev_);
    if (event_add(rev_, nullptr) == 0)
        return;
    // epoll could not take it back (short of memory): try again later
    log_.warning("cannot watch the socket again (%s): trying again in %lld ms", std::strerror(errno),
                 static_cast<long long>(hold_.count()));
    arm_hold();
}

} // namespace storm::net
