// Unit tests of the broadcast's head (launch_bcast/service.cpp), the
// agent the client talks to: chunks held while the nodes open and dropped
// if one cannot, a client sending too much before they opened cut off, a
// commit one node fails undone on every node, a node killed mid-transfer
// failing the broadcast, the credentials it refuses, and a hung node two
// levels down named to a client whose deadline its wait outlasts.

#include <atomic>
#include <chrono>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <vector>

#include <event2/thread.h>

#include "tests/unit/bcast_fixture.hpp"
#include "tests/unit/helpers.hpp"

using namespace bcast_fixture;
using test_helpers::contains;

namespace {

// The client streams while the nodes open: the head holds those chunks
// until every node opened, and drops them if one could not.  node5 is two
// hops below the head in the open's tree (fanout 2) and takes 200 ms to
// open, so chunks come while the nodes open.  Also in two steps (open(),
// then finish()), as srun --bcast does.
void test_chunks_sent_while_opening(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/f";
    std::string data = make_file(src, 300000, 0644); // 19 chunks of 16 KiB
    std::string out = open_to_all(t.path + "/out");
    for (bool fail : {false, true}) {
        BcastCluster bc(7, t.path, 2);
        unsigned opened = 0, chunks = 0, before = 0; // loop thread
        bc.refuse = [&](unsigned node, const std::string &ev) -> std::string {
            if (ev.rfind("bcast:open:", 0) != 0)
                return "";
            opened++;
            if (node != 5)
                return "";
            std::this_thread::sleep_for(200ms);
            return fail ? "too slow" : "";
        };
        bc.on_data = [&](unsigned, unsigned) {
            chunks++;
            if (opened < 7)
                before++;
        };
        std::string err = bc.send(scan(src), out + "/", cred(7));
        uint64_t early = 0;
        bc.on_loop([&] { early = bc.services[0]->early_chunks(); });
        assert_true(early > 0);
        assert_int_equal(before, 0); // no node took a chunk before every node opened
        if (fail) {
            assert_true(contains(err, "cannot open"));
            assert_true(contains(err, "node5: too slow"));
            assert_int_equal(chunks, 0); // none left the head
            assert_true(listing(out).empty());
        } else {
            assert_string_equal(err.c_str(), "");
            assert_int_equal(chunks, 7 * 19);
            for (unsigned i = 0; i < 7; ++i)
                assert_true(slurp(out + "/slurm_bcast_42.0_node" + std::to_string(i)) == data);
            std::system(("rm -f '" + out + "'/*").c_str());
        }
        assert_int_equal(bc.open_sessions(), 0);
    }
    // In two steps (srun --bcast): chunks leave during open() too.
    BcastCluster bc(7, t.path, 2);
    bc.refuse = [](unsigned node, const std::string &ev) -> std::string {
        if (node == 5 && ev.rfind("bcast:open:", 0) == 0)
            std::this_thread::sleep_for(200ms);
        return "";
    };
    FakeAuth user(kUser);
    Broadcast b(user, bc.options(out + "/", cred(7)), scan(src));
    b.open();
    uint64_t early = 0;
    bc.on_loop([&] { early = bc.services[0]->early_chunks(); });
    assert_true(early > 0);
    b.finish();
    for (unsigned i = 0; i < 7; ++i)
        assert_true(slurp(out + "/slurm_bcast_42.0_node" + std::to_string(i)) == data);
    assert_int_equal(bc.open_sessions(), 0);
}

// A client that sends more than twice kEarlyBytes of chunks before the
// nodes opened is cut off, and what the nodes opened is removed.  node2
// takes the open and never answers (a listener that never accepts), so
// the nodes stay opening until the hop's timeout.
void test_early_chunks_bounded(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string out = open_to_all(t.path + "/out");
    BcastCluster bc(3, t.path);
    int hole = -1;
    bc.on_loop([&] {
        bc.receivers[2].reset();
        bc.cl.agents[2].reset();
        hole = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(hole, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        assert_int_equal(bind(hole, reinterpret_cast<const sockaddr *>(&bc.cl.table[2]), sizeof(sockaddr_in)),
                         0);
        assert_int_equal(listen(hole, 16), 0);
    });
    event_base *base = event_base_new();
    {
        FakeAuth user(kUser);
        auto conn = net::Connection::connect(base, bc.cl.table[0], 0, user);
        bool closed = false;
        conn->on_frame([](net::Connection &, const net::FrameHeader &, std::string_view) {});
        conn->on_close([&](net::Connection &, const std::string &) {
            closed = true;
            event_base_loopbreak(base);
        });
        const uint32_t chunk = 1u << 20;
        const unsigned chunks = static_cast<unsigned>(2 * kEarlyBytes / chunk) + 2;
        OpenRequest q;
        q.cred = cred(3);
        q.dest = out + "/";
        q.flags = kForce;
        q.timeout_ms = 3000;
        q.entries.push_back(Entry{"", Entry::file, 0644, uint64_t(chunk) * chunks, 0, 0, {}, 0});
        conn->send(kOpenFrame, 0, q.encode());
        std::string bytes(chunk, 'x');
        for (unsigned i = 0; i < chunks; ++i) {
            net::Writer w;
            ChunkHeader{0, uint64_t(i) * chunk, chunk, crc32(bytes), Codec::none}.encode(w);
            conn->send(kDataFrame, i, w.take() + bytes);
        }
        auto t0 = std::chrono::steady_clock::now();
        timeval tv{5, 0};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
        assert_true(closed);
        assert_true(std::chrono::steady_clock::now() - t0 < 2500ms); // not the open's timeout
    }
    event_base_free(base);
    assert_int_equal(bc.sessions_left(5000ms), 0);
    assert_true(listing(out).empty());
    bc.on_loop([&] { close(hole); });
}

// A node that cannot put the file in place once the others did: the
// broadcast fails naming it, and no node is changed -- where a file was
// replaced, the earlier one is back; where there was none, none is left;
// no temporary stays -- and the launch gate of a node that committed
// reports the failure instead of letting the tasks start.
void test_failed_commit_leaves_no_node_changed(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string out = open_to_all(t.path + "/out");
    std::string fresh = open_to_all(t.path + "/fresh");
    BcastCluster bc(4, t.path);
    std::string v1 = make_file(t.path + "/v1", 300000, 0644);
    std::string v2 = make_file(t.path + "/v2", 200001, 0755);
    assert_string_equal(bc.send(scan(t.path + "/v1"), out + "/", cred(4), kUser, kForce).c_str(), "");
    std::atomic<int> commits{0};
    bc.refuse = [&](unsigned node, const std::string &ev) {
        if (ev.rfind("bcast:commit:", 0) != 0)
            return std::string();
        ++commits;
        return node == 2 ? std::string("cannot rename (injected)") : std::string();
    };
    std::string err = bc.send(scan(t.path + "/v2"), out + "/", cred(4), kUser, kForce);
    assert_true(contains(err, "node2: cannot rename (injected)"));
    assert_int_equal(commits.load(), 4); // the others did commit
    for (unsigned i = 0; i < 4; ++i)
        assert_true(slurp(out + "/slurm_bcast_42.0_node" + std::to_string(i)) == v1);
    assert_int_equal(listing(out).size(), 4);
    err = bc.send(scan(t.path + "/v2"), fresh + "/", cred(4), kUser, kForce);
    assert_true(contains(err, "node2: cannot rename (injected)"));
    assert_true(listing(fresh).empty());
    assert_int_equal(bc.sessions_left(), 0);

    // The gate of node 0, which committed, says no.
    FakeAuth user(kUser);
    Broadcast b(user, bc.options(out + "/", cred(4)), scan(t.path + "/v2"));
    uint64_t sid = b.open();
    std::string gate_said;
    std::thread waiter([&] {
        try {
            gate::wait(bc.gate(0), 42, 0, {sid});
            gate_said = "ok";
        } catch (const std::exception &e) {
            gate_said = e.what();
        }
    });
    try {
        b.finish();
    } catch (const BcastError &) {
    }
    waiter.join();
    assert_true(contains(gate_said, "node2: cannot rename (injected)") || contains(gate_said, "aborted"));
    for (unsigned i = 0; i < 4; ++i)
        assert_true(slurp(out + "/slurm_bcast_42.0_node" + std::to_string(i)) == v1);
    bc.refuse = nullptr;
    assert_string_equal(bc.send(scan(t.path + "/v2"), out + "/", cred(4), kUser, kForce).c_str(), "");
    for (unsigned i = 0; i < 4; ++i)
        assert_true(slurp(out + "/slurm_bcast_42.0_node" + std::to_string(i)) == v2);
    assert_int_equal(listing(out).size(), 4);
}

void test_bad_credentials(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/f";
    make_file(src, 1000, 0644);
    BcastCluster bc(4, t.path);
    std::string err = bc.send(scan(src), t.path + "/", "forged");
    assert_true(contains(err, "credential refused: Invalid credential"));
    // Another user's credential.
    err = bc.send(scan(src), t.path + "/", cred(4, 1000), kUser);
    assert_true(contains(err, "the credential is uid 1000's, not uid 65534's"));
    // A job whose nodes do not include the head.
    err = bc.send(scan(src), t.path + "/", "job=42 uid=65534 nodes=1-3");
    assert_true(contains(err, "node0 is not a node of job 42"));
    std::vector<std::string> expect{"f",        "gate0.sock", "gate1.sock", "gate2.sock", "gate3.sock",
                                    "journal0", "journal1",   "journal2",   "journal3"};
    assert_true(listing(t.path) == expect);
}

void test_node_killed_mid_transfer(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/f";
    make_file(src, 4 << 20, 0644);
    BcastCluster bc(6, t.path);
    std::string out = open_to_all(t.path + "/out");
    bc.kill_after(4, 20);
    std::string err = bc.send(scan(src), out + "/", cred(6), kUser, kForce, 1, 16 << 10);
    assert_true(contains(err, "transfer of " + out + "/ failed"));
    assert_true(contains(err, "node4: "));
    // Every live node removed its part.
    assert_int_equal(bc.sessions_left(), 0);
    assert_true(listing(out).empty());
}

// A node that accepts connections and never answers (a hung agent) two
// levels below the head: the head's wait on it (one hop timeout per level
// of the tree, five levels for 16 nodes at fanout 2) and the abort that
// follows outlast the client's deadline of three hop timeouts without an
// answer.  The head says it is still at work meanwhile, so the client
// hears which node failed the broadcast, not that the head was silent.
void test_slow_nodes_outlast_the_client_deadline(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/f";
    make_file(src, 100000, 0644);
    std::string out = open_to_all(t.path + "/out");
    BcastCluster bc(16, t.path, 2);
    bc.on_loop([&] {
        bc.receivers[1].reset();
        bc.cl.agents[1].reset();
    });
    int hung = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(hung, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    assert_int_equal(bind(hung, reinterpret_cast<const sockaddr *>(&bc.cl.table[1]), sizeof bc.cl.table[1]),
                     0);
    assert_int_equal(listen(hung, 16), 0); // never accepted, never answered
    FakeAuth user(kUser);
    ClientOptions o = bc.options(out + "/", cred(16));
    o.timeout = 500ms;
    std::string err;
    auto t0 = std::chrono::steady_clock::now();
    try {
        broadcast(user, o, scan(src));
    } catch (const BcastError &e) {
        err = e.what();
    }
    auto took = std::chrono::steady_clock::now() - t0;
    close(hung);
    assert_true(contains(err, "node1: no answer within the timeout"));
    assert_false(contains(err, "no answer from the Storm agent"));
    assert_true(took > 1500ms); // longer than the client's own deadline
    assert_true(listing(out).empty());
}

} // namespace

int main()
{
    evthread_use_pthreads();
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_sent_while_opening),
        cmocka_unit_test(test_early_chunks_bounded),
        cmocka_unit_test(test_failed_commit_leaves_no_node_changed),
        cmocka_unit_test(test_bad_credentials),
        cmocka_unit_test(test_node_killed_mid_transfer),
        cmocka_unit_test(test_slow_nodes_outlast_the_client_deadline),
    };
    return cmocka_run_group_tests_name("bcast_service", tests, nullptr, nullptr);
}
