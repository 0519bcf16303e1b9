// Unit tests of the multicast data path of XFER-AND-SIGNAL
// (lib/net/mcast.*, Engine's xfer_mc): agents in one process, in a network
// namespace of the test's own whose loopback carries multicast.  Fault
// injection: lost segments (repaired over the tree, in order), forged
// chunks (refused by the seal, repaired), malformed datagrams, a dead node.
#include "tests/unit/cmocka.hpp"

#include <arpa/inet.h>
#include <csignal>
#include <cstring>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/common/signals.hpp"
#include "lib/common/timeval.hpp"
#include "lib/net/mcast.hpp"
#include "lib/net/wire.hpp"
#include "tests/unit/prim_fixture.hpp"
#include "tests/unit/private_network.hpp"

using namespace prim_fixture;

namespace {

constexpr uint16_t kPort = 47123;

net::McastConfig mcast_config()
{
    net::McastConfig m;
    inet_pton(AF_INET, "239.255.77.1", &m.group);
    m.port = kPort;
    m.iface.s_addr = htonl(INADDR_LOOPBACK);
    m.loop = true; // every agent of the test shares this host
    m.wait = 30ms;
    return m;
}

// Runs the loop for a while (datagrams sent from outside the engines).
void settle(Cluster &cl, std::chrono::milliseconds t)
{
    cl.initiator->run_until([] { return false; }, t);
}

// A datagram of the multicast format, sent to the group from a socket of
// our own: the forger's and the malformed-input tests' tool.
struct Injector {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    Injector()
    {
        in_addr lo{htonl(INADDR_LOOPBACK)};
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo);
    }
    ~Injector() { close(fd); }
    void raw(const std::string &d)
    {
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_port = htons(kPort);
        inet_pton(AF_INET, "239.255.77.1", &to.sin_addr);
        assert_true(sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr *>(&to), sizeof to) ==
                    static_cast<ssize_t>(d.size()));
    }
    // The 32-byte segment header (lib/net/mcast.hpp), written out here.
    static std::string header(uint32_t magic, uint32_t sender, uint64_t origin, uint64_t offset, uint32_t len,
                              uint16_t seg, uint16_t seg_bytes)
    {
        net::Writer w;
        w.u32(magic);
        w.u32(sender);
        w.u64(origin);
        w.u64(offset);
        w.u32(len);
        w.u16(seg);
        w.u16(seg_bytes);
        return w.take();
    }
};
constexpr uint32_t kMagic = 0x53544d43;

// Sends one chunk from agent `head`, which heads `set`, with a chosen origin.
XferResult send_chunk_from(Cluster &cl, unsigned head, const RangeSet &set, const std::string &ev,
                           uint64_t origin, const std::string &data)
{
    auto buf = std::make_shared<const std::string>(data);
    bool done = false;
    XferResult res;
    cl.agents[head]->send_chunk(set, 2, 2000ms, ev, origin, 0, buf->size(),
                                net::DataRef{buf, buf->data(), buf->size()}, [&](const XferResult &r) {
                                    res = r;
                                    done = true;
                                });
    assert_true(cl.initiator->run_until([&] { return done; }, 20000ms));
    return res;
}

void test_data_by_multicast(void **)
{
    Cluster cl(8, 2, 2000ms, mcast_config());
    std::string big = pattern((1 << 20) + 123, 1); // 17 chunks of 64 KiB
    auto r = cl.xfer(RangeSet::range(0, 8), "big", big);
    assert_true(r.ok);
    for (auto &a : cl.agents) {
        std::string d;
        assert_int_equal(a->test_event("big", &d), 1);
        assert_true(d == big);
    }
    // Agent 0 heads the set: it multicast every chunk; the others took
    // every chunk from multicast or, rarely, from their parent.
    assert_int_equal(cl.agents[0]->mcast_counters().sent, 17);
    for (unsigned i = 1; i < 8; ++i) {
        auto &c = cl.agents[i]->mcast_counters();
        assert_int_equal(c.sent, 0);
        assert_int_equal(c.received + c.repaired, 17);
        assert_true(c.received >= 1);
        // Segments after a chunk's first batch (the kernel's, of up to 64
        // KiB) went straight into their chunk.
        assert_true(cl.agents[i]->mcast()->stats().segments_in_place > 0);
        // Each announcement drained the socket, which was held in between
        // (Engine::mc_reads), and is still held after the last one.
        assert_true(cl.agents[i]->mcast()->reads_held());
    }
    // The head took no announcement: it never held.
    assert_false(cl.agents[0]->mcast()->reads_held());
    // The same counts, as variables COMPARE-AND-WRITE can test.
    assert_true(cl.caw(RangeSet::range(1, 8), "mcast:received", Relation::ge, 1, std::nullopt).holds);
    // A transfer below min_chunk stays on the tree.
    assert_true(cl.xfer(RangeSet::range(0, 8), "small", "0123456789").ok);
    assert_int_equal(cl.agents[0]->mcast_counters().sent, 17);
    // So does one to two nodes.
    assert_true(cl.xfer(RangeSet::range(3, 5), "pair", big).ok);
    assert_int_equal(cl.agents[3]->mcast_counters().sent, 0);
    assert_int_equal(cl.agents[4]->test_event("pair"), 1);
}

