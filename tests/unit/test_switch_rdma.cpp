// The switch/rdma shim (plugins/switch_rdma/) as Slurm drives it, without
// a cluster: the built plugin is loaded into this process, which plays
// slurmctld (slurm_prog_name, the job records, find_job_record) and
// slurmstepd (slurmd's `conf` with a spool directory where a fake node
// agent listens), with Slurm's own pack buffers and environment arrays
// from libslurmfull.  Partition "work" is coscheduled
// (storm_cosched_partitions).  The entry points differ between Slurm's API
// generations: tests/unit/api<GEN>/switch_rdma_api.hpp calls those of the
// configured line.
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fstream> // before cmocka, whose fail() macro breaks <ios>
#include <map>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include "switch_rdma/control.hpp"
#include "tests/unit/helpers.hpp"

extern "C" {
#include "src/common/slurm_xlator.h" // first: Slurm's names in libslurmfull
}
#include "slurm_api.hpp" // slurmctld.h and slurmstepd_job.h, as the plugin reads them
extern "C" {
#include "src/common/env.h"
#include "src/common/pack.h"
#include "src/common/read_config.h"
#include "src/common/run_in_daemon.h"
#include "src/common/xmalloc.h"
#include "src/common/xstring.h"
#include "src/slurmd/slurmd/slurmd.h"
}
#include "switch_rdma_api.hpp"
#undef error // log.h's macros would rewrite control::error and cmocka's names
#undef info
#undef debug
#undef verbose
#include "tests/unit/cmocka.hpp"

using test_helpers::contains;
namespace control = storm::rdma::control;

// What slurmctld and slurmd export to the plugin (this executable is linked
// with --export-dynamic).
std::map<uint32_t, job_record_t *> g_jobs;
extern "C" {
slurmd_conf_t *conf = nullptr;
job_record_t *find_job_record(uint32_t job_id)
{
    auto it = g_jobs.find(job_id);
    return it == g_jobs.end() ? nullptr : it->second;
}
}

namespace {

// A job record for job_complete (its id is what counts).
job_record_t *job_record(uint32_t job_id)
{
    static job_record_t job;
    job = job_record_t{};
    job.job_id = job_id;
    return &job;
}

struct Plugin : switch_api::Api {
    void *h = nullptr;
    void load()
    {
        h = dlopen(STORM_SWITCH_SO, RTLD_LAZY | RTLD_LOCAL);
        if (!h)
            std::fprintf(stderr, "%s\n", dlerror());
        assert_non_null(h);
        Api::load([this](auto &f, const char *name) {
            f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, name));
            if (!f)
                std::fprintf(stderr, "missing %s\n", name);
            assert_non_null(reinterpret_cast<void *>(f));
        });
    }
} P;

std::string g_dir; // StateSaveLocation and SlurmdSpoolDir
constexpr const char *kParams = "storm_ctx_max=2,storm_pool_size=67108864,storm_cosched_partitions=work";

// New SwitchParameters, as `scontrol reconfigure` gives them.
void reconfigure(const char *params)
{
    xfree(slurm_conf.switch_param);
    slurm_conf.switch_param = xstrdup(params);
    assert_int_equal(P.reconfig(g_dir), SLURM_SUCCESS);
}

// A step of job `job` with `per_node[i]` tasks on node i, ranks dealt
// round robin over the nodes.
struct Step {
    job_record_t job{};
    part_record_t part{};
    step_record_t step{};
    slurm_step_layout_t layout{};
    std::vector<uint16_t> tasks;
    std::vector<std::vector<uint32_t>> tids;
    std::vector<uint32_t *> tid_ptrs;
    std::string nodes;
    std::string part_name;
    Step(uint32_t job_id, uint32_t step_id, std::vector<uint16_t> per_node, uint16_t max_share = 1,
         const char *partition = nullptr)
    {
        if (partition) {
            part_name = partition;
            part.name = const_cast<char *>(part_name.c_str());
        }
        job.job_id = job_id;
        job.user_id = 1000;
        job.job_state = JOB_RUNNING;
        part.max_share = max_share;
        job.part_ptr = &part;
        step.job_ptr = &job;
        step.step_id.job_id = job_id;
        step.step_id.step_id = step_id;
        step.step_layout = &layout;
        tasks = per_node;
        tids.resize(per_node.size());
        uint32_t rank = 0, left = 0;
        for (auto t : per_node)
            left += t;
        layout.task_cnt = left;
        while (left)
            for (size_t n = 0; n < per_node.size(); ++n)
                if (tids[n].size() < per_node[n]) {
                    tids[n].push_back(rank++);
                    --left;
                }
        for (auto &t : tids)
            tid_ptrs.push_back(t.data());
        for (size_t n = 0; n < per_node.size(); ++n)
            nodes += std::string(n ? "," : "") + "localhost";
        layout.node_cnt = static_cast<uint32_t>(per_node.size());
        layout.node_list = const_cast<char *>(nodes.c_str());
        layout.tasks = tasks.data();
        layout.tids = tid_ptrs.data();
        g_jobs[job_id] = &job;
    }
    ~Step() { g_jobs.erase(job.job_id); }
};

