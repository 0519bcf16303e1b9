// Shared fixture of the broadcast's tests (launch_bcast/): agents in one
// process on loopback ports (prim_fixture's Cluster), each with a receiver
// and a broadcast service on its engine, run by a loop thread; a fake
// authorizer whose credentials say the job, the user and the nodes; the
// client as the job's user (nobody); temporary directories every user may
// write, files of chosen size and mode, and slurmstepd's side of every
// node's launch gate on threads.  A test builds one BcastCluster and
// touches the agents only from the loop thread (on_loop()).  A test of one
// node's receiver alone builds a OneReceiver instead, and plays the head
// itself, event by event, on its own thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

#include <event2/event.h>

#include "launch_bcast/client.hpp"
#include "launch_bcast/gate.hpp"
#include "launch_bcast/receiver.hpp"
#include "launch_bcast/service.hpp"
#include "lib/common/signals.hpp"
#include "tests/unit/helpers.hpp"
#include "tests/unit/prim_fixture.hpp"

namespace bcast_fixture {

using namespace prim_fixture;
using namespace storm::bcast;

constexpr uid_t kUser = 65534; // the job's owner (nobody)
constexpr gid_t kGroup = 65534;

// "job=J uid=U nodes=SET", or anything else: refused.
class FakeAuthorizer : public Authorizer {
public:
    // Tests: runs first, on the calling thread (a munged slow to answer).
    std::function<void()> on_authorize;
    Grant authorize(std::string_view cred, const net::Patience &) override
    {
        if (on_authorize)
            on_authorize();
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

inline std::string cred(unsigned n, uid_t uid = kUser)
{
    return "job=42 uid=" + std::to_string(uid) + " nodes=0-" + std::to_string(n - 1);
}

using test_helpers::slurp;

// Everything in a directory (names).
inline std::vector<std::string> listing(const std::string &dir)
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
    // Called on node's worker before each job of its sessions, with what
    // it does (ReceiverConfig::fs_hook); set before a broadcast starts.
    std::function<void(unsigned node, const std::string &what)> fs_hook;

    BcastCluster(unsigned n, const std::string &root, unsigned control_fanout = 8)
        : cl(n, 8, 2000ms), dir(root)
    {
        for (unsigned i = 0; i < n; ++i)
            names.push_back("node" + std::to_string(i));
        for (unsigned i = 0; i < n; ++i) {
            ReceiverConfig rc{i, names[i], dir + "/journal" + std::to_string(i), gate(i), {geteuid()}, {}};
            rc.fs_hook = [this, i](const std::string &what) {
                if (fs_hook)
                    fs_hook(i, what);
            };
            receivers.push_back(std::make_unique<Receiver>(cl.base, *cl.agents[i], authz, rc,
                                                           Logger("node" + std::to_string(i))));
            receivers.back()->recover();
            auto chunks = std::make_shared<unsigned>(0);
            cl.agents[i]->add_async_sink(
                "bcast:", [this, i, chunks](const std::string &ev, uint64_t origin, uint64_t, uint64_t,
                                            const storm::net::DataRef &data, bool sealed,
                                            prim::Engine::ChunkDone done) {
                    if (ev.rfind("bcast:data:", 0) == 0 && on_data)
                        on_data(i, ++*chunks);
                    if (refuse) {
                        std::string why = refuse(i, ev);
                        if (!why.empty())
                            return done(why);
                    }
                    if (!receivers[i])
                        return done("no receiver");
                    receivers[i]->on_chunk(ev, origin, data, sealed, std::move(done));
                });
            services.push_back(std::make_unique<Service>(cl.base, *cl.agents[i], authz,
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
    Codec compress = Codec::none; // the clients' -C
    uint64_t wire = 0;            // the bytes the last send() sent
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
        o.compress = compress;
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
                n += r ? r->sessions() + r->draining() : 0;
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
            wire = broadcast(user, o, src);
        } catch (const BcastError &e) {
            return e.what();
        }
        return "";
    }
};

// One node's receiver (node 0 of one, "n0", its journal in DIR/journal,
// no launch gate), driven by the test's thread: no loop thread runs, ask()
// runs the loop until the receiver answers.
struct OneReceiver {
    Cluster cl{1, 8};
    FakeAuthorizer authz;
    ReceiverConfig config;
    std::unique_ptr<Receiver> rx;

    // `fs_hook`: ReceiverConfig's.
    explicit OneReceiver(const std::string &dir, std::function<void(const std::string &)> fs_hook = {})
        : config{0, "n0", dir + "/journal", "", {}, {}}
    {
        config.fs_hook = std::move(fs_hook);
        start();
    }
    // A new receiver in place of the one running (destroyed, as slurmd
    // stopping; released first, as slurmd killed), once it recovered what
    // its journal names.
    void start()
    {
        rx = std::make_unique<Receiver>(cl.base, *cl.agents[0], authz, config, Logger("n0"));
        rx->recover();
        settle();
    }
    // Runs the loop until the receiver's work settled: no removal waiting
    // for a worker, recover() done (bounded: a test that hangs fails
    // instead).
    void settle()
    {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while ((rx->draining() != 0 || rx->recovering()) && std::chrono::steady_clock::now() < end)
            event_base_loop(cl.base, EVLOOP_ONCE);
    }
    // The receiver's answer to event "bcast:<kind>:<sid>" (the loop run
    // until it came), once what it queued settled.
    std::string ask(const std::string &kind, uint64_t sid, std::string_view data = {}, bool sealed = false)
    {
        auto got = std::make_shared<std::optional<std::string>>();
        // As the engine gives them: sealed bytes (a multicast chunk's) in a
        // buffer of their own, which the receiver keeps; others for the
        // call only, which it copies.
        auto own = sealed ? std::make_shared<const std::string>(data) : nullptr;
        storm::net::DataRef ref{own, own ? own->data() : data.data(), data.size()};
        rx->on_chunk(event_name(kind.c_str(), sid), sid, ref, sealed, [got](const std::string &why) {
            if (!*got)
                *got = why;
        });
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!*got && std::chrono::steady_clock::now() < end)
            event_base_loop(cl.base, EVLOOP_ONCE);
        settle();
        return *got ? **got : std::string("no answer within 20 s");
    }
    // The commit of `sid`, once every node confirmed every byte (as the
    // head's COMPARE-AND-WRITE sets it): the receiver's answer.
    std::string commit(uint64_t sid)
    {
        cl.agents[0]->set_variable(var_prefix(sid) + "commit", 1);
        return ask("commit", sid);
    }
};

// The open of a single file, `dest`, of `size` bytes (mode 0644), for the
// job's user on one node.
inline OpenRequest file_request(const std::string &dest, uint64_t size = 10)
{
    OpenRequest q;
    q.cred = cred(1);
    q.dest = dest;
    q.entries.push_back(Entry{"", Entry::file, 0644, size, 0, 0, {}, 0});
    return q;
}

// The open of a tree at `dest`, for the job's user on one node: its top
// directory (mode 0755), the entries under it for the test to add.
inline OpenRequest tree_request(const std::string &dest)
{
    OpenRequest q;
    q.cred = cred(1);
    q.dest = dest;
    q.entries.push_back(Entry{"", Entry::directory, 0755, 0, 0, 0, {}, 0});
    return q;
}

// A chunk of `bytes` at `offset` (the start by default) of entry `entry`,
// not compressed.
inline std::string data_chunk(uint32_t entry, const std::string &bytes, uint64_t offset = 0)
{
    net::Writer w;
    ChunkHeader{entry, offset, static_cast<uint32_t>(bytes.size()), crc32(bytes), Codec::none}.encode(w);
    return w.take() + bytes;
}

// A directory every user may create files in (like /tmp).
inline std::string open_to_all(const std::string &dir)
{
    mkdir(dir.c_str(), 0755);
    chmod(dir.c_str(), 01777); // not subject to the umask
    return dir;
}

// A temporary directory every user may write.
struct TempDir : test_helpers::TempDir {
    TempDir() : test_helpers::TempDir("storm-bcast-test") { open_to_all(path); }
};

inline std::string make_file(const std::string &path, size_t size, mode_t mode)
{
    std::string data(size, '\0');
    std::mt19937_64 rng(size);
    for (auto &c : data)
        c = static_cast<char>(rng());
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
    chmod(path.c_str(), mode);
    return data;
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

} // namespace bcast_fixture
