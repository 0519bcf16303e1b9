// Mcast (lib/net/mcast.hpp): chunks cut into segments of datagrams and put
// back together.  It queues the chunks to send and cuts each into batches of
// segments; it receives the segments expected next straight into their
// chunk's buffer, stores the others, and hands whole chunks over once they
// match their seal.  Its socket (mcast_socket.hpp) moves the segments, the
// chunk buffers (mcast_buffers.cpp) hold them, and the sealing
// (mcast_cipher.cpp) opens them.
#include "lib/net/mcast.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/uio.h>

#include "lib/net/frame.hpp"
#include "lib/net/mcast_cipher.hpp"
#include "lib/net/mcast_socket.hpp"
#include "lib/net/wire.hpp"

namespace storm::net {
namespace {

// A segment: this 32-byte header, then its share of the chunk's bytes.
constexpr uint32_t kMagic = 0x53544d43; // "STMC"
constexpr size_t kHeader = 32;

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

} // namespace

Mcast::Mcast(event_base *base, const McastConfig &cfg, uint32_t self, Logger log)
    : cfg_(cfg), self_(self), log_(std::move(log)),
      // A few chunks: those being received, and those taken but not yet
      // written and passed on.
      buffers_(std::make_shared<ChunkBuffers>(8))
{
    if (cfg_.mtu < 576 || cfg_.mtu > 65535)
        throw std::invalid_argument("multicast MTU " + std::to_string(cfg_.mtu) + " outside 576-65535");
    if (std::string why = cipher_backend().error(); !why.empty())
        throw std::runtime_error("chunks cannot be sealed: " + why);
    socket_ = std::make_unique<McastSocket>(
        base, cfg_, log_,
        [this] {
            stats_.wakeups++;
            drain();
        },
        [this] { pump(); });
    rbuf_.resize(kMaxDatagram + 1);
    scratch_.resize(kMaxDatagram + 1);
    hdrs_.resize(kMaxGsoSegments * kHeader);
}

Mcast::~Mcast() = default;

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
            socket_->wait_writable();
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

bool Mcast::send_batch(Outgoing &o)
{
    const size_t seg_bytes = this->seg_bytes(), gso_size = seg_bytes + kHeader;
    const uint32_t nsegs = segments(o.data.len, seg_bytes);
    unsigned per_call = socket_->per_send(gso_size);
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
        switch (socket_->send(iov, 2 * k)) {
        case McastSocket::Sent::done:
            o.next_seg += k;
            continue;
        case McastSocket::Sent::busy:
            return false;
        case McastSocket::Sent::unbatch:
            per_call = socket_->per_send(gso_size);
            continue;
        case McastSocket::Sent::failed:
            break;
        }
        stats_.send_errors++;
        if (!warned_send_)
            log_.warning("multicast send to the group failed (%s); the nodes fetch the data over the tree",
                         std::strerror(errno));
        warned_send_ = true;
        o.next_seg = nsegs; // given up: the receivers ask for repairs
        return true;
    }
    warned_send_ = false;
    return true;
}

bool Mcast::reads_held() const noexcept { return socket_->reads_held(); }

void Mcast::hold_reads() { socket_->hold_reads(); }

void Mcast::resume_reads() { socket_->resume_reads(); }

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
        size_t seg = 0;
        bool truncated = false;
        ssize_t got = socket_->receive(iov, niov, seg, truncated);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return; // EAGAIN, or an error queued on the socket: nothing more now
        }
        if (truncated) {
            stats_.datagrams_rejected++;
            continue;
        }
        const size_t n = static_cast<size_t>(got);
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
        size_t charge = std::max<size_t>(h.chunk_len, kMcastChunkSize); // what a new buffer holds at least
        if (charge > cfg_.max_pending) {
            stats_.chunks_dropped++;
            return;
        }
        // Oldest first out when full, by the buffers' real sizes and by
        // count (tiny forged chunks would otherwise cost a buffer each
        // unchecked): chunks of sets this node is not in are never claimed.
        while ((pending_bytes_ + charge > cfg_.max_pending || pending_.size() >= cfg_.max_pending_chunks) &&
               !pending_order_.empty()) {
            auto oldest = pending_.find(pending_order_.front());
            pending_order_.pop_front();
            if (oldest != pending_.end()) {
                drop_pending(oldest);
                stats_.chunks_dropped++;
            }
        }
        Pending pd;
        bool reused = false;
        pd.buf = buffers_->get(h.chunk_len, reused, pd.capacity);
        if (reused)
            stats_.buffers_reused++;
        pd.len = h.chunk_len;
        pd.have.assign(nsegs, false);
        pd.missing = nsegs;
        pd.seg_bytes = h.seg_bytes;
        pd.first = std::chrono::steady_clock::now();
        pending_bytes_ += pd.capacity;
        it = pending_.emplace(key, std::move(pd)).first;
        pending_order_.push_back(key);
        // Keys of chunks taken or forgotten meanwhile linger in the order
        // until they reach its front: compact it when they dominate.
        if (pending_order_.size() > 2 * pending_.size() + 1024) {
            std::deque<std::pair<uint64_t, uint64_t>> live;
            for (const auto &k : pending_order_)
                if (pending_.count(k))
                    live.push_back(k);
            pending_order_.swap(live);
        }
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
    drop_pending(it);
    if (have != len || !open_chunk(seal, buf.get(), have)) {
        log_.warning(
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
    drop_pending(it);
}

void Mcast::drop_pending(std::map<std::pair<uint64_t, uint64_t>, Pending>::iterator it)
{
    pending_bytes_ -= it->second.capacity;
    pending_.erase(it);
}

void Mcast::expire(std::chrono::steady_clock::duration age)
{
    auto limit = std::chrono::steady_clock::now() - age;
    for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.first < limit) {
            pending_bytes_ -= it->second.capacity;
            stats_.chunks_dropped++;
            it = pending_.erase(it);
        } else {
            ++it;
        }
    }
}

} // namespace storm::net