// Builds a jobinfo for `s`; returns build's result, the jobinfo in *out.
int build(Step &s, void **out) { return P.build(out, &s.layout, &s.step); }

// The STORM_CTX a task of this jobinfo gets ("" if none), its key (64
// lowercase hex digits after the uid, checked here) written KEY unless
// `raw`: every step has a key of its own.
std::string ctx_env(void *info, bool raw = false)
{
    char **env = env_array_create();
    assert_int_equal(P.attach(info, &env), SLURM_SUCCESS);
    const char *v = getenvp(env, "STORM_CTX");
    std::string out = v ? v : "";
    const char *sock = getenvp(env, "STORM_POOL_SOCKET");
    if (v) {
        assert_non_null(sock);
        assert_string_equal(sock, (g_dir + "/storm-pool.sock").c_str());
    } else {
        assert_null(sock);
    }
    env_array_free(env);
    if (out.empty() || raw)
        return out;
    size_t at = 0;
    for (int field = 0; field < 5; ++field)
        at = out.find(';', at) + 1;
    size_t end = out.find(';', at);
    assert_true(at > 0 && end != std::string::npos && end - at == 64);
    for (size_t i = at; i < end; ++i)
        assert_true(std::isdigit(static_cast<unsigned char>(out[i])) || (out[i] >= 'a' && out[i] <= 'f'));
    return out.replace(at, end - at, "KEY");
}

// The coscheduling variables a task of this jobinfo gets, its environment
// holding `before` first (what srun passed on): name -> value, absent if
// unset.
std::map<std::string, std::string> cosched_env(void *info, const std::map<std::string, std::string> &before)
{
    char **env = env_array_create();
    for (const auto &[k, v] : before)
        env_array_overwrite(&env, k.c_str(), v.c_str());
    assert_int_equal(P.attach(info, &env), SLURM_SUCCESS);
    std::map<std::string, std::string> out;
    for (const char *k : {"STORM_COSCHED_SOCKET", "STORM_COSCHED_REFUSED"})
        if (const char *v = getenvp(env, k))
            out[k] = v;
    env_array_free(env);
    return out;
}

// Makes the packed bytes of `buf` readable from the start, as a receiver
// sees them (its size is what was packed).
void reread(buf_t *buf)
{
    buf->size = get_buf_offset(buf);
    set_buf_offset(buf, 0);
}