void test_lost_segments_repaired_in_order(void **)
{
    Cluster cl(8, 2, 2000ms, mcast_config());
    // Agent 3 loses the even chunks, agent 6 everything.
    cl.agents[3]->mcast()->drop_filter = [](uint64_t, uint64_t offset, uint32_t) {
        return (offset / (64 << 10)) % 2 == 0;
    };
    cl.agents[6]->mcast()->drop_filter = [](uint64_t, uint64_t, uint32_t) { return true; };
    // Agent 3 takes the transfer through a sink, which must see the chunks
    // in order of offset although the odd ones came first (sealed, by
    // multicast; the even ones over the tree).
    std::vector<uint64_t> offsets;
    std::vector<bool> sealed;
    std::string sunk;
    cl.agents[3]->add_sink("ordered:", [&](const std::string &, uint64_t, uint64_t offset, uint64_t,
                                           std::string_view data, bool s) {
        offsets.push_back(offset);
        sealed.push_back(s);
        sunk.append(data);
        return std::string();
    });
    std::string big = pattern(1 << 20, 2);
    auto r = cl.xfer(RangeSet::range(0, 8), "ordered:x", big);
    assert_true(r.ok);
    assert_true(sunk == big);
    assert_int_equal(offsets.size(), 16);
    for (size_t i = 1; i < offsets.size(); ++i)
        assert_true(offsets[i] > offsets[i - 1]);
    for (size_t i = 0; i < offsets.size(); ++i)
        assert_true(sealed[i] == ((offsets[i] / (64 << 10)) % 2 == 1));
    std::string d;
    assert_int_equal(cl.agents[6]->test_event("ordered:x", &d), 1);
    assert_true(d == big);
    assert_int_equal(cl.agents[3]->mcast_counters().repaired, 8);
    assert_int_equal(cl.agents[3]->mcast_counters().received, 8);
    assert_int_equal(cl.agents[6]->mcast_counters().repaired, 16);
    assert_int_equal(cl.agents[6]->mcast_counters().received, 0);
    uint64_t served = 0;
    for (auto &a : cl.agents)
        served += a->mcast_counters().repairs_served;
    assert_int_equal(served, 24);
}

// An asynchronous sink may keep a multicast chunk's bytes in their buffer
// (Engine::AsyncChunkSink): its owner is given, and the bytes stay as they
// came while it is held, through later transfers that take buffers of the
// same set.  A repair's bytes, which lie in a connection's input, come
// without an owner.
void test_async_sink_keeps_multicast_buffers(void **)
{
    Cluster cl(8, 2, 2000ms, mcast_config());
    cl.agents[3]->mcast()->drop_filter = [](uint64_t, uint64_t offset, uint32_t) {
        return (offset / (64 << 10)) % 2 == 0;
    };
    struct Kept {
        uint64_t offset;
        bool sealed;
        storm::net::DataRef ref;
    };
    std::vector<Kept> kept;
    cl.agents[3]->add_async_sink("kept:", [&](const std::string &, uint64_t, uint64_t offset, uint64_t,
                                              const storm::net::DataRef &data, bool s,
                                              storm::prim::Engine::ChunkDone done) {
        kept.push_back({offset, s, data});
        done("");
    });
    std::string big = pattern(1 << 20, 5);
    assert_true(cl.xfer(RangeSet::range(0, 8), "kept:a", big).ok);
    assert_true(cl.xfer(RangeSet::range(0, 8), "kept:b", pattern(1 << 20, 6)).ok);
    assert_int_equal(kept.size(), 32);
    std::string first;
    for (size_t i = 0; i < 16; ++i) {
        const Kept &k = kept[i];
        assert_true(k.sealed == ((k.offset / (64 << 10)) % 2 == 1));
        assert_true((k.ref.owner != nullptr) == k.sealed);
        first.append(k.ref.owner ? std::string(k.ref.ptr, k.ref.len) : big.substr(k.offset, k.ref.len));
    }
    assert_true(first == big);
}

