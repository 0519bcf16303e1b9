// UDP multicast of transfer chunks between node agents: the data path of
// large XFER-AND-SIGNALs where the network carries multicast (seed 000,
// section 2.4: the hardware broadcast STORM's primitives map onto).
//
// The tree of TCP connections (Engine) still carries every control frame,
// every answer and every repair: a chunk's announcement travels down the
// tree with a per-chunk key and tag (AES-GCM), and its bytes travel once,
// by multicast, from the node that heads the set to every agent of the
// group.  A node takes a chunk's bytes from multicast only if they match
// the tag its parent sent it over the authenticated connection; otherwise
// (lost, late, forged or corrupt) it asks its parent for them over that
// connection.
//
// Datagrams: one chunk is cut into segments of at most `mtu - 28` bytes
// (IPv4 and UDP headers), each a 32-byte header (McastHeader) and up to
// `mtu - 60` bytes of data.  Where the kernel supports it, segments leave in
// batches of up to 64 KiB per system call (UDP GSO) and arrive coalesced
// (UDP GRO); otherwise one datagram per system call.  A receiver takes the
// segments that follow the last one it stored, while their chunk is
// incomplete, straight into that chunk's buffer (a scatter list), and
// copies any other from where it came.  A node in a transfer reads the
// socket when a chunk's announcement comes (hold_reads), which follows the
// chunk's bytes: once per chunk rather than at every batch that arrives.
//
// Threading: everything runs on the event_base's thread.  Not thread safe.
//
// Files: mcast.cpp (Mcast: chunks cut into segments and put back together),
// mcast_socket.hpp/.cpp (the sockets: Mcast's with its GSO and GRO path,
// GroupSocket, the group's addresses), mcast_buffers.cpp (ChunkBuffers),
// mcast_cipher.hpp/.cpp (the sealing, and which AES-GCM backend does it:
// mcast_cipher_openssl.cpp or mcast_cipher_ipsec_mb.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <string>
#include <string_view>
#include <vector>

#include "lib/common/log.hpp"
#include "lib/net/connection.hpp"

struct event_base;
struct event;

