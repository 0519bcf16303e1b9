// Unit tests of the broadcast's client (launch_bcast/client.cpp): the
// default chunk size, a client whose window is full waiting without using
// the CPU, a broadcast cancelled from another thread while it streams,
// and a tree's files packed into chunks by the client's reader (a file
// exactly filling a chunk, empty files, a large file between small ones,
// links carrying no bytes) arriving exact in as many chunks as planned,
// and a source that changes after it was listed or while it is sent
// failing the broadcast, named, with nothing kept anywhere.

#include <atomic>
#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <string>
#include <sys/resource.h>
#include <thread>

#include <event2/thread.h>

#include "tests/unit/bcast_fixture.hpp"
#include "tests/unit/helpers.hpp"

using namespace bcast_fixture;
using test_helpers::contains;

namespace {

// The default chunk size: 32 KiB through the tree, 256 KiB with -C; where the agents
// multicast, the multicast chunk, or half of it to 64 nodes or fewer (and
// when the node count is not known, the whole one); an explicit size wins.
void test_chunk_size_defaults(void **)
{
    ClientOptions o;
    assert_int_equal(chunk_size_of(o), 32u << 10);
    o.nodes = 16;
    assert_int_equal(chunk_size_of(o), 32u << 10);
    o.compress = Codec::zstd; // 256 KiB compressed: fewer bytes on the wire
    assert_int_equal(chunk_size_of(o), 256u << 10);
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

void test_tree_in_packs(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    const uint32_t chunk = 1024;
    std::string src = t.path + "/tree";
    mkdir(src.c_str(), 0755);
    mkdir((src + "/many").c_str(), 0755);
    std::vector<std::pair<std::string, std::string>> files; // name, bytes
    // In the order of the scan (names sorted): a file filling the first
    // chunk exactly, an empty one, a large one, links, small ones.
    files.emplace_back("a", make_file(src + "/a", chunk - PackRecord::kHeader, 0644));
    files.emplace_back("b", make_file(src + "/b", 0, 0644));
    files.emplace_back("c", make_file(src + "/c", 5000, 0644));
    assert_int_equal(symlink("a", (src + "/d").c_str()), 0);
    assert_int_equal(link((src + "/a").c_str(), (src + "/e").c_str()), 0);
    files.emplace_back("f", make_file(src + "/f", 7, 0600));
    for (int i = 0; i < 200; ++i) {
        std::string n = "many/" + std::to_string(1000 + i);
        files.emplace_back(n, make_file(src + "/" + n, static_cast<size_t>(i % 50), 0644));
    }
    files.emplace_back("z", make_file(src + "/z", 3000, 0644));
    Source scanned = scan(src);
    size_t planned = 0;
    PackPlan plan(scanned.entries, chunk);
    while (!plan.next().empty())
        ++planned;
    BcastCluster bc(1, t.path);
    std::atomic<unsigned> chunks{0};
    bc.on_data = [&](unsigned, unsigned n) { chunks = n; };
    std::string dest = t.path + "/copy";
    assert_string_equal(bc.send(scanned, dest, cred(1), kUser, kForce, 1, chunk).c_str(), "");
    for (const auto &[name, bytes] : files)
        assert_true(slurp(dest + "/" + name) == bytes);
    char target[8] = {};
    assert_int_equal(readlink((dest + "/d").c_str(), target, sizeof target - 1), 1);
    assert_string_equal(target, "a");
    struct stat st, st2;
    assert_int_equal(stat((dest + "/a").c_str(), &st), 0);
    assert_int_equal(stat((dest + "/e").c_str(), &st2), 0);
    assert_true(st.st_ino == st2.st_ino);
    // 205 files, 13,915 bytes in all: 17 chunks of 1 KiB, each file's
    // bytes where they fit rather than in chunks of their own.
    if (chunks != planned || planned > 20)
        fprintf(stderr, "%u chunks, %zu planned\n", chunks.load(), planned);
    assert_int_equal(chunks.load(), planned);
    assert_int_equal(planned, 17);
}

// A tree and a file sent compressed (-C, each codec) arrive byte for byte:
// text that shrinks, and noise that is sent as it is.
void test_compressed(void **)
{
    if (geteuid() != 0)
        skip();
    for (Codec codec : {Codec::lz4, Codec::zstd, Codec::zlib}) {
        TempDir t;
        std::string src = t.path + "/tree";
        mkdir(src.c_str(), 0755);
        std::string text;
        for (int i = 0; text.size() < 200000; ++i)
            text += "import os  # line " + std::to_string(i % 71) + "\n";
        std::ofstream(src + "/mod.py") << text;
        std::string noise = make_file(src + "/lib.so", 70000, 0755);
        BcastCluster bc(1, t.path);
        bc.compress = codec;
        assert_string_equal(bc.send(scan(src), t.path + "/copy", cred(1)).c_str(), "");
        // The noise as it is, the text in far fewer bytes.
        assert_in_range(bc.wire, noise.size(), noise.size() + text.size() / 4);
        assert_string_equal(bc.send(scan(src + "/mod.py"), t.path + "/one.py", cred(1)).c_str(), "");
        assert_in_range(bc.wire, 1, text.size() / 4);
        assert_true(slurp(t.path + "/copy/mod.py") == text);
        assert_true(slurp(t.path + "/copy/lib.so") == noise);
        assert_true(slurp(t.path + "/one.py") == text);
    }
}

// Appends `bytes` to the file at `path`.
void append(const std::string &path, const std::string &bytes)
{
    std::ofstream(path, std::ios::binary | std::ios::app).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file that changes between its listing and its reading, or while it
// is read, fails the broadcast with a message naming it; no node keeps a
// copy, and no session stays open.  In a tree, a file rewritten in place
// (same size, a later modification time) fails it too.
void test_source_changed(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/f";
    make_file(src, 2 << 20, 0644); // 128 chunks of 16 KiB
    std::string out = open_to_all(t.path + "/out");
    {
        Source listed = scan(src);
        append(src, "more");
        BcastCluster bc(2, t.path);
        std::string err = bc.send(listed, out + "/", cred(2));
        assert_string_equal(err.c_str(), (src + " changed after it was listed (2097152 bytes when listed, "
                                                 "2097156 now)").c_str());
        assert_int_equal(bc.sessions_left(), 0);
        assert_true(listing(out).empty());
    }
    {
        Source listed = scan(src);
        BcastCluster bc(2, t.path);
        // The window (8 chunks) and the reader's 4 ready keep the reader
        // far from the file's end when the first node has 2 chunks.
        bc.on_data = [&](unsigned node, unsigned chunks) {
            if (node == 0 && chunks == 2)
                append(src, "x");
        };
        std::string err = bc.send(listed, out + "/", cred(2));
        assert_string_equal(err.c_str(), (src + " changed while being sent (2097156 bytes when listed, "
                                                 "2097157 now)").c_str());
        assert_int_equal(bc.sessions_left(), 0);
        assert_true(listing(out).empty());
    }
    {
        std::string tree = t.path + "/tree";
        mkdir(tree.c_str(), 0755);
        make_file(tree + "/a", 100, 0644);
        make_file(tree + "/b", 100, 0644);
        Source listed = scan(tree);
        std::ofstream(tree + "/b", std::ios::binary | std::ios::in).write("rewritten", 9);
        struct stat st;
        assert_int_equal(stat((tree + "/b").c_str(), &st), 0);
        timespec later[2] = {st.st_atim, st.st_mtim};
        later[1].tv_sec = listed.stamps.at(2).mtime.tv_sec + 1; // entries: the top, a, b
        assert_int_equal(utimensat(AT_FDCWD, (tree + "/b").c_str(), later, 0), 0);
        BcastCluster bc(2, t.path);
        std::string err = bc.send(listed, out + "/copy", cred(2));
        assert_string_equal(err.c_str(), (tree + "/b changed after it was listed (it was modified)").c_str());
        assert_int_equal(bc.sessions_left(), 0);
        assert_true(listing(out).empty());
    }
}

} // namespace

int main()
{
    evthread_use_pthreads();
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_size_defaults),
        cmocka_unit_test(test_full_window_waits_idle),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_tree_in_packs),
        cmocka_unit_test(test_compressed),
        cmocka_unit_test(test_source_changed),
    };
    return cmocka_run_group_tests_name("bcast_client", tests, nullptr, nullptr);
}
