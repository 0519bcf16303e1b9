// Unit tests of the broadcast's receiver (launch_bcast/receiver.cpp, and
// as_user.cpp through it), the node side: files land byte for byte on
// every node, owned by the job's user, with the source's mode; --force
// swaps a file in (never writing through a link); directories and
// --preserve; a node that cannot write fails every node; chunks failing
// their CRC and early commits refused; what a killed agent leaves is
// recovered from its journal; a staged file the user swapped for a FIFO
// or another file is refused without blocking the agent's loop.

#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include <event2/thread.h>

#include "tests/unit/bcast_fixture.hpp"
#include "tests/unit/helpers.hpp"

using namespace bcast_fixture;
using test_helpers::contains;

namespace {

void test_file_reaches_every_node(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/prog";
    std::string data = make_file(src, 1000003, 0751);
    std::string out = open_to_all(t.path + "/out");
    for (uint8_t fanout : {1, 2}) {
        BcastCluster bc(6, t.path);
        std::system(("rm -f '" + out + "'/*").c_str());
        std::string err = bc.send(scan(src), out + "/", cred(6), kUser, kForce, fanout);
        assert_string_equal(err.c_str(), "");
        for (unsigned i = 0; i < 6; ++i) {
            std::string f = out + "/slurm_bcast_42.0_node" + std::to_string(i);
            assert_true(slurp(f) == data);
            struct stat st;
            assert_int_equal(stat(f.c_str(), &st), 0);
            assert_int_equal(st.st_uid, kUser);
            assert_int_equal(st.st_gid, kGroup);
            assert_int_equal(st.st_mode & 07777, 0751);
        }
        assert_int_equal(listing(out).size(), 6); // no temporaries left
        assert_int_equal(bc.open_sessions(), 0);
    }
}

// --force on a file: the new one takes the old one's place (swapped in, the
// old one removed), nothing else is left in the directory, and a symbolic
// link at the destination is itself replaced, never written through.
void test_force_replaces_a_file(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string out = open_to_all(t.path + "/out");
    std::string dest = out + "/f";
    BcastCluster bc(1, t.path);
    std::string first = make_file(t.path + "/one", 100000, 0644);
    assert_string_equal(bc.send(scan(t.path + "/one"), dest, cred(1), kUser, 0).c_str(), "");
    assert_true(slurp(dest) == first);
    std::string second = make_file(t.path + "/two", 70001, 0600);
    assert_string_equal(bc.send(scan(t.path + "/two"), dest, cred(1), kUser, kForce).c_str(), "");
    assert_true(slurp(dest) == second);
    struct stat st;
    assert_int_equal(stat(dest.c_str(), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_uid, kUser);
    assert_true(listing(out) == std::vector<std::string>{"f"});

    std::string victim = make_file(t.path + "/victim", 10, 0666);
    assert_int_equal(unlink(dest.c_str()), 0);
    assert_int_equal(symlink((t.path + "/victim").c_str(), dest.c_str()), 0);
    assert_int_equal(lchown(dest.c_str(), kUser, kGroup), 0); // the user's own link, to root's file
    assert_string_equal(bc.send(scan(t.path + "/one"), dest, cred(1), kUser, kForce).c_str(), "");
    assert_int_equal(lstat(dest.c_str(), &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_true(slurp(dest) == first);
    assert_true(slurp(t.path + "/victim") == victim);
    assert_true(listing(out) == std::vector<std::string>{"f"});
    assert_int_equal(bc.open_sessions(), 0);
}

void test_directory_and_preserve(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/tree";
    mkdir(src.c_str(), 0755);
    mkdir((src + "/sub").c_str(), 0700);
    std::string a = make_file(src + "/a", 70000, 0644);
    std::string b = make_file(src + "/sub/b", 5, 0600);
    make_file(src + "/empty", 0, 0640);
    timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    utimensat(AT_FDCWD, (src + "/a").c_str(), old, 0);
    BcastCluster bc(1, t.path);
    std::string dest = t.path + "/copy";
    assert_string_equal(bc.send(scan(src), dest, cred(1), kUser, kPreserve).c_str(), "");
    assert_true(slurp(dest + "/a") == a);
    assert_true(slurp(dest + "/sub/b") == b);
    struct stat st;
    assert_int_equal(stat((dest + "/empty").c_str(), &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_int_equal(stat((dest + "/a").c_str(), &st), 0);
    assert_int_equal(st.st_mtime, 1000000000);
    assert_int_equal(st.st_uid, kUser);
    assert_int_equal(stat((dest + "/sub").c_str(), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    // Again without --force: refused, the first copy untouched.
    std::string err = bc.send(scan(src), dest, cred(1), kUser, 0);
    assert_true(contains(err, "node0: " + dest + " exists"));
    // With --force: replaced.
    make_file(src + "/a", 10, 0644);
    assert_string_equal(bc.send(scan(src), dest, cred(1), kUser, kForce).c_str(), "");
    assert_int_equal(slurp(dest + "/a").size(), 10);
    std::vector<std::string> expect{"copy", "gate0.sock", "journal0", "tree"};
    assert_true(listing(t.path) == expect);
}

void test_a_node_that_cannot_write_fails_all(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/f";
    make_file(src, 300000, 0644);
    BcastCluster bc(5, t.path);
    std::string out = open_to_all(t.path + "/out");
    // node3's per-node name lands in a directory the user cannot write.
    std::string locked = out + "/slurm_bcast_42.0_locked";
    mkdir(locked.c_str(), 0755);
    bc.on_loop([&] {
        bc.receivers[3] =
            std::make_unique<Receiver>(bc.cl.base, *bc.cl.agents[3], bc.authz,
                                       ReceiverConfig{3, "locked/y", "", "", {}}, Logger("node3"));
    });
    std::string err = bc.send(scan(src), out + "/", cred(5));
    assert_true(contains(err, "node3: cannot create"));
    assert_true(contains(err, "Permission denied"));
    std::vector<std::string> expect{"slurm_bcast_42.0_locked"};
    assert_true(listing(out) == expect);
    assert_int_equal(bc.open_sessions(), 0);
}

void test_receiver_rejects_and_recovers(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    Cluster cl(1, 8);
    FakeAuthorizer authz;
    std::string journal = t.path + "/journal";
    auto start = [&] {
        auto r = std::make_unique<Receiver>(cl.base, *cl.agents[0], authz,
                                            ReceiverConfig{0, "n0", journal, "", {}}, Logger("n0"));
        r->recover();
        return r;
    };
    auto rx = start();
    // What a killed slurmd does: no destructor runs (the receiver is leaked
    // on purpose), and a new agent recovers.
    auto kill_and_restart = [&] {
        rx.release();
        rx = start();
    };
    OpenRequest q;
    q.cred = cred(1);
    q.dest = t.path + "/file";
    q.entries.push_back(Entry{"", false, 0644, 10, 0, 0});
    const uint64_t sid = 7;
    assert_string_equal(rx->on_chunk(event_name("open", sid), sid, q.encode()).c_str(), "");
    std::string temp = t.path + "/.file.storm-0000000000000007";
    struct stat st;
    assert_int_equal(stat(temp.c_str(), &st), 0);
    assert_int_equal(st.st_uid, kUser);
    // A chunk whose CRC does not match: refused, and so is everything after.
    net::Writer w;
    ChunkHeader h{0, 0, 10, crc32("0123456789") ^ 1, false};
    h.encode(w);
    std::string bad = w.take() + "0123456789";
    assert_true(contains(rx->on_chunk(event_name("data", sid), sid, bad), "fails its CRC check"));
    // Commit without every byte: refused, and the temporary goes.
    assert_true(contains(rx->on_chunk(event_name("commit", sid), sid, ""), "before every node confirmed"));
    assert_int_equal(stat(temp.c_str(), &st), -1);
    // The same chunk sealed (by multicast, under the seal of the node that
    // sent it, whose own check of the CRC came first): not checked again.
    const uint64_t sealed_sid = 9;
    assert_string_equal(rx->on_chunk(event_name("open", sealed_sid), sealed_sid, q.encode()).c_str(), "");
    assert_string_equal(rx->on_chunk(event_name("data", sealed_sid), sealed_sid, bad, true).c_str(), "");
    assert_string_equal(rx->on_chunk(event_name("abort", sealed_sid), sealed_sid, "").c_str(), "");
    assert_int_equal(stat((t.path + "/.file.storm-0000000000000009").c_str(), &st), -1);
    // A malformed open.
    std::string junk = rx->on_chunk(event_name("open", 8), 8, "junk");
    assert_true(contains(junk, "truncated") || contains(junk, "exceeds its limit"));
    // What a killed slurmd leaves: the temporary and its journal entry.
    assert_string_equal(rx->on_chunk(event_name("open", sid), sid, q.encode()).c_str(), "");
    assert_int_equal(stat(temp.c_str(), &st), 0);
    std::string entry = slurp(journal + "/0000000000000007");
    kill_and_restart();
    assert_int_equal(stat(temp.c_str(), &st), -1);
    assert_true(listing(journal).empty());
    assert_true(contains(entry, temp.c_str()));

    // Killed between its commit and the finish, over an existing file: the
    // new file stays (this node had it in place), and what it replaced,
    // kept under the temporary name, goes at restart.
    const std::string dest = t.path + "/file";
    std::ofstream(dest) << "the old one";
    assert_int_equal(chown(dest.c_str(), kUser, kGroup), 0); // the user's own earlier copy
    q.flags = kForce;
    // Session `id` writes "0123456789" and commits here.
    auto commit_here = [&](uint64_t id) {
        assert_string_equal(rx->on_chunk(event_name("open", id), id, q.encode()).c_str(), "");
        net::Writer wd;
        ChunkHeader{0, 0, 10, crc32("0123456789"), false}.encode(wd);
        assert_string_equal(rx->on_chunk(event_name("data", id), id, wd.take() + "0123456789").c_str(), "");
        cl.agents[0]->set_variable(var_prefix(id) + "commit", 1); // as the head's COMPARE-AND-WRITE does
        assert_string_equal(rx->on_chunk(event_name("commit", id), id, "").c_str(), "");
    };
    std::string temp2 = t.path + "/.file.storm-0000000000000009";
    commit_here(9);
    assert_true(slurp(dest) == "0123456789");
    assert_true(slurp(temp2) == "the old one");
    kill_and_restart();
    assert_true(slurp(dest) == "0123456789");
    assert_int_equal(stat(temp2.c_str(), &st), -1);
    assert_true(listing(journal).empty());
    // The same over nothing: the new file stays, and nothing else is there.
    assert_int_equal(unlink(dest.c_str()), 0);
    commit_here(10);
    kill_and_restart();
    assert_true(slurp(dest) == "0123456789");
    assert_true(listing(journal).empty());
    assert_true(listing(t.path) == (std::vector<std::string>{"file", "journal"}));
}

// A user swaps the staged temporary of their own broadcast between its
// creation and its first chunk: for a FIFO, whose plain open() for writing
// would block the agent's only loop thread until a reader came (every
// broadcast, strobe and fail-safe of the node with it), and for a file of
// their own.  Each is refused at once, naming the path, and nothing is
// written through it.
void test_swapped_staging_file_refused(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    Cluster cl(1, 8);
    FakeAuthorizer authz;
    Receiver rx(cl.base, *cl.agents[0], authz, ReceiverConfig{0, "n0", t.path + "/journal", "", {}},
                Logger("n0"));
    rx.recover(); // makes the journal's directory
    OpenRequest q;
    q.cred = cred(1);
    q.dest = t.path + "/file";
    q.entries.push_back(Entry{"", false, 0644, 10, 0, 0});
    net::Writer w;
    ChunkHeader{0, 0, 10, crc32("0123456789"), false}.encode(w);
    const std::string chunk = w.take() + "0123456789";
    // A deadline instead of a hang if the open blocks.
    signal(SIGALRM, SIG_DFL);
    alarm(20);
    struct Swap {
        const char *what;
        uint64_t sid;
    };
    struct stat st;
    for (Swap sw : {Swap{"fifo", 21}, Swap{"file", 22}}) {
        assert_string_equal(rx.on_chunk(event_name("open", sw.sid), sw.sid, q.encode()).c_str(), "");
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(sw.sid));
        const std::string temp = t.path + "/.file.storm-" + hex;
        assert_int_equal(unlink(temp.c_str()), 0);
        if (std::string(sw.what) == "fifo")
            assert_int_equal(mkfifo(temp.c_str(), 0600), 0);
        else
            std::ofstream(temp) << "mine";
        assert_int_equal(chown(temp.c_str(), kUser, kGroup), 0);
        // The data goes to the file the broadcast created (its descriptor
        // was kept), or is refused; the commit then finds the swap.
        std::string why = rx.on_chunk(event_name("data", sw.sid), sw.sid, chunk);
        if (why.empty()) {
            cl.agents[0]->set_variable(var_prefix(sw.sid) + "commit", 1);
            why = rx.on_chunk(event_name("commit", sw.sid), sw.sid, "");
        }
        if (!contains(why, temp) || !contains(why, "was replaced while it was being received"))
            fprintf(stderr, "%s: %s\n", sw.what, why.c_str());
        assert_true(contains(why, temp));
        assert_true(contains(why, "was replaced while it was being received"));
        assert_int_equal(lstat(temp.c_str(), &st), -1); // the staging name cleaned, as the user
        assert_string_equal(rx.on_chunk(event_name("abort", sw.sid), sw.sid, "").c_str(), "");
    }
    alarm(0);
    assert_int_equal(stat(q.dest.c_str(), &st), -1); // nothing committed
}

} // namespace

int main()
{
    evthread_use_pthreads();
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_file_reaches_every_node),
        cmocka_unit_test(test_force_replaces_a_file),
        cmocka_unit_test(test_directory_and_preserve),
        cmocka_unit_test(test_a_node_that_cannot_write_fails_all),
        cmocka_unit_test(test_receiver_rejects_and_recovers),
        cmocka_unit_test(test_swapped_staging_file_refused),
    };
    return cmocka_run_group_tests_name("bcast_receiver", tests, nullptr, nullptr);
}