void test_forged_chunk_refused(void **)
{
    Cluster cl(6, 2, 2000ms, mcast_config());
    const uint64_t origin = 0xf00d;
    std::string truth = pattern(40000, 3), forged = pattern(40000, 4);
    const uint16_t seg_bytes = 1500 - 60;
    // A forger who knows the next transfer's name sends a whole chunk of
    // its own first, under the head's index.
    Injector inj;
    for (uint16_t s = 0; s * seg_bytes < forged.size(); ++s) {
        size_t n = std::min<size_t>(seg_bytes, forged.size() - s * seg_bytes);
        inj.raw(Injector::header(kMagic, 0, origin, 0, 40000, s, seg_bytes) +
                forged.substr(s * seg_bytes, n));
    }
    settle(cl, 50ms);
    for (unsigned i = 1; i < 6; ++i)
        assert_int_equal(cl.agents[i]->mcast()->stats().chunks_received, 1);
    auto r = send_chunk_from(cl, 0, RangeSet::range(0, 6), "truth", origin, truth);
    assert_true(r.ok);
    for (unsigned i = 0; i < 6; ++i) {
        std::string d;
        assert_int_equal(cl.agents[i]->test_event("truth", &d), 1);
        assert_true(d == truth);
    }
    for (unsigned i = 1; i < 6; ++i)
        assert_int_equal(cl.agents[i]->mcast_counters().repaired, 1);
}

// A transfer streamed chunk by chunk (total 0, offsets are sequence
// numbers), as the broadcast service sends files: every chunk goes by
// multicast, and sinks get them in order although one node lost some.
void test_streamed_chunks(void **)
{
    Cluster cl(6, 2, 2000ms, mcast_config());
    cl.agents[4]->mcast()->drop_filter = [](uint64_t, uint64_t seq, uint32_t) { return seq == 1; };
    std::vector<std::vector<uint64_t>> seqs(6);
    std::vector<std::vector<bool>> sealed(6);
    std::vector<std::string> got(6);
    for (unsigned i = 0; i < 6; ++i)
        cl.agents[i]->add_sink("stream:", [&, i](const std::string &, uint64_t, uint64_t seq, uint64_t total,
                                                 std::string_view data, bool s) {
            assert_int_equal(total, 0);
            seqs[i].push_back(seq);
            sealed[i].push_back(s);
            got[i].append(data);
            return std::string();
        });
    std::string whole;
    int done = 0;
    for (uint64_t seq = 0; seq < 4; ++seq) {
        auto buf = std::make_shared<const std::string>(pattern(20000 + seq * 1000, 10 + seq));
        whole += *buf;
        cl.agents[0]->send_chunk(RangeSet::range(0, 6), 1, 2000ms, "stream:f", 0xabc, seq, 0,
                                 net::DataRef{buf, buf->data(), buf->size()}, [&](const XferResult &r) {
                                     assert_true(r.ok);
                                     ++done;
                                 });
    }
    assert_true(cl.initiator->run_until([&] { return done == 4; }, 20000ms));
    assert_int_equal(cl.agents[0]->mcast_counters().sent, 4);
    for (unsigned i = 0; i < 6; ++i) {
        assert_int_equal(seqs[i].size(), 4);
        for (uint64_t k = 0; k < 4; ++k)
            assert_int_equal(seqs[i][k], k);
        // Sealed: what came by multicast; not the sender's own, nor what
        // agent 4 lost and got over the tree.
        for (uint64_t k = 0; k < 4; ++k)
            assert_true(sealed[i][k] == (i != 0 && !(i == 4 && k == 1)));
        assert_true(got[i] == whole);
    }
    assert_int_equal(cl.agents[4]->mcast_counters().repaired, 1);
}

