#include "lib/net/mcast.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/udp.h>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/uio.h>
#include <system_error>
#include <unistd.h>

#include <event2/event.h>

#include "lib/common/timeval.hpp"
#include "lib/net/frame.hpp"
#include "lib/net/mcast_cipher.hpp"
#include "lib/net/wire.hpp"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace storm::net {
namespace {

constexpr uint32_t kMagic = 0x53544d43; // "STMC"
constexpr size_t kHeader = 32;
constexpr size_t kIpUdp = 28;
constexpr size_t kMaxDatagram = 65507;
constexpr unsigned kMaxGsoSegments = 64;

struct SegHeader {
    uint32_t sender;
    uint64_t origin, offset;
    uint32_t chunk_len;
    uint16_t seg, seg_bytes;
};

void put_header(unsigned char *p, const SegHeader &h)
{
    Writer w;
    w.u32(kMagic);
    w.u32(h.sender);
    w.u64(h.origin);
    w.u64(h.offset);
    w.u32(h.chunk_len);
    w.u16(h.seg);
    w.u16(h.seg_bytes);
    std::memcpy(p, w.data().data(), kHeader);
}

bool get_header(const char *p, size_t n, SegHeader &h)
{
    if (n < kHeader)
        return false;
    Reader r(p, kHeader);
    if (r.u32() != kMagic)
        return false;
    h.sender = r.u32();
    h.origin = r.u64();
    h.offset = r.u64();
    h.chunk_len = r.u32();
    h.seg = r.u16();
    h.seg_bytes = r.u16();
    return true;
}

// How many segments of seg_bytes carry a chunk of `len` bytes (one, for
// an empty chunk).
uint32_t segments(size_t len, size_t seg_bytes)
{
    return static_cast<uint32_t>(std::max<size_t>(1, (len + seg_bytes - 1) / seg_bytes));
}

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

Mcast::Mcast(event_base *base, const McastConfig &cfg, uint32_t self, Logger log)
    : base_(base), cfg_(cfg), self_(self), log_(std::move(log)),
      // A few chunks: those being received, and those taken but not yet
      // written and passed on.
      buffers_(std::make_shared<ChunkBuffers>(8))
{
    if (cfg_.mtu < 576 || cfg_.mtu > 65535)
        throw std::invalid_argument("multicast MTU " + std::to_string(cfg_.mtu) + " outside 576-65535");
    if (std::string why = cipher_backend().error(); !why.empty())
        throw std::runtime_error("chunks cannot be sealed: " + why);
    fd_ = open_group_socket(cfg_.group, cfg_.port, cfg_.iface, cfg_.loop, true);
    try {
        int one = 1;
        // Receive: room for a window of chunks in flight (root may exceed
        // rmem_max).  Send: little, so that the chunks queued before the
        // link (a few ms of it) do not delay the tree's frames that share
        // it, such as the answers to the initiator.
        int rcv = 32 << 20, snd = static_cast<int>(cfg_.sndbuf);
        if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) < 0)
            setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
        if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof snd) < 0)
            setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd);
        int gso = static_cast<int>(cfg_.mtu - kIpUdp);
        gso_ = setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &gso, sizeof gso) == 0;
        setsockopt(fd_, SOL_UDP, UDP_GRO, &one, sizeof one); // best effort
        rbuf_.resize(kMaxDatagram + 1);
        scratch_.resize(kMaxDatagram + 1);
        hdrs_.resize(kMaxGsoSegments * kHeader);
        rev_ = event_new(base_, fd_, EV_READ | EV_PERSIST, on_readable, this);
        wev_ = event_new(base_, fd_, EV_WRITE, on_writable, this);
        hold_ev_ = evtimer_new(
            base_, [](evutil_socket_t, short, void *arg) { static_cast<Mcast *>(arg)->resume_reads(); },
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

Mcast::~Mcast()
{
    event_free(rev_);
    event_free(wev_);
    event_free(hold_ev_);
    ::close(fd_);
}

size_t Mcast::seg_bytes() const noexcept { return cfg_.mtu - kIpUdp - kHeader; }

void Mcast::send(uint64_t origin, uint64_t offset, DataRef data, std::function<void()> sent)
{
    if (data.len > kMaxDataPayload)
        throw std::invalid_argument("multicast chunk of " + std::to_string(data.len) + " bytes");
    out_.push_back(Outgoing{origin, offset, std::move(data), 0, std::move(sent)});
    if (out_.size() == 1)
        pump();
}

void Mcast::pump()
{
    while (!out_.empty()) {
        Outgoing &o = out_.front();
        if (!send_batch(o)) {
            event_add(wev_, nullptr);
            return;
        }
        if (o.next_seg >= segments(o.data.len, seg_bytes())) {
            auto sent = std::move(o.sent);
            stats_.chunks_sent++;
            out_.pop_front();
            if (sent)
                sent(); // may send again: out_ is consistent here
        }
    }
}

void Mcast::on_writable(int, short, void *arg) { static_cast<Mcast *>(arg)->pump(); }

bool Mcast::send_batch(Outgoing &o)
{
    const size_t seg_bytes = this->seg_bytes(), gso_size = seg_bytes + kHeader;
    const uint32_t nsegs = segments(o.data.len, seg_bytes);
    const unsigned per_call =
        gso_ ? static_cast<unsigned>(std::min<size_t>(kMaxGsoSegments, kMaxDatagram / gso_size)) : 1;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(cfg_.port);
    to.sin_addr = cfg_.group;
    unsigned char headers[kMaxGsoSegments][kHeader];
    iovec iov[2 * kMaxGsoSegments];
    while (o.next_seg < nsegs) {
        unsigned k = 0;
        for (; k < per_call && o.next_seg + k < nsegs; k++) {
            uint32_t seg = o.next_seg + k;
            size_t from = static_cast<size_t>(seg) * seg_bytes;
            size_t n = std::min(seg_bytes, o.data.len - from);
            put_header(headers[k], SegHeader{self_, o.origin, o.offset, static_cast<uint32_t>(o.data.len),
                                             static_cast<uint16_t>(seg), static_cast<uint16_t>(seg_bytes)});
            iov[2 * k] = {headers[k], kHeader};
            iov[2 * k + 1] = {const_cast<char *>(o.data.ptr + from), n};
        }
        msghdr m{};
        m.msg_name = &to;
        m.msg_namelen = sizeof to;
        m.msg_iov = iov;
        m.msg_iovlen = 2 * k;
        if (sendmsg(fd_, &m, 0) >= 0) {
            o.next_seg += k;
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
            return false;
        if (errno == EINTR)
            continue;
        if (gso_ && (errno == EIO || errno == EINVAL)) { // no segmentation offload on this path
            int zero = 0;
            setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &zero, sizeof zero);
            gso_ = false;
            log_.info(
                "multicast: the kernel refused segmentation offload (%s); sending one datagram per call",
                std::strerror(errno));
            return send_batch(o);
        }
        stats_.send_errors++;
        if (!warned_send_)
            log_.error("multicast send to the group failed (%s); the nodes fetch the data over the tree",
                       std::strerror(errno));
        warned_send_ = true;
        o.next_seg = nsegs; // given up: the receivers ask for repairs
        return true;
    }
    warned_send_ = false;
    return true;
}

void Mcast::on_readable(int, short, void *arg)
{
    auto *self = static_cast<Mcast *>(arg);
    self->stats_.wakeups++;
    self->drain();
}

bool Mcast::reads_held() const noexcept { return !event_pending(rev_, EV_READ, nullptr); }

void Mcast::arm_hold()
{
    timeval tv = to_timeval(cfg_.hold);
    evtimer_add(hold_ev_, &tv);
}

void Mcast::hold_reads()
{
    if (!reads_held())
        event_del(rev_);
    if (reads_held())
        arm_hold();
}

void Mcast::resume_reads()
{
    if (!reads_held())
        return;
    evtimer_del(hold_ev_);
    if (event_add(rev_, nullptr) == 0)
        return;
    // epoll could not take it back (short of memory): try again later
    log_.error("multicast: cannot watch the socket again (%s): trying again in %lld ms", std::strerror(errno),
               static_cast<long long>(cfg_.hold.count()));
    arm_hold();
}

namespace {
// Copies bytes [at, at + len) of what recvmsg() spread over `iov`.
void gather(const iovec *iov, size_t niov, size_t at, size_t len, char *to)
{
    size_t pos = 0;
    for (size_t i = 0; i < niov && len > 0; pos += iov[i].iov_len, i++) {
        if (at >= pos + iov[i].iov_len)
            continue;
        size_t from = at - pos, k = std::min(iov[i].iov_len - from, len);
        std::memcpy(to, static_cast<const char *>(iov[i].iov_base) + from, k);
        to += k, at += k, len -= k;
    }
}
} // namespace

void Mcast::drain()
{
    for (int round = 0; round < 256; round++) { // then let other events run
        // The segments expected next (guess_) are received straight into
        // their chunk: for each, a slot for its header (hdrs_) and one for
        // its data, where it belongs; rbuf_ takes whatever comes beyond.
        // Only segments that lie exactly in their slots and whose header is
        // the one expected stay there; any other is stored from rbuf_ if it
        // lies there whole, or else copied whole into scratch_ before
        // anything is stored, and stored from there.
        iovec iov[2 * kMaxGsoSegments + 1];
        size_t nslots = 0;
        std::shared_ptr<char[]> held; // the guessed chunk's buffer, alive through the batch
        const Pending *gp = nullptr;
        const auto key = guess_key_; // storing segments moves guess_ on
        const uint32_t first = guess_seg_;
        if (guess_) {
            auto it = pending_.find(key);
            if (it != pending_.end() && it->second.missing > 0)
                gp = &it->second;
        }
        if (gp) {
            held = gp->buf;
            uint32_t nsegs = segments(gp->len, gp->seg_bytes);
            size_t total = 0;
            for (uint32_t s = first; s < nsegs && nslots < kMaxGsoSegments && !gp->have[s]; s++) {
                size_t from = static_cast<size_t>(s) * gp->seg_bytes;
                size_t want = std::min<size_t>(gp->seg_bytes, gp->len - std::min(from, gp->len));
                if (total + kHeader + want > kMaxDatagram)
                    break;
                iov[2 * nslots] = {hdrs_.data() + nslots * kHeader, kHeader};
                iov[2 * nslots + 1] = {held.get() + from, want};
                total += kHeader + want;
                nslots++;
            }
        }
        const size_t niov = 2 * nslots + 1;
        iov[2 * nslots] = {rbuf_.data(), rbuf_.size()};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
        msghdr m{};
        m.msg_iov = iov;
        m.msg_iovlen = niov;
        m.msg_control = control;
        m.msg_controllen = sizeof control;
        ssize_t got = recvmsg(fd_, &m, MSG_DONTWAIT);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return; // EAGAIN, or an error queued on the socket: nothing more now
        }
        if (m.msg_flags & MSG_TRUNC) {
            stats_.datagrams_rejected++;
            continue;
        }
        const size_t n = static_cast<size_t>(got);
        size_t seg = n;
        for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
            if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                int g;
                std::memcpy(&g, CMSG_DATA(c), sizeof g);
                if (g > 0)
                    seg = static_cast<size_t>(g);
            }
        if (seg == 0)
            continue; // an empty datagram: no header
        // Pass 1: which segments stay in place, and where the others are.
        const size_t count = (n + seg - 1) / seg;
        size_t tail = 0; // where rbuf_ starts in what was received
        for (size_t i = 0; i + 1 < niov; i++)
            tail += iov[i].iov_len;
        from_.assign(count, nullptr);
        for (size_t j = 0, slot_at = 0; j < count; j++) {
            size_t at = j * seg, len = std::min(seg, n - at);
            bool in_place = false;
            if (j < nslots && slot_at == at && len == kHeader + iov[2 * j + 1].iov_len) {
                SegHeader h;
                in_place = get_header(hdrs_.data() + j * kHeader, kHeader, h) && h.sender != self_ &&
                           std::make_pair(h.origin, h.offset) == key && h.chunk_len == gp->len &&
                           h.seg_bytes == gp->seg_bytes && h.seg == first + j;
            }
            if (j < nslots)
                slot_at += kHeader + iov[2 * j + 1].iov_len;
            if (in_place)
                continue;
            if (at >= tail) {
                from_[j] = rbuf_.data() + (at - tail);
            } else {
                gather(iov, niov, at, len, scratch_.data() + at);
                from_[j] = scratch_.data() + at;
            }
        }
        // Pass 2: store them in order.  What is stored may end chunks and
        // start others (and drop old ones), so the guessed chunk is looked
        // up again for each segment kept in place.
        for (size_t j = 0; j < count; j++) {
            size_t at = j * seg, len = std::min(seg, n - at);
            if (from_[j]) {
                segment(from_[j], len);
                continue;
            }
            uint16_t s = static_cast<uint16_t>(first + j);
            auto it = pending_.find(key);
            if (it == pending_.end() || it->second.buf != held) { // that chunk is gone: as if copied
                std::memcpy(scratch_.data() + at, hdrs_.data() + j * kHeader, kHeader);
                std::memcpy(scratch_.data() + at + kHeader, iov[2 * j + 1].iov_base, len - kHeader);
                segment(scratch_.data() + at, len);
                continue;
            }
            if (drop_filter && drop_filter(key.first, key.second, s))
                continue;
            Pending &pd = it->second;
            if (pd.missing == 0 || pd.have[s])
                continue; // duplicate
            stats_.segments_in_place++;
            stored(key, pd, s, segments(pd.len, pd.seg_bytes));
        }
    }
}

