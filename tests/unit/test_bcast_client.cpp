// Unit tests of the broadcast's client (launch_bcast/client.cpp): the
// default chunk size, a client whose window is full waiting without using
// the CPU, and a broadcast cancelled from another thread while it streams.

#include <atomic>
#include <chrono>
#include <string>
#include <sys/resource.h>
#include <thread>

#include <event2/thread.h>

#include "tests/unit/bcast_fixture.hpp"
#include "tests/unit/helpers.hpp"

using namespace bcast_fixture;
using test_helpers::contains;

namespace {

// The default chunk size: 32 KiB through the tree; where the agents
// multicast, the multicast chunk, or half of it to 64 nodes or fewer (and
// when the node count is not known, the whole one); an explicit size wins.
void test_chunk_size_defaults(void **)
{
    ClientOptions o;
    assert_int_equal(chunk_size_of(o), 32u << 10);
    o.nodes = 16;
    assert_int_equal(chunk_size_of(o), 32u << 10);
    o.multicast = true;
    o.nodes = 0;
    assert_int_equal(chunk_size_of(o), net::kMcastChunkSize);
    o.nodes = 1;
    assert_int_equal(chunk_size_of(o), net::kMcastChunkSize / 2);
    o.nodes = kSmallChunkNodes;
    assert_int_equal(chunk_size_of(o), net::kMcastChunkSize / 2);
    o.nodes = kSmallChunkNodes + 1;
    assert_int_equal(chunk_size_of(o), net::kMcastChunkSize);
    o.nodes = 256;
    assert_int_equal(chunk_size_of(o), net::kMcastChunkSize);
    // Whole segments, and not a multiple of the page size (mcast.hpp).
    assert_int_equal((net::kMcastChunkSize / 2) % 1440, 0);
    assert_int_not_equal((net::kMcastChunkSize / 2) % 4096, 0);
    o.chunk_size = 12345;
    assert_int_equal(chunk_size_of(o), 12345);
}

// CPU time of the calling thread.
std::chrono::microseconds thread_cpu()
{
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    return std::chrono::seconds(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           std::chrono::microseconds(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// A client whose window is full waits for an answer without using the
// CPU: the nodes take each chunk slowly (40 ms, holding every agent's loop),
// so the 8-chunk window stays full for most of the transfer.  A client
// still listening to its reader then would spin through the whole of it.
void test_full_window_waits_idle(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/f";
    std::string data = make_file(src, 400000, 0644); // 25 chunks of 16 KiB
    std::string out = open_to_all(t.path + "/out");
    BcastCluster bc(2, t.path);
    bc.on_data = [](unsigned node, unsigned) {
        if (node == 1)
            std::this_thread::sleep_for(40ms);
    };
    auto t0 = std::chrono::steady_clock::now();
    auto c0 = thread_cpu();
    std::string err = bc.send(scan(src), out + "/", cred(2));
    auto cpu = thread_cpu() - c0;
    auto wall = std::chrono::steady_clock::now() - t0;
    assert_string_equal(err.c_str(), "");
    assert_true(slurp(out + "/slurm_bcast_42.0_node1") == data);
    assert_true(wall >= 800ms);
    print_message(
        "client thread: %lld ms of CPU in %lld ms\n", static_cast<long long>(cpu.count() / 1000),
        static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(wall).count()));
    assert_true(cpu < wall / 5);
}

// Cancelled from another thread (srun's signal thread) while it streams:
// finish() throws at once, the head aborts everywhere, every waiter hears
// it failed, and no node keeps anything.
void test_cancel(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/prog";
    make_file(src, 8 << 20, 0755);
    std::string out = open_to_all(t.path + "/out");
    BcastCluster bc(4, t.path);
    std::atomic<bool> cancel_now{false};
    bc.on_data = [&](unsigned node, unsigned chunks) {
        if (node == 3 && chunks == 10)
            cancel_now = true;
    };
    FakeAuth user(kUser);
    Broadcast b(user, bc.options(out + "/", cred(4)), scan(src));
    uint64_t sid = b.open();
    Waiters w(bc, 4, {sid}, out);
    std::atomic<bool> finished{false}; // a broadcast that ended first is reported, not waited on
    std::thread canceller([&] {
        while (!cancel_now && !finished)
            std::this_thread::sleep_for(1ms);
        if (cancel_now)
            b.cancel();
    });
    std::string err = test_helpers::error_of<BcastError>([&] { b.finish(); });
    finished = true;
    canceller.join();
    assert_string_equal(err.c_str(), "cancelled");
    w.join();
    for (unsigned i = 0; i < 4; ++i) {
        assert_false(w.results[i]->in_place);
        assert_true(contains(w.results[i]->error, "broadcast " + session_hex(sid) + " failed: "));
    }
    assert_int_equal(bc.sessions_left(), 0);
    assert_true(listing(out).empty());
}

} // namespace

int main()
{
    evthread_use_pthreads();
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_size_defaults),
        cmocka_unit_test(test_full_window_waits_idle),
        cmocka_unit_test(test_cancel),
    };
    return cmocka_run_group_tests_name("bcast_client", tests, nullptr, nullptr);
}