// Chunks received but never announced (sets this node is not in) are
// bounded: the oldest go first beyond max_pending, and all after expire().
void test_pending_bounded(void **)
{
    event_base *base = event_base_new();
    net::McastConfig cfg = mcast_config();
    // Room for two chunk buffers (each at least kMcastChunkSize, whatever
    // the chunk's length), not three.
    cfg.max_pending = 2 * net::kMcastChunkSize + net::kMcastChunkSize / 2;
    auto m = std::make_unique<net::Mcast>(base, cfg, 7, Logger("bounded"));
    Injector inj;
    const uint16_t seg_bytes = 1500 - 60;
    auto whole_chunk = [&](uint64_t origin, uint32_t len) {
        for (uint16_t s = 0; s * seg_bytes < len; ++s) {
            size_t n = std::min<size_t>(seg_bytes, len - s * seg_bytes);
            inj.raw(Injector::header(kMagic, 1, origin, 0, len, s, seg_bytes) + std::string(n, 'x'));
        }
    };
    auto settle_base = [&] {
        timeval tv{0, 50000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    };
    whole_chunk(1, 40000);
    whole_chunk(2, 40000);
    settle_base();
    assert_int_equal(m->stats().chunks_received, 2);
    assert_true(m->complete(1, 0) && m->complete(2, 0));
    whole_chunk(3, 40000); // a third buffer does not fit: chunk 1, the oldest, goes
    settle_base();
    assert_int_equal(m->stats().chunks_dropped, 1);
    assert_false(m->complete(1, 0));
    assert_true(m->complete(2, 0) && m->complete(3, 0));
    whole_chunk(4, 3 * net::kMcastChunkSize); // larger than the cap alone: refused, nothing evicted
    settle_base();
    assert_false(m->complete(4, 0));
    assert_true(m->complete(2, 0) && m->complete(3, 0));
    m->expire(std::chrono::seconds(0));
    assert_false(m->complete(2, 0) || m->complete(3, 0));
    // A chunk taken with a seal it does not match is dropped, not returned.
    whole_chunk(5, 3000);
    settle_base();
    net::ChunkSeal wrong{};
    assert_null(m->take(5, 0, 3000, wrong).get());
    assert_false(m->complete(5, 0));
    m.reset();
    event_base_free(base);
}

// Forged tiny chunks (issue 39, hole 5): 20,000 datagrams of 96 bytes, each
// a new (origin, offset), one datagram reaching every agent.  Each costs a
// buffer of kMcastChunkSize, counted as such: at most max_pending_chunks
// of them and max_pending bytes are held, however many come.
void test_forged_tiny_chunks_bounded(void **)
{
    // By real size first (32 buffers), then by count (64 chunks).
    for (auto [chunks, bytes, most_allowed] :
         {std::tuple<size_t, size_t, size_t>{64, 32 * net::kMcastChunkSize, 32},
          std::tuple<size_t, size_t, size_t>{64, 1024 * net::kMcastChunkSize, 64}}) {
        event_base *base = event_base_new();
        net::McastConfig cfg = mcast_config();
        cfg.max_pending_chunks = chunks;
        cfg.max_pending = bytes;
        auto m = std::make_unique<net::Mcast>(base, cfg, 7, Logger("forged"));
        Injector inj;
        size_t most_chunks = 0, most_bytes = 0;
        auto settle = [&](long us) {
            timeval tv{0, us};
            event_base_loopexit(base, &tv);
            event_base_dispatch(base);
            most_chunks = std::max(most_chunks, m->pending_chunks());
            most_bytes = std::max(most_bytes, m->pending_bytes());
        };
        for (uint64_t i = 0; i < 20000; ++i) {
            inj.raw(Injector::header(kMagic, 1, 1000 + i, i * 4096, 96, 0, 1440) + std::string(96, 'f'));
            if (i % 500 == 499)
                settle(2000);
        }
        settle(50000);
        assert_true(m->stats().chunks_received > 1000); // they did arrive
        assert_true(most_chunks <= most_allowed);
        assert_true(most_bytes <= cfg.max_pending);
        assert_true(m->stats().chunks_dropped >= m->stats().chunks_received - most_allowed);
        m.reset();
        event_base_free(base);
    }
}

// A parent speaking the frames itself: an announcement whose bytes never
// come by multicast is asked for (xfer_nack) and applied from the repair;
// one whose repair never comes is dropped after three timeouts.
void test_repair_and_give_up(void **)
{
    Cluster cl(4, 2, 200ms, mcast_config());
    std::vector<std::pair<net::MsgType, uint64_t>> got; // frames the fake parent received
    auto parent = net::Connection::connect(cl.base, cl.table[2], 2, cl.auth);
    parent->on_frame([&](net::Connection &, const net::FrameHeader &h, std::string_view) {
        got.emplace_back(h.type, h.op);
    });
    auto announce = [&](uint64_t op, const std::string &ev, const std::string *data) {
        net::Writer w;
        RangeSet::single(2).encode(w);
        Route{2, 200}.encode(w);
        w.u64(0x5eed);
        w.bytes(ev);
        w.u64(0);
        w.u64(20000);
        w.u32(20000);
        unsigned char seal[32] = {};
        w.raw(seal, sizeof seal);
        w.bytes(data ? *data : std::string());
        parent->send(net::MsgType::xfer_mc, op, w.data());
    };
    auto has = [&](net::MsgType t, uint64_t op) {
        for (auto &f : got)
            if (f.first == t && f.second == op)
                return true;
        return false;
    };
    std::string data = pattern(20000, 9);
    announce(41, "fixed", nullptr);
    assert_true(cl.initiator->run_until([&] { return has(net::MsgType::xfer_nack, 41); }, 2000ms));
    assert_int_equal(cl.agents[2]->waiting_announcements(), 1);
    announce(41, "fixed", &data); // the repair
    assert_true(cl.initiator->run_until([&] { return has(net::MsgType::xfer_ack, 41); }, 2000ms));
    std::string d;
    assert_int_equal(cl.agents[2]->test_event("fixed", &d), 1);
    assert_true(d == data);
    assert_int_equal(cl.agents[2]->mcast_counters().repaired, 1);
    // Another one, never repaired: dropped, never answered.
    announce(42, "lost", nullptr);
    assert_true(cl.initiator->run_until([&] { return has(net::MsgType::xfer_nack, 42); }, 2000ms));
    assert_true(cl.initiator->run_until([&] { return cl.agents[2]->waiting_announcements() == 0; }, 3000ms));
    settle(cl, 100ms);
    assert_false(has(net::MsgType::xfer_ack, 42));
    assert_int_equal(cl.agents[2]->test_event("lost"), 0);
    parent->close("test over");
}

void test_malformed_datagrams(void **)
{
    Cluster cl(4, 2, 2000ms, mcast_config());
    Injector inj;
    inj.raw("short");
    inj.raw(Injector::header(0x12345678, 99, 1, 0, 100, 0, 1440) + std::string(100, 'x')); // bad magic
    inj.raw(Injector::header(kMagic, 99, 1, 0, 100, 1, 1440) + std::string(100, 'x')); // segment past the end
    inj.raw(Injector::header(kMagic, 99, 1, 0, 3000, 0, 1440) + std::string(10, 'x')); // wrong length
    inj.raw(Injector::header(kMagic, 99, 1, 0, 64u << 20, 0, 1440) + std::string(1440, 'x')); // too big
    inj.raw(Injector::header(kMagic, 99, 1, 0, 100, 0, 10) + std::string(10, 'x'));           // tiny segments
    settle(cl, 50ms);
    for (unsigned i = 0; i < 4; ++i) {
        assert_int_equal(cl.agents[i]->mcast()->stats().datagrams_rejected, 6);
        assert_int_equal(cl.agents[i]->mcast()->stats().chunks_received, 0);
    }
    std::string big = pattern(300000, 5);
    assert_true(cl.xfer(RangeSet::range(0, 4), "after", big).ok);
    for (auto &a : cl.agents) {
        std::string d;
        assert_int_equal(a->test_event("after", &d), 1);
        assert_true(d == big);
    }
}

// Buffers come back when their last reference drops, up to `keep` of
// them, and each is handed out again for a chunk it can hold.
void test_chunk_buffers(void **)
{
    const size_t big = net::kMcastChunkSize + 1;
    auto set = std::make_shared<net::ChunkBuffers>(2);
    bool reused = true;
    auto a = set->get(100, reused); // kMcastChunkSize bytes
    assert_false(reused);
    auto b = set->get(big, reused); // its own size
    assert_false(reused);
    auto c = set->get(10, reused);
    assert_false(reused);
    char *pb = b.get();
    a.reset();
    b.reset();
    assert_int_equal(set->kept(), 2);
    c.reset(); // beyond keep: deleted
    assert_int_equal(set->kept(), 2);
    auto d = set->get(big, reused); // only b's holds it
    assert_true(reused);
    assert_ptr_equal(d.get(), pb);
    auto e = set->get(5, reused);
    assert_true(reused);
    auto f = set->get(5, reused);
    assert_false(reused);
    assert_int_equal(set->kept(), 0);
    // A forked child does not inherit them (slurmd forks for every step):
    // reading one there is a segmentation fault.
    d.get()[0] = 'x';
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); // not cmocka's handler
        volatile char c = d.get()[0];
        (void)c;
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    // Buffers that outlive their set are deleted (ASan would tell).
    set.reset();
    d.reset();
    e.reset();
    f.reset();
}