namespace storm::net {

struct McastConfig {
    in_addr group{};                    // an IPv4 multicast group (224.0.0.0/4)
    uint16_t port = 0;                  // 0: multicast is off
    in_addr iface{};                    // this node's address: outgoing interface and membership
    unsigned mtu = 1500;                // of the network that carries the group
    bool loop = false;                  // deliver to this host's sockets too (several agents on one host)
    size_t min_chunk = 8u << 10;        // smaller transfers stay on the tree
    std::chrono::milliseconds wait{30}; // an announced chunk's bytes may lag this long before a repair
    size_t max_pending =
        256u << 20; // bytes of buffers held for chunks received, whole or not, not yet announced
    size_t max_pending_chunks = 4096;    // and at most this many such chunks (forged tiny ones included)
    size_t sndbuf = 256u << 10;          // bytes queued towards the link
    std::chrono::milliseconds hold{250}; // hold_reads(): at most this long
    bool enabled() const { return port != 0; }
};

// The chunk size initiators choose where the agents multicast (to more
// than 64 nodes: bcast::chunk_size_of halves it for fewer): an
// announcement every 0.75 MB, and no pipeline through the nodes to fill.
// It is 546 full segments at the usual MTU of 1500 (786,240 bytes), which
// fits a core's L2 cache with room to spare while it is decrypted and
// written.
//
// Every chunk costs each node an announcement, an answer, a wakeup or two
// and a write: a 12 MB storm-bcast to 256 virtual nodes (unshaped, on the
// 2-core machine the project is tested on) took 1.3-1.9 CPU-seconds of
// user time with chunks of 182 segments against 0.9-1.1 with this size or
// 728 segments, and 1.7-1.8 s against 2.0-2.3 s where neither run paid
// for the host taking freed memory back (which adds up to 1 s of system
// time to whichever run it falls on).  Where links are the limit, the
// larger chunk costs a little time instead, since a chunk is forwarded and
// written only once all of it has come: 12 MB to 64 nodes over links of
// 100 Mbit/s took 1.08 and 1.11 s with chunks of 182 segments, 1.24 and
// 1.28 s with this size (medians of two sets of 4 runs; the link's own
// time: 0.96 s).
//
// Each node writes a chunk at its place in the file.  On that machine,
// writes of 64 pages at offsets aligned to 64 pages cost the kernel's copy
// into the page cache several times what other sizes do (256 KiB chunks:
// 3.5-4.3 s, against 1.9-2.2 s with chunks of 63 or 45 pages or of 182
// segments; 50% of a profile's samples in that copy against 7%), so the
// size is not a multiple of the page size.  The cause was not traced
// further; elsewhere it was not measured.
constexpr uint32_t kMcastChunkSize = 546u * 1440u;

// "239.255.77.1:6831" -> group and port.  Throws std::invalid_argument
// naming what is wrong (not an address, not multicast, bad port).
void parse_mcast_group(const std::string &text, in_addr &group, uint16_t &port);

constexpr size_t kMcastKey = 16;
constexpr size_t kMcastTag = 16;
struct ChunkSeal {
    unsigned char key[kMcastKey];
    unsigned char tag[kMcastTag];
};
// Encrypts `len` bytes of `data` into `out` (AES-128-GCM) under a fresh
// random key, used for this chunk only; returns the key and the tag.
// Multicast reaches every host of the group, where any process may join
// it: the bytes travel encrypted, the key over the authenticated tree.
// Throws std::runtime_error if the cipher fails.
ChunkSeal seal_chunk(const char *data, size_t len, char *out);
// Decrypts in place; false (the bytes are then garbage) if they do not
// match the tag: forged, corrupt, or sealed under another key.
bool open_chunk(const ChunkSeal &seal, char *data, size_t len);

// Who computes AES-128-GCM in this process: Intel's multi-buffer crypto
// library where it was built in, libIPSec_MB.so.1 loads and the CPU has
// VAES and VPCLMULQDQ (AVX-512), else OpenSSL.  The output is the same
// either way.  cipher_description names it for logs.
enum class Cipher { openssl, ipsec_mb };
Cipher cipher();
std::string cipher_description();
// Tests: makes this process use `c`; false (nothing changed) where `c`
// cannot be used.
bool select_cipher(Cipher c);

// Short datagrams under a key the members share over the tree (gang
// strobes): AES-128-GCM with a 64-bit nonce the sender never repeats under
// one key (a counter), the clear header authenticated too:
//   header (clear) | u64 nonce | sealed body | 16-byte tag
// seal_datagram throws std::runtime_error if the cipher fails;
// open_datagram is false (body unusable) for a datagram too short, forged,
// corrupt or sealed under another key.
std::string seal_datagram(const unsigned char key[kMcastKey], uint64_t nonce, std::string_view header,
                          std::string_view body);
bool open_datagram(const unsigned char key[kMcastKey], std::string_view datagram, size_t header_len,
                   uint64_t &nonce, std::string &body);

// The local address the kernel sends from towards `to` (no packet leaves):
// the interface a pure initiator multicasts on.  Throws std::system_error.
in_addr local_address_towards(const sockaddr_in &to);

// A socket for short datagrams of a group: sends from `iface` (TTL 1,
// copies to this host's members too when `loop`); given `receive`, it
// joins the group on `iface` and calls it, on `base`'s loop, with each
// datagram of at most 2 KiB.  Throws std::system_error naming the step.
class GroupSocket {
public:
    GroupSocket(event_base *base, const in_addr &group, uint16_t port, const in_addr &iface, bool loop,
                std::function<void(std::string_view)> receive = nullptr);
    ~GroupSocket();
    GroupSocket(const GroupSocket &) = delete;
    GroupSocket &operator=(const GroupSocket &) = delete;
    // False (errno set) if the kernel did not take the whole datagram.
    bool send(std::string_view datagram);

private:
    static void on_readable(int, short, void *arg);
    int fd_ = -1;
    event *ev_ = nullptr;
    sockaddr_in to_{};
    std::function<void(std::string_view)> receive_;
};

struct McastStats {
    uint64_t chunks_sent = 0;
    uint64_t chunks_received = 0; // complete chunks assembled
    uint64_t datagrams_rejected = 0;
    uint64_t chunks_dropped = 0; // evicted incomplete or unclaimed, or over max_pending
    uint64_t send_errors = 0;
    uint64_t segments_in_place = 0; // received straight into their chunk (drain())
    uint64_t buffers_reused = 0;    // chunks received into a buffer an earlier chunk freed
    uint64_t wakeups = 0;           // times the socket's readiness woke the loop
};

// Chunk buffers that outlive their chunk: each one handed out goes back to
// the set when its last reference drops (on any thread), and the set keeps
// up to `keep` of them for the chunks to come, so a broadcast does not fault
// in fresh pages for every chunk (the allocator gives memory of this size
// back to the kernel when it is freed).  A buffer freed after the set is
// gone is deleted.  Buffers are not inherited by forked children (see
// mcast_buffers.cpp): a child of the process cannot read them.
class ChunkBuffers : public std::enable_shared_from_this<ChunkBuffers> {
public:
    explicit ChunkBuffers(size_t keep) : keep_(keep) { free_.reserve(keep); }
    ~ChunkBuffers();
    ChunkBuffers(const ChunkBuffers &) = delete;
    ChunkBuffers &operator=(const ChunkBuffers &) = delete;
    // A buffer of at least `len` bytes (at least kMcastChunkSize), not
    // zeroed; `reused` says whether it was one kept.
    std::shared_ptr<char[]> get(size_t len, bool &reused);
    // The same, and `capacity` is the buffer's real size (what it holds).
    std::shared_ptr<char[]> get(size_t len, bool &reused, size_t &capacity);
    size_t kept() const;

private:
    void put(char *p, size_t capacity) noexcept;
    const size_t keep_;
    mutable std::mutex mu_;
    std::vector<std::pair<size_t, char *>> free_; // capacity, buffer
};

class McastSocket;

class Mcast {
public:
    // Opens the socket, joins the group on cfg.iface and watches the
    // socket.  `self` is this agent's index: datagrams it sent itself are
    // ignored.  Throws std::system_error naming the step that failed.
    Mcast(event_base *base, const McastConfig &cfg, uint32_t self, Logger log);
    ~Mcast();
    Mcast(const Mcast &) = delete;
    Mcast &operator=(const Mcast &) = delete;