void Mcast::stored(const std::pair<uint64_t, uint64_t> &key, Pending &pd, uint16_t seg, uint32_t nsegs)
{
    pd.have[seg] = true;
    guess_ = seg + 1u < nsegs;
    guess_key_ = key;
    guess_seg_ = seg + 1u;
    if (--pd.missing == 0) {
        guess_ = false;
        stats_.chunks_received++;
        if (complete_)
            complete_(key.first, key.second);
    }
}

void Mcast::segment(const char *p, size_t n)
{
    SegHeader h;
    if (!get_header(p, n, h) || h.seg_bytes < 64 || h.chunk_len > kMaxDataPayload) {
        stats_.datagrams_rejected++;
        return;
    }
    if (h.sender == self_)
        return; // our own, looped back
    uint32_t nsegs = segments(h.chunk_len, h.seg_bytes);
    size_t from = static_cast<size_t>(h.seg) * h.seg_bytes;
    size_t want =
        h.seg < nsegs ? std::min<size_t>(h.seg_bytes, h.chunk_len - std::min<size_t>(from, h.chunk_len)) : 0;
    if (h.seg >= nsegs || n - kHeader != want) {
        stats_.datagrams_rejected++;
        return;
    }
    if (drop_filter && drop_filter(h.origin, h.offset, h.seg))
        return;
    auto key = std::make_pair(h.origin, h.offset);
    auto it = pending_.find(key);
    if (it == pending_.end()) {
        if (h.chunk_len > cfg_.max_pending) {
            stats_.chunks_dropped++;
            return;
        }
        // Oldest first out when full: chunks of sets this node is not in
        // are never claimed.
        while (pending_bytes_ + h.chunk_len > cfg_.max_pending && !pending_.empty()) {
            auto oldest =
                std::min_element(pending_.begin(), pending_.end(), [](const auto &a, const auto &b) {
                    return a.second.first < b.second.first;
                });
            pending_bytes_ -= oldest->second.len;
            pending_.erase(oldest);
            stats_.chunks_dropped++;
        }
        Pending pd;
        bool reused = false;
        pd.buf = buffers_->get(h.chunk_len, reused);
        if (reused)
            stats_.buffers_reused++;
        pd.len = h.chunk_len;
        pd.have.assign(nsegs, false);
        pd.missing = nsegs;
        pd.seg_bytes = h.seg_bytes;
        pd.first = std::chrono::steady_clock::now();
        pending_bytes_ += h.chunk_len;
        it = pending_.emplace(key, std::move(pd)).first;
    }
    Pending &pd = it->second;
    if (pd.len != h.chunk_len || pd.seg_bytes != h.seg_bytes) {
        stats_.datagrams_rejected++; // a different chunk under the same name: the seal decides
        return;
    }
    if (pd.missing == 0 || pd.have[h.seg])
        return; // duplicate
    std::memcpy(pd.buf.get() + from, p + kHeader, want);
    stored(key, pd, h.seg, nsegs);
}