// drain() receives the segment it expects next (the one after the last
// stored) straight into its chunk.  Segments that come out of order, twice,
// mixed with another chunk's, or of another size (spilling over the slots
// set up for the expected one) must still land where they belong, and a
// forged one that looks expected must still fail the chunk's seal.
void test_segments_out_of_order(void **)
{
    event_base *base = event_base_new();
    {
        net::Mcast m(base, mcast_config(), 7, Logger("test"));
        std::vector<std::pair<uint64_t, uint64_t>> done;
        m.on_complete([&](uint64_t o, uint64_t off) { done.emplace_back(o, off); });
        Injector inj;
        struct Chunk {
            uint64_t origin, offset;
            uint16_t seg_bytes;
            std::string data, wire;
            net::ChunkSeal seal;
        };
        auto make = [](uint64_t origin, uint64_t offset, size_t len, uint16_t sb, unsigned seed) {
            Chunk c{origin, offset, sb, pattern(len, seed), std::string(len, '\0'), {}};
            c.seal = net::seal_chunk(c.data.data(), len, c.wire.data());
            return c;
        };
        Chunk a = make(1, 0, 5 * 1440 + 100, 1440, 11); // 6 segments, the last short
        Chunk b = make(2, 0, 3 * 1460, 1460, 12);       // longer segments than a's
        Chunk c = make(1, a.data.size(), 2 * 1440, 1440, 13);
        auto send = [&](const Chunk &k, uint16_t s, const std::string *forged = nullptr) {
            size_t from = static_cast<size_t>(s) * k.seg_bytes;
            std::string body = forged ? *forged : k.wire.substr(from, k.seg_bytes);
            inj.raw(Injector::header(kMagic, 99, k.origin, k.offset, static_cast<uint32_t>(k.wire.size()), s,
                                     k.seg_bytes) +
                    body);
            usleep(2000);
            m.drain(); // one datagram at a time: each is stored before the next is received
        };
        send(a, 0);
        send(b, 0); // expected: a's 1; b's bigger segment spills over a's slots
        send(a, 1); // expected: b's 1
        send(a, 2); // expected, in place
        send(a, 2); // twice
        send(a, 4); // a's 3 was expected: lands in its slot, stored at 4
        send(a, 3); // a's 5 was expected
        send(b, 2);
        send(b, 1);
        assert_int_equal(done.size(), 1); // b
        send(a, 5);
        assert_int_equal(done.size(), 2);
        assert_int_equal(m.stats().chunks_received, 2);
        assert_int_equal(m.stats().datagrams_rejected, 0);
        assert_int_equal(m.stats().segments_in_place, 1); // a's 2, the first time
        for (const Chunk *k : {&a, &b}) {
            auto got = m.take(k->origin, k->offset, k->data.size(), k->seal);
            assert_non_null(got.get());
            assert_true(std::string(got.get(), k->data.size()) == k->data);
        }
        // c: its second segment is forged but looks like the one expected,
        // so it is kept in place; the seal refuses the chunk.
        send(c, 0);
        std::string forged(1440, 'F');
        send(c, 1, &forged);
        assert_int_equal(done.size(), 3);
        assert_int_equal(m.stats().segments_in_place, 2);
        assert_null(m.take(c.origin, c.offset, c.data.size(), c.seal).get());
        // Sent again, truly, it is whole and opens.
        send(c, 0);
        send(c, 1);
        auto got = m.take(c.origin, c.offset, c.data.size(), c.seal);
        assert_non_null(got.get());
        assert_true(std::string(got.get(), c.data.size()) == c.data);
    }
    event_base_free(base);
}