std::string read_text(const std::string &path)
{
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

int setup(void **)
{
    char t[] = "/tmp/storm-switch-XXXXXX";
    assert_non_null(mkdtemp(t));
    g_dir = t;
    switch_api::play_slurmctld(); // before any running_in_*()
    slurm_conf.switch_type = xstrdup("switch/rdma");
    slurm_conf.switch_param = xstrdup(kParams);
    slurm_conf.schedtype = xstrdup("sched/gang");
    conf = static_cast<slurmd_conf_t *>(xmalloc(sizeof(slurmd_conf_t)));
    conf->spooldir = xstrdup(g_dir.c_str());
    P.load();
    assert_int_equal(P.init(), SLURM_SUCCESS);
    return 0;
}

int teardown(void **)
{
    P.fini();
    std::string cmd = "rm -rf '" + g_dir + "'";
    return system(cmd.c_str()) == 0 ? 0 : -1;
}

void test_build_pack_attach(void **)
{
    P.clear(g_dir);
    Step s(100, 0, {2, 1}, SHARED_FORCE | 4); // FORCE:4 under sched/gang: swapped
    void *info = nullptr;
    assert_int_equal(build(s, &info), SLURM_SUCCESS);
    std::string text = ctx_env(info);
    assert_string_equal(text.c_str(), "4;0;100;0;1000;KEY;s;-;1;40000;3;127.0.0.1=0,2/127.0.0.1=1");

    // Through Slurm's buffers, as srun, slurmd and slurmstepd see it.
    buf_t *buf = init_buf(1024);
    assert_int_equal(P.pack(info, buf), SLURM_SUCCESS);
    reread(buf);
    void *copy = nullptr;
    assert_int_equal(P.unpack(&copy, buf), SLURM_SUCCESS);
    // The key too (raw).
    assert_string_equal(ctx_env(copy, true).c_str(), ctx_env(info, true).c_str());
    free_buf(buf);
    void *dup = nullptr;
    assert_int_equal(P.duplicate(copy, &dup), SLURM_SUCCESS);
    assert_string_equal(ctx_env(dup, true).c_str(), ctx_env(info, true).c_str());
    P.free_(dup);
    P.free_(copy);
    // No keys (22.05's get_jobinfo).
    if (P.has_get()) {
        int x;
        assert_int_equal(P.get(info, 1, &x), SLURM_ERROR);
        assert_int_equal(errno, EINVAL);
    }

    // Without a context (NULL jobinfo, as Slurm packs for none) and
    // malformed input.
    buf = init_buf(1024);
    assert_int_equal(P.pack(nullptr, buf), SLURM_SUCCESS);
    reread(buf);
    assert_int_equal(P.unpack(&copy, buf), SLURM_SUCCESS);
    assert_string_equal(ctx_env(copy).c_str(), "");
    P.free_(copy);
    free_buf(buf);
    buf = init_buf(1024);
    pack16(2, buf); // a later version
    packnull(buf);
    reread(buf);
    assert_int_equal(P.unpack(&copy, buf), SLURM_ERROR);
    assert_null(copy);
    free_buf(buf);
    buf = init_buf(1024);
    pack16(1, buf);
    char bad_mode[] = "2;0;100;0;1000;q;-;1;40000;1;127.0.0.1=0";
    packstr(bad_mode, buf);
    reread(buf);
    assert_int_equal(P.unpack(&copy, buf), SLURM_ERROR);
    free_buf(buf);
    buf = init_buf(1024);
    pack16(1, buf);
    char old_format[] = "1;0;100;0;1000;d;1;40000;1;127.0.0.1=0"; // an older Storm's context
    packstr(old_format, buf);
    reread(buf);
    assert_int_equal(P.unpack(&copy, buf), SLURM_ERROR);
    assert_null(copy);
    free_buf(buf);
    buf = init_buf(1024);
    pack16(1, buf); // truncated
    reread(buf);
    assert_int_equal(P.unpack(&copy, buf), SLURM_ERROR);
    free_buf(buf);

    assert_int_equal(P.step_complete(info, s.layout.node_list), SLURM_SUCCESS);
    P.free_(info);
}

void test_modes_and_refusals(void **)
{
    P.clear(g_dir);
    // Without FORCE, or with FORCE:1: divided, n=1.
    Step a(200, 0, {1}), b(201, 3, {1}, SHARED_FORCE | 1);
    void *ia = nullptr, *ib = nullptr, *ic = nullptr, *id = nullptr;
    assert_int_equal(build(a, &ia), SLURM_SUCCESS);
    assert_string_equal(ctx_env(ia).c_str(), "4;0;200;0;1000;KEY;d;-;1;40000;1;127.0.0.1=0");
    assert_int_equal(build(b, &ib), SLURM_SUCCESS);
    assert_string_equal(ctx_env(ib).c_str(), "4;1;201;3;1000;KEY;d;-;1;40000;1;127.0.0.1=0");
    auto key_of = [](const std::string &t) { // the sixth field
        size_t at = 0;
        for (int field = 0; field < 5; ++field)
            at = t.find(';', at) + 1;
        return t.substr(at, t.find(';', at) - at);
    };
    assert_true(key_of(ctx_env(ia, true)) != key_of(ctx_env(ib, true))); // keys of their own
    // storm_ctx_max=2: the third waits (srun retries on INTERCONNECT_BUSY).
    Step c(202, 0, {1});
    assert_int_equal(build(c, &ic), SLURM_ERROR);
    assert_int_equal(errno, storm::slurm_api::kInterconnectBusy);
    assert_string_equal(ctx_env(ic).c_str(), "");
    P.step_complete(ic, c.layout.node_list); // what delete_step_record does
    P.free_(ic);
    // The first ends: its id is the lowest free one again.
    P.step_complete(ia, a.layout.node_list);
    P.free_(ia);
    assert_int_equal(build(c, &ic), SLURM_SUCCESS);
    assert_true(contains(ctx_env(ic), "4;0;202;0;"));
    P.free_(ic); // c keeps id 0 until its job ends
    P.job_complete(job_record(202));
    // 65 tasks on a node: refused for good.
    Step d(203, 0, {65});
    assert_int_equal(build(d, &id), SLURM_ERROR);
    assert_int_equal(errno, ESLURM_INTERCONNECT_FAILURE);
    P.free_(id);
    // The id freed by job 202 is free.
    Step e(204, 0, {64});
    void *ie = nullptr;
    assert_int_equal(build(e, &ie), SLURM_SUCCESS);
    assert_true(contains(ctx_env(ie), "4;0;204;0;1000;KEY;d;-;1;"));
    // FORCE:8 without sched/gang: divided n=8; 64 tasks on a node leave
    // no credit, which does not refuse the step (its tasks get the reason).
    slurm_conf.schedtype = xstrdup("sched/backfill");
    Step f(205, 0, {64}, SHARED_FORCE | 8), g(206, 0, {1}, SHARED_FORCE | 8);
    void *if_ = nullptr, *ig = nullptr;
    P.job_complete(job_record(204));
    assert_int_equal(build(f, &if_), SLURM_SUCCESS);
    P.free_(if_);
    P.job_complete(job_record(205));
    assert_int_equal(build(g, &ig), SLURM_SUCCESS);
    assert_true(contains(ctx_env(ig), "4;0;206;0;1000;KEY;d;-;8;"));
    P.free_(ig);
    P.job_complete(job_record(206));
    xfree(slurm_conf.schedtype);
    slurm_conf.schedtype = xstrdup("sched/gang");
    P.free_(ie);
    P.free_(ib);
    P.job_complete(job_record(201));
}

void test_restart(void **)
{
    P.clear(g_dir);
    Step a(300, 0, {1}), b(301, 0, {1});
    void *ia = nullptr, *ib = nullptr;
    assert_int_equal(build(a, &ia), SLURM_SUCCESS);
    assert_int_equal(build(b, &ib), SLURM_SUCCESS);
    assert_int_equal(P.save(g_dir), SLURM_SUCCESS);
    std::string file = g_dir + "/switch_rdma_contexts";
    assert_string_equal(read_text(file).c_str(), "storm-contexts 1\n0 300 0\n1 301 0\n");

    // slurmctld restarts; job 300 ended meanwhile, 301 lives (re-marked
    // from the job state), and no file entry may be handed out before.
    P.clear(g_dir);
    assert_int_equal(P.restore(g_dir, true), SLURM_SUCCESS);
    P.recover(ib, b.layout.node_list);
    g_jobs.erase(300);
    Step c(302, 0, {1});
    void *ic = nullptr;
    assert_int_equal(build(c, &ic), SLURM_SUCCESS); // sweeps 300's entry, takes id 0
    assert_true(contains(ctx_env(ic), "4;0;302;0;"));
    P.free_(ic);

    // A stale file: it has job 400's step on id 1, the job state has 301
    // there.  A missing file: the re-marks alone.
    std::ofstream(file) << "storm-contexts 1\n1 400 0\n";
    P.restore(g_dir, true);
    P.recover(ib, b.layout.node_list);
    Step d(303, 0, {1});
    void *id = nullptr;
    assert_int_equal(build(d, &id), SLURM_SUCCESS);
    assert_true(contains(ctx_env(id), "4;0;303;0;"));
    P.free_(id);
    Step e(304, 0, {1});
    void *ie = nullptr;
    assert_int_equal(build(e, &ie), SLURM_ERROR); // 0 (303) and 1 (301) held
    P.free_(ie);

    // A malformed file: logged, kept as .bad, the re-marks still hold.
    std::ofstream(file) << "storm-contexts 1\n0 1\n";
    assert_int_equal(P.restore(g_dir, true), SLURM_SUCCESS);
    struct stat st;
    assert_int_equal(stat((file + ".bad").c_str(), &st), 0);
    assert_int_equal(stat(file.c_str(), &st), -1);
    P.recover(ib, b.layout.node_list);
    Step f(305, 0, {1});
    void *if_ = nullptr;
    assert_int_equal(build(f, &if_), SLURM_SUCCESS);
    assert_true(contains(ctx_env(if_), "4;0;305;0;"));
    P.free_(if_);
    // slurmctld -c: nothing recovered.
    assert_int_equal(P.restore(g_dir, false), SLURM_SUCCESS);
    P.free_(ia);
    P.free_(ib);
    P.clear(g_dir);
}

// A node agent that answers each request with `answer`, `count` times.
struct FakeAgent {
    std::string path = g_dir + "/" + control::socket_name;
    int fd = -1;
    std::thread th;
    std::vector<std::string> got;
    FakeAgent(const std::string &answer, int count)
    {
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
        assert_int_equal(bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
        assert_int_equal(listen(fd, 4), 0);
        th = std::thread([this, answer, count] {
            for (int i = 0; i < count; ++i) {
                int c = accept(fd, nullptr, nullptr);
                if (c < 0)
                    return;
                char buf[65536];
                ssize_t n = recv(c, buf, sizeof buf, 0);
                got.emplace_back(buf, n > 0 ? static_cast<size_t>(n) : 0);
                send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
                close(c);
            }
        });
    }
    // After a job_init and a postfini: the context slurmstepd opened.
    storm::rdma::Context opened()
    {
        th.join();
        assert_int_equal(got.size(), 2);
        storm::net::Reader r(got[0]);
        assert_true(control::header(r).type == control::Type::open);
        return control::read_open(r);
    }
    ~FakeAgent()
    {
        if (th.joinable())
            th.join();
        close(fd);
        unlink(path.c_str());
    }
};

void test_stepd_open_close(void **)
{
    P.clear(g_dir);
    Step s(500, 2, {1, 1});
    void *info = nullptr;
    assert_int_equal(build(s, &info), SLURM_SUCCESS);
    stepd_step_rec_t job{};
    dynamic_plugin_data_t dyn{info, 0};
    P.set_info(job, &dyn);
    job.step_id.job_id = 500;
    job.step_id.step_id = 2;

    // No agent: the step fails.
    assert_int_equal(P.job_init(&job), SLURM_ERROR);
    assert_int_equal(P.postfini(&job), SLURM_SUCCESS); // nothing opened, nothing sent

    {
        FakeAgent agent(control::ok(), 2);
        assert_int_equal(P.job_init(&job), SLURM_SUCCESS);
        assert_int_equal(P.postfini(&job), SLURM_SUCCESS);
        auto ctx = agent.opened();
        assert_int_equal(ctx.job_id, 500);
        assert_int_equal(ctx.step_id, 2);
        assert_int_equal(ctx.nodes.size(), 2);
        assert_true(agent.got[1] == control::close(ctx.id, 500, 2));
    }
    {
        FakeAgent agent(control::error("no room in the pool"), 1);
        assert_int_equal(P.job_init(&job), SLURM_ERROR);
        agent.th.join();
        assert_int_equal(P.postfini(&job), SLURM_SUCCESS);
    }
    // A step without a context: nothing to open.
    void *none = P.empty();
    assert_non_null(none);
    dyn.data = none;
    assert_int_equal(P.job_init(&job), SLURM_SUCCESS);
    dyn.data = nullptr;
    assert_int_equal(P.job_init(&job), SLURM_SUCCESS);
    P.free_(none);
    P.free_(info);
    P.job_complete(job_record(500));
}

// The coscheduling flag: slurmctld marks the steps of the jobs of its
// storm_cosched_partitions (reread at reconfigure); the flag survives
// packing (slurmctld's job state across a restart, srun, slurmd,
// slurmstepd); slurmstepd tells the node agent when it opens the context,
// and gives STORM_COSCHED_SOCKET to those steps' tasks only, whatever
// their environment says.
void test_cosched_flag(void **)
{
    P.clear(g_dir);
    reconfigure("storm_ctx_max=8,storm_pool_size=67108864,storm_cosched_partitions=work");
    Step w(600, 0, {1, 1}, 1, "work"), d(601, 0, {1}, 1, "debug"), n(602, 0, {1});
    void *iw = nullptr, *id = nullptr, *in = nullptr;
    assert_int_equal(build(w, &iw), SLURM_SUCCESS);
    assert_int_equal(build(d, &id), SLURM_SUCCESS);
    assert_int_equal(build(n, &in), SLURM_SUCCESS); // a job without a partition record
    assert_string_equal(ctx_env(iw).c_str(), "4;0;600;0;1000;KEY;d;c;1;40000;2;127.0.0.1=0/127.0.0.1=1");
    assert_string_equal(ctx_env(id).c_str(), "4;1;601;0;1000;KEY;d;-;1;40000;1;127.0.0.1=0");
    assert_true(contains(ctx_env(in), "4;2;602;0;1000;KEY;d;-;"));

    // The tasks: the socket in the coscheduled step only; a forged
    // variable from srun's environment is dropped.
    std::string sock = g_dir + "/storm-cosched.sock";
    auto e = cosched_env(iw, {{"STORM_COSCHED_REFUSED", "forged"}, {"SLURM_JOB_PARTITION", "debug"}});
    assert_int_equal(e.size(), 1);
    assert_string_equal(e["STORM_COSCHED_SOCKET"].c_str(), sock.c_str());
    e = cosched_env(id, {{"STORM_COSCHED_SOCKET", "/tmp/forged.sock"}, {"SLURM_JOB_PARTITION", "debug"}});
    assert_int_equal(e.size(), 1);
    assert_string_equal(e["STORM_COSCHED_REFUSED"].c_str(),
                        "job 601's partition \"debug\" is not coscheduled");
    // An environment claiming a coscheduled partition changes nothing.
    e = cosched_env(id, {{"SLURM_JOB_PARTITION", "work"}});
    assert_int_equal(e.count("STORM_COSCHED_SOCKET"), 0);
    assert_true(contains(e["STORM_COSCHED_REFUSED"], "slurmctld did not mark step 601.0 coscheduled"));

    // Packed and unpacked (slurmctld's job state, srun, slurmd, slurmstepd)
    // and duplicated, the flag stays.
    for (void *info : {iw, id}) {
        buf_t *buf = init_buf(1024);
        assert_int_equal(P.pack(info, buf), SLURM_SUCCESS);
        reread(buf);
        void *copy = nullptr, *dup = nullptr;
        assert_int_equal(P.unpack(&copy, buf), SLURM_SUCCESS);
        assert_int_equal(P.duplicate(copy, &dup), SLURM_SUCCESS);
        assert_string_equal(ctx_env(dup).c_str(), ctx_env(info).c_str());
        assert_int_equal(cosched_env(dup, {}).count("STORM_COSCHED_SOCKET"), info == iw);
        P.free_(dup);
        P.free_(copy);
        free_buf(buf);
    }

    // slurmstepd tells the node agent the step is coscheduled (the agent
    // admits its job while the context is open).
    {
        FakeAgent agent(control::ok(), 2);
        stepd_step_rec_t job{};
        dynamic_plugin_data_t dyn{iw, 0};
        P.set_info(job, &dyn);
        assert_int_equal(P.job_init(&job), SLURM_SUCCESS);
        assert_int_equal(P.postfini(&job), SLURM_SUCCESS);
        auto ctx = agent.opened();
        assert_int_equal(ctx.job_id, 600);
        assert_true(ctx.cosched);
    }

    // Reconfigured: new steps follow the new list, existing ones keep theirs.
    reconfigure("storm_ctx_max=8,storm_pool_size=67108864,storm_cosched_partitions=debug");
    Step d2(601, 1, {1}, 1, "debug"), w2(600, 1, {1}, 1, "work");
    void *id2 = nullptr, *iw2 = nullptr;
    assert_int_equal(build(d2, &id2), SLURM_SUCCESS);
    assert_int_equal(build(w2, &iw2), SLURM_SUCCESS);
    assert_true(contains(ctx_env(id2), ";601;1;1000;KEY;d;c;"));
    assert_true(contains(ctx_env(iw2), ";600;1;1000;KEY;d;-;"));
    assert_true(contains(ctx_env(iw), ";600;0;1000;KEY;d;c;"));
    // Without storm_cosched_partitions nothing is coscheduled, and tasks
    // get neither variable.
    reconfigure("storm_ctx_max=8,storm_pool_size=67108864");
    Step d3(601, 2, {1}, 1, "debug");
    void *id3 = nullptr;
    assert_int_equal(build(d3, &id3), SLURM_SUCCESS);
    assert_true(contains(ctx_env(id3), ";601;2;1000;KEY;d;-;"));
    assert_true(cosched_env(id3, {{"SLURM_JOB_PARTITION", "debug"}}).empty());

    for (void *info : {iw, id, in, id2, iw2, id3})
        P.free_(info);
    for (uint32_t j : {600, 601, 602})
        P.job_complete(job_record(j));
    reconfigure(kParams);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_pack_attach), cmocka_unit_test(test_modes_and_refusals),
        cmocka_unit_test(test_restart),           cmocka_unit_test(test_stepd_open_close),
        cmocka_unit_test(test_cosched_flag),
    };
    return cmocka_run_group_tests_name("switch_rdma", tests, setup, teardown);
}