    // Hands the chunk (origin, offset) to the kernel, behind any chunk still
    // queued; `sent` is called once every byte was handed over, or given up
    // on after an error (the receivers then ask for repairs).  The data must
    // stay valid until then (data.owner keeps it).
    void send(uint64_t origin, uint64_t offset, DataRef data, std::function<void()> sent);

    // The chunk (origin, offset) of `len` bytes, decrypted, if it was
    // received whole and matches `seal`; it is then forgotten here.  A whole chunk that
    // does not match is dropped (logged).  Null otherwise.
    std::shared_ptr<char[]> take(uint64_t origin, uint64_t offset, size_t len, const ChunkSeal &seal);
    // Whether the chunk (origin, offset) was received whole (not checked).
    bool complete(uint64_t origin, uint64_t offset) const
    {
        auto it = pending_.find({origin, offset});
        return it != pending_.end() && it->second.missing == 0;
    }
    // Forgets what was received of the chunk (origin, offset).
    void forget(uint64_t origin, uint64_t offset);

    // Called when a chunk has been received whole.
    void on_complete(std::function<void(uint64_t origin, uint64_t offset)> f) { complete_ = std::move(f); }

    // Reads every datagram queued on the socket now.
    void drain();
    // Stops watching the socket until resume_reads(), or cfg.hold from now
    // (each call restarts that time): the datagrams wait in the socket's
    // buffer (32 MiB), and the next drain() reads them in one go.  A node
    // that knows when it will want the bytes (when their chunk's
    // announcement comes) is then woken once per chunk, not once per batch
    // of datagrams.  Chunks of transfers the node has no part in are read
    // late too, never lost while they fit in the buffer.  A 12 MB
    // storm-bcast to 256 virtual nodes on 2 cores (unshaped) caused about
    // 58,000 context switches and took 2.3-2.9 s reading at every batch,
    // about 16,000 and 1.5-2.0 s held.
    void hold_reads();
    // Watches the socket again: at once, if datagrams are waiting.
    void resume_reads();
    bool reads_held() const noexcept;
    // Drops incomplete chunks older than `age`.
    void expire(std::chrono::steady_clock::duration age);