// Held reads (Mcast::hold_reads): datagrams wait in the socket, unread and
// unlost, until a drain(), resume_reads() or the end of the hold.
void test_hold_reads(void **)
{
    event_base *base = event_base_new();
    auto run_for = [base](std::chrono::milliseconds t) {
        timeval tv = to_timeval(t);
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    };
    {
        net::McastConfig cfg = mcast_config();
        cfg.hold = 150ms;
        net::Mcast m(base, cfg, 7, Logger("test"));
        unsigned done = 0;
        m.on_complete([&](uint64_t, uint64_t) { done++; });
        Injector inj;
        // A one-segment chunk at `offset` of origin 1.
        auto send = [&](uint64_t offset) {
            inj.raw(Injector::header(kMagic, 99, 1, offset, 100, 0, 1440) + std::string(100, 'x'));
        };
        // Watched: the datagram wakes the loop.
        send(0);
        run_for(50ms);
        assert_int_equal(done, 1);
        assert_int_equal(m.stats().wakeups, 1);
        // Held: it waits, until drain() reads it.
        m.hold_reads();
        assert_true(m.reads_held());
        send(100);
        run_for(50ms);
        assert_int_equal(done, 1);
        assert_int_equal(m.stats().wakeups, 1);
        m.drain();
        assert_int_equal(done, 2);
        // Until resume_reads().
        send(200);
        run_for(30ms);
        assert_int_equal(done, 2);
        m.resume_reads();
        assert_false(m.reads_held());
        run_for(30ms);
        assert_int_equal(done, 3);
        assert_int_equal(m.stats().wakeups, 2);
        // Until the hold's end, which each hold_reads() puts off.
        m.hold_reads();
        send(300);
        run_for(100ms);
        m.hold_reads();
        run_for(100ms);
        assert_int_equal(done, 3);
        assert_true(m.reads_held());
        run_for(100ms);
        assert_false(m.reads_held());
        assert_int_equal(done, 4);
        assert_int_equal(m.stats().chunks_received, 4);
        assert_int_equal(m.stats().chunks_dropped, 0);
    }
    event_base_free(base);
}

