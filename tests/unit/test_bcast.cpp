// Unit tests of the broadcast (launch_bcast): agents in one process on
// loopback ports, each with a receiver and a broadcast service on the
// engine, run by a loop thread; the client in the test's thread, as a user.
// Files land byte for byte, owned by the job's user, with the source's
// mode; bad credentials, a node that cannot write, an existing destination
// and a node killed mid-transfer fail with a message naming the node and
// leave no file, partial or complete, on any node.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <random>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

#include <event2/thread.h>

#include "launch_bcast/client.hpp"
#include "launch_bcast/gate.hpp"
#include "launch_bcast/receiver.hpp"
#include "launch_bcast/service.hpp"
#include "lib/common/signals.hpp"
#include "tests/unit/helpers.hpp"
#include "tests/unit/prim_fixture.hpp"

using namespace prim_fixture;
using namespace storm::bcast;
using test_helpers::contains;

namespace {

constexpr uid_t kUser = 65534; // the job's owner (nobody)
constexpr gid_t kGroup = 65534;

// "job=J uid=U nodes=SET", or anything else: refused.
class FakeAuthorizer : public Authorizer {
public:
    Grant authorize(std::string_view cred) override
    {
        unsigned job, uid;
        char nodes[64];
        std::string c(cred);
        if (std::sscanf(c.c_str(), "job=%u uid=%u nodes=%63s", &job, &uid, nodes) != 3)
            throw net::AuthError("Invalid credential");
        Grant g;
        g.job_id = job;
        g.step_id = 0;
        g.uid = uid;
        g.gid = kGroup;
        g.gids = {kGroup};
        g.user = "nobody";
        g.nodes = RangeSet::parse(nodes);
        return g;
    }
};

std::string cred(unsigned n, uid_t uid = kUser)
{
    return "job=42 uid=" + std::to_string(uid) + " nodes=0-" + std::to_string(n - 1);
}

std::string slurp(const std::string &p)
{
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// Everything in a directory (names).
std::vector<std::string> listing(const std::string &dir)
{
    std::vector<std::string> out;
    if (DIR *d = opendir(dir.c_str())) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.' || (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")))
                out.push_back(e->d_name);
        closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

struct BcastCluster {
    Cluster cl;
    FakeAuthorizer authz;
    std::vector<std::unique_ptr<Receiver>> receivers;
    std::vector<std::unique_ptr<Service>> services;
    std::vector<std::string> names;
    std::string dir; // every node's destination directory (one file system: per-node names)
    std::thread loop;
    std::atomic<bool> stop{false};
    event *tick = nullptr;
    std::function<void(unsigned node, unsigned chunks)> on_data; // loop thread
    // Loop thread: a non-empty answer fails node's event with it, unseen
    // by its receiver (a node that cannot do what the event asks).
    std::function<std::string(unsigned node, const std::string &event)> refuse;

    BcastCluster(unsigned n, const std::string &root, unsigned control_fanout = 8)
        : cl(n, 8, 2000ms), dir(root)
    {
        for (unsigned i = 0; i < n; ++i)
            names.push_back("node" + std::to_string(i));
        for (unsigned i = 0; i < n; ++i) {
            ReceiverConfig rc{i, names[i], dir + "/journal" + std::to_string(i), gate(i), {geteuid()}};
            receivers.push_back(std::make_unique<Receiver>(cl.base, *cl.agents[i], authz, rc,
                                                           Logger("node" + std::to_string(i))));
            receivers.back()->recover();
            auto chunks = std::make_shared<unsigned>(0);
            cl.agents[i]->add_sink("bcast:",
                                   [this, i, chunks](const std::string &ev, uint64_t origin, uint64_t,
                                                     uint64_t, std::string_view data, bool sealed) {
                                       if (ev.rfind("bcast:data:", 0) == 0 && on_data)
                                           on_data(i, ++*chunks);
                                       if (refuse) {
                                           std::string why = refuse(i, ev);
                                           if (!why.empty())
                                               return why;
                                       }
                                       return receivers[i] ? receivers[i]->on_chunk(ev, origin, data, sealed)
                                                           : std::string("no receiver");
                                   });
            services.push_back(std::make_unique<Service>(*cl.agents[i], authz,
                                                         ServiceConfig{i, names, control_fanout},
                                                         Logger("head" + std::to_string(i))));
            auto *svc = services.back().get();
            cl.agents[i]->on_service_frames([svc](net::Connection &c, const net::FrameHeader &h,
                                                  std::string_view p) { svc->on_frame(c, h, p); },
                                            [svc](net::Connection &c) { svc->on_closed(c); });
        }
        tick = event_new(
            cl.base, -1, EV_PERSIST, [](evutil_socket_t, short, void *) {}, nullptr);
        timeval tv{0, 10000};
        evtimer_add(tick, &tv);
        loop = std::thread([this] {
            storm::block_sigpipe();
            while (!stop)
                event_base_loop(cl.base, EVLOOP_ONCE);
        });
    }
    ~BcastCluster()
    {
        stop = true;
        loop.join();
        event_free(tick);
        services.clear();
        receivers.clear();
    }
    // Node `victim` dies (its engine and receiver go) after its
    // `chunks`-th chunk.
    void kill_after(unsigned victim, unsigned chunks)
    {
        killed = victim;
        on_data = [this, victim, chunks](unsigned node, unsigned n) {
            if (node == victim && n == chunks)
                event_base_once(
                    cl.base, -1, EV_TIMEOUT,
                    [](evutil_socket_t, short, void *a) {
                        auto *b = static_cast<BcastCluster *>(a);
                        b->receivers[b->killed].reset();
                        b->cl.agents[b->killed].reset();
                    },
                    this, nullptr);
        };
    }
    unsigned killed = 0;
    // Node i's launch gate.
    std::string gate(unsigned i) const { return dir + "/gate" + std::to_string(i) + ".sock"; }
    ClientOptions options(const std::string &dest, const std::string &credential, uint32_t chunk = 16 << 10)
    {
        ClientOptions o;
        o.agent = cl.table[0];
        o.agent_index = 0;
        o.cred = credential;
        o.dest = dest;
        o.flags = kForce;
        o.chunk_size = chunk;
        o.window = 8;
        o.timeout = 2000ms;
        return o;
    }
    // Runs f on the loop thread and waits for it.
    void on_loop(std::function<void()> f)
    {
        std::atomic<bool> done{false};
        auto *arg = new std::pair<std::function<void()>, std::atomic<bool> *>(std::move(f), &done);
        event_base_once(
            cl.base, -1, EV_TIMEOUT,
            [](evutil_socket_t, short, void *a) {
                auto *p = static_cast<std::pair<std::function<void()>, std::atomic<bool> *> *>(a);
                p->first();
                *p->second = true;
                delete p;
            },
            arg, nullptr);
        while (!done)
            std::this_thread::sleep_for(1ms);
    }
    // Broadcast sessions still open on the nodes once they all closed, or
    // after `limit`.
    size_t sessions_left(std::chrono::milliseconds limit = 1000ms)
    {
        auto end = std::chrono::steady_clock::now() + limit;
        size_t n;
        while ((n = open_sessions()) != 0 && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(10ms);
        return n;
    }
    size_t open_sessions()
    {
        size_t n = 0;
        on_loop([&] {
            for (auto &r : receivers)
                n += r ? r->sessions() : 0;
        });
        return n;
    }

    // The client, as user `uid` (its connection's credential).
    std::string send(const Source &src, const std::string &dest, const std::string &credential,
                     uid_t uid = kUser, uint32_t flags = kForce, uint8_t fanout = 1,
                     uint32_t chunk = 16 << 10)
    {
        FakeAuth user(uid);
        ClientOptions o = options(dest, credential, chunk);
        o.flags = flags;
        o.fanout = fanout;
        try {
            broadcast(user, o, src);
        } catch (const BcastError &e) {
            return e.what();
        }
        return "";
    }
};

// A directory every user may create files in (like /tmp).
std::string open_to_all(const std::string &dir)
{
    mkdir(dir.c_str(), 0755);
    chmod(dir.c_str(), 01777); // not subject to the umask
    return dir;
}

struct TempDir {
    std::string path;
    TempDir()
    {
        char t[] = "/tmp/storm-bcast-test.XXXXXX";
        path = open_to_all(mkdtemp(t));
    }
    ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

std::string make_file(const std::string &path, size_t size, mode_t mode)
{
    std::string data(size, '\0');
    std::mt19937_64 rng(size);
    for (auto &c : data)
        c = static_cast<char>(rng());
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
    chmod(path.c_str(), mode);
    return data;
}

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

// slurmstepd's side of the launch gate on every node, on threads: each
// waits until the broadcasts ended on its node, and notes whether its copy
// was in place when the answer came.
struct Waiters {
    struct Result {
        std::atomic<bool> done{false};
        std::string error;
        bool in_place = false;
    };
    std::vector<std::unique_ptr<Result>> results;
    std::vector<std::thread> threads;
    Waiters(BcastCluster &bc, unsigned n, const std::vector<uint64_t> &sids, const std::string &out)
    {
        for (unsigned i = 0; i < n; ++i) {
            results.push_back(std::make_unique<Result>());
            Result *r = results.back().get();
            std::string sock = bc.gate(i), copy = out + "/slurm_bcast_42.0_node" + std::to_string(i);
            threads.emplace_back([r, sock, copy, sids] {
                try {
                    gate::wait(sock, 42, 0, sids);
                } catch (const std::exception &e) {
                    r->error = e.what();
                }
                r->in_place = access(copy.c_str(), F_OK) == 0;
                r->done = true;
            });
        }
    }
    ~Waiters() { join(); }
    void join()
    {
        for (auto &t : threads)
            if (t.joinable())
                t.join();
    }
    size_t answered() const
    {
        return static_cast<size_t>(
            std::count_if(results.begin(), results.end(), [](const auto &r) { return r->done.load(); }));
    }
};

// srun --bcast's overlap: the client opens the broadcast, slurmstepd waits
// on every node's gate while nothing is streamed yet, and each is let go
// only once the file is in place on its node (every node confirmed every
// byte).  A session the node never saw is refused at once; a waiter that
// comes after the commit goes at once.
void test_launch_gate_holds_until_commit(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/prog";
    std::string data = make_file(src, 2 << 20, 0755);
    std::string out = open_to_all(t.path + "/out");
    BcastCluster bc(5, t.path);
    FakeAuth user(kUser);
    Broadcast b(user, bc.options(out + "/", cred(5)), scan(src));
    uint64_t sid = b.open();
    assert_int_not_equal(sid, 0);
    assert_int_equal(b.open(), sid); // again: at once, the same session
    Waiters w(bc, 5, {sid}, out);
    std::this_thread::sleep_for(200ms);
    assert_int_equal(w.answered(), 0); // held: not a byte was streamed yet
    assert_true(listing(out).size() == 5 && listing(out)[0].rfind(".slurm_bcast_42.0_node0.storm-", 0) == 0);
    b.finish();
    w.join();
    for (unsigned i = 0; i < 5; ++i) {
        assert_string_equal(w.results[i]->error.c_str(), "");
        assert_true(w.results[i]->in_place);
        assert_true(slurp(out + "/slurm_bcast_42.0_node" + std::to_string(i)) == data);
    }
    // After the commit: at once.
    gate::wait(bc.gate(2), 42, 0, {sid});
    // A session this node never saw.
    std::string err = test_helpers::error_of<std::runtime_error>([&] {
        gate::wait(bc.gate(1), 42, 0, {sid, sid + 1});
    });
    assert_true(contains(err, "broadcast " + session_hex(sid + 1) + " is unknown on this node"));
}

// A node dying mid-transfer: no waiter anywhere is let go.  The live
// nodes' waiters hear that the head aborted the broadcast, the dying
// node's that its agent stopped; and no node has the file.
void test_launch_gate_fails_with_the_broadcast(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/prog";
    make_file(src, 4 << 20, 0755);
    std::string out = open_to_all(t.path + "/out");
    BcastCluster bc(6, t.path);
    bc.kill_after(4, 20);
    FakeAuth user(kUser);
    Broadcast b(user, bc.options(out + "/", cred(6)), scan(src));
    uint64_t sid = b.open();
    Waiters w(bc, 6, {sid}, out);
    std::this_thread::sleep_for(100ms);
    std::string err = test_helpers::error_of<BcastError>([&] { b.finish(); });
    assert_true(contains(err, "node4: "));
    w.join();
    for (unsigned i = 0; i < 6; ++i) {
        const auto &r = *w.results[i];
        assert_false(r.in_place);
        assert_true(contains(r.error, "broadcast " + session_hex(sid) +
                                          " failed: " + (i == 4 ? "the agent is stopping" : "")));
    }
    assert_int_equal(bc.sessions_left(), 0);
    assert_true(listing(out).empty());
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

// The gate's socket: only the trusted uids may ask; a malformed request is
// answered with an error and leaves the gate working; the variable's
// format.
void test_launch_gate_requests(void **)
{
    TempDir t;
    event_base *base = event_base_new();
    std::string sock = t.path + "/g.sock";
    auto spin = [&] {
        for (int i = 0; i < 20; ++i)
            event_base_loop(base, EVLOOP_NONBLOCK);
    };
    // The error a waiter on `path` gets, while this thread runs the loop.
    auto refusal = [&](const std::string &path, std::vector<uint64_t> sids) {
        std::atomic<bool> done{false};
        std::string e;
        std::thread c([&] {
            e = test_helpers::error_of<std::runtime_error>([&] { gate::wait(path, 1, 0, sids); });
            done = true;
        });
        for (int i = 0; i < 2000 && !done; ++i) {
            spin();
            std::this_thread::sleep_for(1ms);
        }
        c.join();
        return e;
    };
    {
        LaunchGate g(base, sock, {geteuid() + 1}, Logger("gate"));
        g.start();
        assert_true(contains(refusal(sock, {7}), "only slurmstepd may hold a step"));
    }
    // Every gate is gone before the loop it listens on: a gate freed after
    // event_base_free() would free its events into freed memory.
    {
        LaunchGate g(base, sock, {geteuid()}, Logger("gate"));
        g.start();
        g.opened(9);
        std::atomic<int> phase{0};
        std::string junk;
        std::thread c([&] {
            junk = net::unix_request(sock, "junk", 2000);
            phase = 1;
            gate::wait(sock, 1, 0, {9}); // answered once session 9 ends
            phase = 2;
        });
        for (int i = 0; i < 2000 && !(phase == 1 && g.waiters() == 1); ++i) {
            spin();
            std::this_thread::sleep_for(1ms);
        }
        assert_int_equal(g.waiters(), 1);
        assert_true(contains(junk, "malformed request"));
        g.ended(9, "");
        for (int i = 0; i < 2000 && phase != 2; ++i) {
            spin();
            std::this_thread::sleep_for(1ms);
        }
        c.join();
        assert_int_equal(phase, 2);
        assert_int_equal(g.waiters(), 0);
        // A waiter whose slurmstepd goes away is dropped.
        g.opened(10);
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::strcpy(sa.sun_path, sock.c_str());
        assert_int_equal(connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
        std::string req = gate::hold(1, 0, {10});
        assert_int_equal(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
        for (int i = 0; i < 200 && g.waiters() == 0; ++i)
            spin();
        assert_int_equal(g.waiters(), 1);
        close(fd);
        for (int i = 0; i < 200 && g.waiters() == 1; ++i)
            spin();
        assert_int_equal(g.waiters(), 0);
        // Ended sessions are forgotten after `keep` (here 0 s).
        {
            LaunchGate quick(base, t.path + "/q.sock", {geteuid()}, Logger("gate"), std::chrono::seconds(0));
            quick.start();
            quick.opened(11);
            quick.ended(11, "");
            std::this_thread::sleep_for(5ms);
            quick.sweep();
            assert_true(contains(refusal(t.path + "/q.sock", {11}), "is unknown on this node"));
        }
    }
    event_base_free(base);
    // The variable.
    assert_string_equal(gate::format({1, 0xabcdef0123456789ull}).c_str(),
                        "0000000000000001,abcdef0123456789");
    assert_true(gate::parse("0000000000000001,abcdef0123456789") ==
                (std::vector<uint64_t>{1, 0xabcdef0123456789ull}));
    for (const char *bad : {"", "1", "0000000000000001,", "ABCDEF0123456789", "000000000000000g"})
        assert_true(contains(test_helpers::error_of<std::invalid_argument>([&] { gate::parse(bad); }),
                             "is not a broadcast's session id"));
    std::string many;
    for (int i = 0; i <= 16; ++i)
        many += (i ? "," : "") + gate::format({static_cast<uint64_t>(i)});
    assert_true(contains(test_helpers::error_of<std::invalid_argument>([&] { gate::parse(many); }),
                         "more than 16 broadcasts"));
}

// A held step hears from its agent every `still` interval, so it waits as
// long as its broadcast lives, beyond its limit for silence; an agent that
// says nothing for that long (its loop stuck) fails the step, with the
// reason, instead of holding it for ever.
void test_launch_gate_still(void **)
{
    TempDir t;
    event_base *base = event_base_new();
    std::string sock = t.path + "/s.sock";
    auto run_loop_until = [&](std::chrono::steady_clock::time_point until, const std::atomic<bool> &done) {
        while (std::chrono::steady_clock::now() < until && !done) {
            event_base_loop(base, EVLOOP_NONBLOCK);
            std::this_thread::sleep_for(1ms);
        }
    };
    {
        LaunchGate g(base, sock, {geteuid()}, Logger("gate"), std::chrono::minutes(10), 50ms);
        g.start();
        g.opened(21);
        std::atomic<bool> done{false};
        std::string err = "not answered";
        std::thread c([&] {
            err = test_helpers::error_of<std::runtime_error>([&] { gate::wait(sock, 1, 0, {21}, 300ms); });
            done = true;
        });
        // Held for 1 s, over three times the waiter's 300 ms.
        run_loop_until(std::chrono::steady_clock::now() + 1s, done);
        assert_false(done);
        assert_int_equal(g.waiters(), 1);
        g.ended(21, "");
        run_loop_until(std::chrono::steady_clock::now() + 5s, done);
        c.join();
        assert_string_equal(err.c_str(), ""); // let go: its program is in place
        // The loop stops running (a stuck agent): the step gives up after
        // its limit, and says why.
        g.opened(22);
        auto t0 = std::chrono::steady_clock::now();
        std::string stuck =
            test_helpers::error_of<std::runtime_error>([&] { gate::wait(sock, 1, 0, {22}, 300ms); });
        auto took = std::chrono::steady_clock::now() - t0;
        assert_true(contains(stuck, "said nothing for 300 ms while it held the step"));
        assert_true(took >= 300ms && took < 5s);
    }
    event_base_free(base);
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
        q.entries.push_back(Entry{"", false, 0644, uint64_t(chunk) * chunks, 0, 0});
        conn->send(kOpenFrame, 0, q.encode());
        std::string bytes(chunk, 'x');
        for (unsigned i = 0; i < chunks; ++i) {
            net::Writer w;
            ChunkHeader{0, uint64_t(i) * chunk, chunk, crc32(bytes), false}.encode(w);
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

void test_protocol_decoding(void **)
{
    // The frames' payload limits, as in protocol version 1: open and data
    // a chunk's, close and reply a control frame's.
    assert_int_equal(net::max_payload(kOpenFrame), net::kMaxDataPayload);
    assert_int_equal(net::max_payload(kDataFrame), net::kMaxDataPayload);
    assert_int_equal(net::max_payload(kCloseFrame), net::kMaxControlPayload);
    assert_int_equal(net::max_payload(kReplyFrame), net::kMaxControlPayload);
    assert_true(net::is_service_frame(kOpenFrame) && net::is_service_frame(kDataFrame) &&
                net::is_service_frame(kCloseFrame) && net::is_service_frame(kReplyFrame));
    assert_int_equal(crc32("123456789"), 0xe3069283u); // the CRC-32C check value
    assert_int_equal(crc32(""), 0u);
    OpenRequest q;
    q.cred = "c";
    q.dest = "/tmp/x";
    q.entries.push_back(Entry{"", true, 0755, 0, 0, 0});
    q.entries.push_back(Entry{"a/b", false, 0644, 3, 0, 0});
    OpenRequest d = OpenRequest::decode(q.encode());
    assert_int_equal(d.entries.size(), 2);
    assert_string_equal(d.entries[1].path.c_str(), "a/b");
    for (const char *p : {"../x", "a/../b", "/abs", "a//b", "a/", ".", ""}) {
        q.entries[1].path = p;
        assert_true(
            contains(test_helpers::error_of<net::DecodeError>([&] { OpenRequest::decode(q.encode()); }),
                     "is not allowed"));
    }
    q.entries[1].path = "ok";
    q.dest = "relative";
    assert_true(contains(test_helpers::error_of<net::DecodeError>([&] { OpenRequest::decode(q.encode()); }),
                         "not an absolute path"));
}

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

} // namespace

int main()
{
    evthread_use_pthreads();
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_protocol_decoding),
        cmocka_unit_test(test_chunk_size_defaults),
        cmocka_unit_test(test_file_reaches_every_node),
        cmocka_unit_test(test_chunks_sent_while_opening),
        cmocka_unit_test(test_early_chunks_bounded),
        cmocka_unit_test(test_full_window_waits_idle),
        cmocka_unit_test(test_force_replaces_a_file),
        cmocka_unit_test(test_failed_commit_leaves_no_node_changed),
        cmocka_unit_test(test_directory_and_preserve),
        cmocka_unit_test(test_bad_credentials),
        cmocka_unit_test(test_a_node_that_cannot_write_fails_all),
        cmocka_unit_test(test_node_killed_mid_transfer),
        cmocka_unit_test(test_receiver_rejects_and_recovers),
        cmocka_unit_test(test_launch_gate_holds_until_commit),
        cmocka_unit_test(test_launch_gate_fails_with_the_broadcast),
        cmocka_unit_test(test_launch_gate_requests),
        cmocka_unit_test(test_launch_gate_still),
        cmocka_unit_test(test_cancel),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