std::shared_ptr<char[]> Mcast::take(uint64_t origin, uint64_t offset, size_t len, const ChunkSeal &seal)
{
    auto it = pending_.find({origin, offset});
    if (it == pending_.end() || it->second.missing != 0)
        return nullptr;
    auto buf = it->second.buf;
    size_t have = it->second.len;
    pending_bytes_ -= have;
    pending_.erase(it);
    if (have != len || !open_chunk(seal, buf.get(), have)) {
        log_.error(
            "multicast chunk %016llx+%llu does not match its seal (forged or corrupt): fetching it over "
            "the tree",
            static_cast<unsigned long long>(origin), static_cast<unsigned long long>(offset));
        return nullptr;
    }
    return buf;
}

void Mcast::forget(uint64_t origin, uint64_t offset)
{
    auto it = pending_.find({origin, offset});
    if (it == pending_.end())
        return;
    pending_bytes_ -= it->second.len;
    pending_.erase(it);
}

void Mcast::expire(std::chrono::steady_clock::duration age)
{
    auto limit = std::chrono::steady_clock::now() - age;
    for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.first < limit) {
            pending_bytes_ -= it->second.len;
            stats_.chunks_dropped++;
            it = pending_.erase(it);
        } else {
            ++it;
        }
    }
}

} // namespace storm::net