void test_dead_node(void **)
{
    Cluster cl(8, 2, 500ms, mcast_config());
    cl.agents[5].reset();
    std::string big = pattern(500000, 6);
    auto r = cl.xfer(RangeSet::range(0, 8), "ev", big);
    assert_false(r.ok);
    assert_string_equal(r.failed.str().c_str(), "5");
    for (unsigned i = 0; i < 8; ++i) {
        if (i == 5)
            continue;
        std::string d;
        assert_int_equal(cl.agents[i]->test_event("ev", &d), 1);
        assert_true(d == big);
    }
}

void test_seal(void **)
{
    std::string data = pattern(100000, 7), wire(data.size(), '\0');
    net::ChunkSeal s = net::seal_chunk(data.data(), data.size(), wire.data());
    assert_true(wire != data);
    std::string copy = wire;
    assert_true(net::open_chunk(s, copy.data(), copy.size()));
    assert_true(copy == data);
    copy = wire;
    copy[5000] ^= 1;
    assert_false(net::open_chunk(s, copy.data(), copy.size()));
    net::ChunkSeal other = net::seal_chunk(data.data(), data.size(), copy.data());
    assert_true(std::memcmp(other.key, s.key, sizeof s.key) != 0); // a fresh key per chunk
    copy = wire;
    assert_false(net::open_chunk(other, copy.data(), copy.size()));
    in_addr g;
    uint16_t port;
    net::parse_mcast_group("239.255.77.1:6831", g, port);
    assert_int_equal(port, 6831);
    for (const char *bad : {"10.0.0.1:6831", "239.255.77.1", "239.255.77.1:0", "239.255.77.1:70000", "x:1",
                            "239.255.77.1:12a"}) {
        bool threw = false;
        try {
            net::parse_mcast_group(bad, g, port);
        } catch (const std::invalid_argument &) {
            threw = true;
        }
        assert_true(threw);
    }
}

// Both AES-GCM implementations compute the same: what one seals the other
// opens, in place, chunks (empty, one segment, odd sizes) and datagrams
// alike, and each refuses a changed byte or tag.  Where the build has
// Intel's library and the CPU has its VAES code, that library is chosen.
void test_cipher_implementations(void **)
{
    const net::Cipher chosen = net::cipher();
#ifdef STORM_WITH_IPSEC_MB
    if (__builtin_cpu_supports("vaes") && __builtin_cpu_supports("vpclmulqdq") &&
        __builtin_cpu_supports("avx512f"))
        assert_int_equal(static_cast<int>(chosen), static_cast<int>(net::Cipher::ipsec_mb));
#endif
    std::vector<net::Cipher> have{net::Cipher::openssl};
    if (net::select_cipher(net::Cipher::ipsec_mb))
        have.push_back(net::Cipher::ipsec_mb);
    else
        assert_int_equal(static_cast<int>(chosen), static_cast<int>(net::Cipher::openssl));
    print_message("AES-GCM here: %zu implementation(s), in use: %s\n", have.size(),
                  (net::select_cipher(chosen), net::cipher_description().c_str()));
    unsigned char key[net::kMcastKey];
    for (size_t i = 0; i < sizeof key; ++i)
        key[i] = static_cast<unsigned char>(i * 13 + 5);
    for (size_t n : {size_t{0}, size_t{1}, size_t{1440}, size_t{100003}, size_t{262144}}) {
        std::string data = pattern(n, 3);
        for (net::Cipher by : have) {
            for (net::Cipher to : have) {
                assert_true(net::select_cipher(by));
                std::string wire(n, '\0');
                net::ChunkSeal seal = net::seal_chunk(data.data(), n, wire.data());
                std::string d = net::seal_datagram(key, n + 1, "HDR", data.substr(0, 1000));
                assert_true(net::select_cipher(to));
                std::string copy = wire;
                assert_true(net::open_chunk(seal, copy.data(), n));
                assert_true(copy == data);
                if (n > 0) {
                    copy = wire;
                    copy[n / 2] ^= 0x40;
                    assert_false(net::open_chunk(seal, copy.data(), n));
                }
                net::ChunkSeal bad = seal;
                bad.tag[15] ^= 1;
                copy = wire;
                assert_false(net::open_chunk(bad, copy.data(), n));
                uint64_t nonce = 0;
                std::string body;
                assert_true(net::open_datagram(key, d, 3, nonce, body));
                assert_int_equal(nonce, n + 1);
                assert_true(body == data.substr(0, 1000));
                d[1] ^= 1; // the clear header is authenticated too
                assert_false(net::open_datagram(key, d, 3, nonce, body));
            }
        }
    }
    assert_true(net::select_cipher(chosen));
}