    const McastStats &stats() const noexcept { return stats_; }
    // Chunks held unannounced, and the real size of their buffers.
    size_t pending_chunks() const noexcept { return pending_.size(); }
    size_t pending_bytes() const noexcept { return pending_bytes_; }
    const McastConfig &config() const noexcept { return cfg_; }
    // Tests: datagram segments for which this returns true are dropped on
    // arrival, as if lost.
    std::function<bool(uint64_t origin, uint64_t offset, uint32_t seg)> drop_filter;

private:
    struct Pending {
        std::shared_ptr<char[]> buf; // not zeroed: every byte is written before it is read
        size_t len = 0;
        size_t capacity = 0; // buf's real size, what counts against max_pending
        std::vector<bool> have;
        uint32_t missing = 0;
        uint16_t seg_bytes = 0;
        std::chrono::steady_clock::time_point first;
    };
    struct Outgoing {
        uint64_t origin, offset;
        DataRef data;
        uint32_t next_seg = 0;
        std::function<void()> sent;
    };
    size_t seg_bytes() const noexcept;     // a full segment's data: mtu - 60
    void segment(const char *p, size_t n); // a header and its data, contiguous
    void stored(const std::pair<uint64_t, uint64_t> &key, Pending &pd, uint16_t seg, uint32_t nsegs);
    void pump();
    bool send_batch(Outgoing &o); // false: would block

    McastConfig cfg_;
    uint32_t self_;
    Logger log_;
    std::unique_ptr<McastSocket> socket_; // mcast_socket.hpp: the socket, its events, GSO and GRO
    std::map<std::pair<uint64_t, uint64_t>, Pending> pending_;
    std::shared_ptr<ChunkBuffers> buffers_;                   // where Pending::buf comes from
    size_t pending_bytes_ = 0;                                // the buffers' capacities
    std::deque<std::pair<uint64_t, uint64_t>> pending_order_; // keys by arrival (some gone): oldest first
    void drop_pending(std::map<std::pair<uint64_t, uint64_t>, Pending>::iterator it);
    std::deque<Outgoing> out_;
    std::vector<char> rbuf_;    // what drain() does not receive in place
    std::vector<char> scratch_; // drain(): segments not received in place, copied whole
    std::vector<char> hdrs_;    // drain(): the headers of the segments received in place
    // drain(): where each segment of a datagram is stored from (null: in place)
    std::vector<const char *> from_;
    // The segment expected next: the one after the last stored, while its
    // chunk is incomplete.  drain() receives the datagrams straight into
    // that chunk's buffer, from there on.
    bool guess_ = false;
    std::pair<uint64_t, uint64_t> guess_key_;
    uint32_t guess_seg_ = 0;
    std::function<void(uint64_t, uint64_t)> complete_;
    McastStats stats_;
    bool warned_send_ = false;
};

} // namespace storm::net
