// Unit tests of the swap of a task's queues (switch_rdma/window.*): what
// save_share keeps, what restore_share writes back, across ring
// wrap-around, and the corrupt index pairs it refuses.
#include "tests/unit/cmocka.hpp"

#include <cstring>
#include <vector>

#include "switch_rdma/layout.hpp"
#include "switch_rdma/window.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm::rdma;
using test_helpers::contains;
using test_helpers::error_of;

namespace {

constexpr uint32_t packet = 256, sslots = 4, rslots = 12;
const uint64_t bytes = share_bytes_needed(packet, sslots, rslots) + 64;

struct Share {
    std::vector<uint64_t> mem = std::vector<uint64_t>(bytes / 8 + 1, 0); // 8-aligned; 64 enforced below
    uint8_t *base;
    QueueHeader *q;
    Share()
    {
        mem.resize(bytes / 8 + 16);
        auto a = reinterpret_cast<uintptr_t>(mem.data());
        base = reinterpret_cast<uint8_t *>((a + 63) & ~uintptr_t{63});
        init_share(base, bytes, packet, sslots, rslots, 3, 5, 4, true);
        q = reinterpret_cast<QueueHeader *>(base);
    }
    // Every slot stamped with its ring and an index-dependent byte.
    void stamp()
    {
        for (uint32_t i = 0; i < sslots; ++i)
            std::memset(send_slot(q, i), 0x10 + i, packet);
        for (uint32_t i = 0; i < rslots; ++i)
            std::memset(recv_slot(q, i), 0x40 + i, packet);
    }
    void set(uint64_t sh, uint64_t st, uint64_t rh, uint64_t rt)
    {
        q->send_head = sh;
        q->send_tail = st;
        q->recv_head = rh;
        q->recv_tail = rt;
    }
};

void test_init(void **)
{
    Share s;
    assert_int_equal(s.q->magic, queue_magic);
    assert_int_equal(s.q->version, queue_version);
    assert_int_equal(s.q->packet_size, packet);
    assert_int_equal(s.q->send_slots, sslots);
    assert_int_equal(s.q->recv_slots, rslots);
    assert_int_equal(s.q->credits, 3);
    assert_int_equal(s.q->rank, 5);
    assert_int_equal(s.q->ntasks, 4);
    assert_int_equal(s.q->resident.load(), 1);
    assert_int_equal(s.q->send_tail.load() + s.q->recv_head.load(), 0);
    std::vector<uint8_t> small(128);
    assert_true(contains(error_of<std::invalid_argument>([&] {
                             init_share(small.data(), small.size(), packet, sslots, rslots, 1, 0, 1, true);
                         }),
                         "cannot hold"));
}

// Valid-only: send [head, tail] (slot tail too while free) and recv
// [head, tail) come back, with wrap-around; the rest reads as zero.
void test_valid_only_wraparound(void **)
{
    struct Case {
        uint64_t sh, st, rh, rt;
    };
    for (Case c : {Case{0, 0, 0, 0}, Case{9, 11, 30, 35}, Case{6, 10, 100, 112}, Case{3, 5, 22, 26},
                   Case{7, 7, 13, 13}}) {
        Share s;
        s.stamp();
        s.set(c.sh, c.st, c.rh, c.rt);
        s.q->resident = 0; // as the agent leaves it when swapping out
        std::string store = "old";
        size_t n = save_share(s.base, bytes, packet, sslots, rslots, true, store);
        uint64_t send_n = c.st - c.sh + (c.st - c.sh < sslots ? 1 : 0);
        assert_int_equal(n, send_n + (c.rt - c.rh));
        assert_true(store.size() < bytes || n == sslots + rslots);
        std::vector<uint8_t> before(s.base, s.base + bytes);
        std::memset(s.base, 0, bytes); // pages released
        restore_share(s.base, bytes, store);
        assert_int_equal(s.q->resident.load(), 0); // as saved
        assert_memory_equal(s.base, before.data(), sizeof(QueueHeader));
        for (uint64_t i = 0; i < sslots; ++i) {
            uint64_t idx = c.sh + i;
            bool valid = i < send_n;
            uint8_t want = valid ? static_cast<uint8_t>(0x10 + idx % sslots) : 0;
            assert_int_equal(send_slot(s.q, idx)[0], want);
            assert_int_equal(send_slot(s.q, idx)[packet - 1], want);
        }
        for (uint64_t i = 0; i < rslots; ++i) {
            uint64_t idx = c.rh + i;
            uint8_t want = i < c.rt - c.rh ? static_cast<uint8_t>(0x40 + idx % rslots) : 0;
            assert_int_equal(recv_slot(s.q, idx)[0], want);
            assert_int_equal(recv_slot(s.q, idx)[packet / 2], want);
        }
    }
}

void test_full(void **)
{
    Share s;
    s.stamp();
    s.set(2, 6, 40, 49);
    std::string store;
    assert_int_equal(save_share(s.base, bytes, packet, sslots, rslots, false, store), sslots + rslots);
    std::vector<uint8_t> before(s.base, s.base + bytes);
    std::memset(s.base, 0, bytes);
    restore_share(s.base, bytes, store);
    assert_memory_equal(s.base, before.data(), bytes);
    // Another geometry, or something else than a store, is refused.
    std::vector<uint8_t> other(bytes + 128);
    assert_true(
        contains(error_of<std::invalid_argument>([&] { restore_share(other.data(), bytes + 64, store); }),
                 "restored into one of"));
    assert_true(contains(error_of<std::invalid_argument>([&] { restore_share(s.base, bytes, "junk"); }),
                         "not a saved share"));
    std::string cut = store.substr(0, store.size() - 1);
    assert_true(
        contains(error_of<std::invalid_argument>([&] { restore_share(s.base, bytes, cut); }), "truncated"));
}

// Reload into kept pages: the saved packets come back (a copy of equal
// bytes) while the indices are the saved ones, never the header nor the
// send slots from the tail on (the application may be writing them);
// nothing at
// all once the application moved an index.
void test_reload(void **)
{
    for (bool valid_only : {true, false}) {
        Share s;
        s.stamp();
        s.set(9, 11, 30, 35);
        std::string store;
        save_share(s.base, bytes, packet, sslots, rslots, valid_only, store);
        std::vector<uint8_t> before(s.base, s.base + bytes);
        std::memset(send_slot(s.q, 11), 0x77, packet); // written since, at the tail
        std::memset(send_slot(s.q, 12), 0x66, packet); // and beyond (tail not yet moved)
        std::memset(recv_slot(s.q, 31), 0, packet);    // (a stray write: put back)
        size_t n = reload_share(s.base, bytes, store);
        assert_true(n > 0);
        assert_int_equal(send_slot(s.q, 11)[0], 0x77);
        assert_int_equal(send_slot(s.q, 12)[0], 0x66);
        assert_int_equal(send_slot(s.q, 10)[5], before[send_slot(s.q, 10) - s.base + 5]);
        assert_int_equal(recv_slot(s.q, 31)[3], before[recv_slot(s.q, 31) - s.base + 3]);
        // The application took a packet meanwhile: its bytes are the truth.
        s.q->recv_head = 31;
        std::memset(recv_slot(s.q, 32), 0x55, packet);
        assert_int_equal(reload_share(s.base, bytes, store), 0);
        assert_int_equal(recv_slot(s.q, 32)[0], 0x55);
    }
    Share s;
    assert_true(contains(error_of<std::invalid_argument>([&] { reload_share(s.base, bytes, "junk"); }),
                         "not a saved share"));
}

void test_corrupt_rejected(void **)
{
    struct Case {
        uint64_t sh, st, rh, rt;
        const char *what;
    };
    for (Case c :
         {Case{0, 5, 0, 0, "send ring head 0 tail 5"}, Case{5, 4, 0, 0, "send ring head 5 tail 4"},
          Case{0, 0, 10, 23, "recv ring head 10 tail 23"}, Case{0, 0, 9, 8, "recv ring head 9 tail 8"}}) {
        Share s;
        s.set(c.sh, c.st, c.rh, c.rt);
        std::string store = "untouched";
        std::string e =
            error_of<CorruptQueue>([&] { save_share(s.base, bytes, packet, sslots, rslots, true, store); });
        assert_true(contains(e, "rank 5"));
        assert_true(contains(e, c.what));
        assert_string_equal(store.c_str(), "untouched");
    }
    Share s;
    std::string store;
    assert_true(contains(
        error_of<CorruptQueue>([&] { save_share(s.base, bytes, packet * 2, sslots, rslots, false, store); }),
        "sizes 256/4/12 instead of 512/4/12"));
    s.q->magic = 0;
    assert_true(contains(
        error_of<CorruptQueue>([&] { save_share(s.base, bytes, packet, sslots, rslots, false, store); }),
        "magic"));
    assert_true(store.empty());
}

} // namespace

int main()
{
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_init),   cmocka_unit_test(test_valid_only_wraparound),
        cmocka_unit_test(test_full),   cmocka_unit_test(test_corrupt_rejected),
        cmocka_unit_test(test_reload),
    };
    return cmocka_run_group_tests_name("msg_window", tests, nullptr, nullptr);
}