// Short datagrams under a shared key: the clear header and the body are
// both authenticated; another key, a changed byte or a cut datagram fail.
// A GroupSocket member receives what another sends to the group.
void test_datagrams(void **)
{
    unsigned char key[net::kMcastKey], other[net::kMcastKey];
    for (size_t i = 0; i < sizeof key; ++i) {
        key[i] = static_cast<unsigned char>(i * 7 + 1);
        other[i] = static_cast<unsigned char>(i * 7 + 2);
    }
    std::string d = net::seal_datagram(key, 42, "HEAD", "the body");
    uint64_t nonce = 0;
    std::string body;
    assert_true(net::open_datagram(key, d, 4, nonce, body));
    assert_int_equal(nonce, 42);
    assert_string_equal(body.c_str(), "the body");
    assert_true(d.find("the body") == std::string::npos); // sealed
    assert_false(net::open_datagram(other, d, 4, nonce, body));
    for (size_t at : {size_t{0}, size_t{6}, d.size() - 20, d.size() - 1}) {
        std::string t = d;
        t[at] ^= 1;
        assert_false(net::open_datagram(key, t, 4, nonce, body));
    }
    assert_false(net::open_datagram(key, d.substr(0, d.size() - 1), 4, nonce, body));
    assert_false(net::open_datagram(key, "HEA", 4, nonce, body));
    // Over the group, on this namespace's loopback.
    event_base *base = event_base_new();
    in_addr group, lo;
    inet_pton(AF_INET, "239.255.77.3", &group);
    lo.s_addr = htonl(INADDR_LOOPBACK);
    std::vector<std::string> got;
    {
        net::GroupSocket member(base, group, kPort + 7, lo, true,
                                [&](std::string_view v) { got.emplace_back(v); });
        net::GroupSocket sender(base, group, kPort + 7, lo, true);
        assert_true(sender.send(d));
        assert_true(sender.send("x"));
        timeval tv{0, 100000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    event_base_free(base);
    assert_int_equal(got.size(), 2);
    assert_true(got[0] == d);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr = lo;
    to.sin_port = htons(9);
    assert_int_equal(net::local_address_towards(to).s_addr, lo.s_addr);
}

using test_helpers::private_network;

} // namespace

int main()
{
    storm::block_sigpipe();
    if (!private_network()) {
        std::fprintf(stderr, "test_mcast: needs root (a network namespace of its own): skipped\n");
        return 77;
    }
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_seal),
        cmocka_unit_test(test_cipher_implementations),
        cmocka_unit_test(test_datagrams),
        cmocka_unit_test(test_data_by_multicast),
        cmocka_unit_test(test_lost_segments_repaired_in_order),
        cmocka_unit_test(test_async_sink_keeps_multicast_buffers),
        cmocka_unit_test(test_forged_chunk_refused),
        cmocka_unit_test(test_streamed_chunks),
        cmocka_unit_test(test_pending_bounded),
        cmocka_unit_test(test_forged_tiny_chunks_bounded),
        cmocka_unit_test(test_repair_and_give_up),
        cmocka_unit_test(test_malformed_datagrams),
        cmocka_unit_test(test_chunk_buffers),
        cmocka_unit_test(test_segments_out_of_order),
        cmocka_unit_test(test_hold_reads),
        cmocka_unit_test(test_dead_node),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
