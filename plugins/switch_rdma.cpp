// switch/rdma: communication contexts for job steps, and the home of the
// node agent inside slurmd.
//
// Slurm-facing shim over switch_rdma/ (contexts, their table, the node
// agent's control socket) and lib/agent/ (the node agent).  Slurm loads
// switch plugins in four places, and each switch_p_* call runs in one:
//  - slurmctld (the configured SwitchType), under its job write lock:
//    build_jobinfo gives each step a Context (step_context.hpp) with the
//    lowest free id of the ContextTable, marked coscheduled when the job's
//    partition is among storm_cosched_partitions (slurmctld is the only
//    judge of that: see cosched/admissions.hpp), or refuses the step with one
//    "switch/rdma: step J.S: ..." line (ESLURM_INTERCONNECT_BUSY when every
//    id is in use, so srun retries; ESLURM_INTERCONNECT_FAILURE otherwise);
//    job_step_complete releases the step's id, job_complete any id its
//    job left.  libstate_save/restore keep the table in StateSaveLocation
//    across a restart; job_step_allocated re-marks the id of every step
//    slurmctld recovers from its job state, which is the authority (see
//    "Restart" below).
//  - srun, slurmd and slurmstepd unpack/pack the jobinfo: the Context's
//    encode() (a versioned string), or none.
//  - slurmstepd (the configured one), for each step with a context:
//    job_init (root, before the tasks start) opens the context on the node
//    agent (control::open on <SlurmdSpoolDir>/storm-pool.sock; a failure
//    fails the step), which admits a coscheduled one's job to the local
//    scheduler; job_attach (in each task) sets STORM_CTX and
//    STORM_POOL_SOCKET, and STORM_COSCHED_SOCKET in a coscheduled step (in
//    the others, on a node that coschedules, STORM_COSCHED_REFUSED with
//    why); postfini (root, after every process of the step is gone) closes
//    it (a failure is only logged).  Before that, job_init holds a step
//    that srun --bcast launched through launch/bcast (SLURM_STORM_BCAST in
//    its environment) until the node agent says the broadcasts ended on
//    this node (launch_bcast/gate.hpp), or fails it with their error;
//    job_attach keeps the variable out of the tasks' environment.
//  - slurmd, which loads EVERY switch_*.so in PluginDir after daemonizing
//    and calls its init().  Slurm has no node-init hook, so init() is where
//    the node agent (lib/agent) starts: only when the process is slurmd and
//    SwitchType=switch/rdma.  fini() stops it.
// Batch, extern and interactive steps get no jobinfo from Slurm; srun's
// steps outside an allocation (build_jobinfo in srun, without a step
// record) and steps without tasks get a jobinfo without a context, and
// slurmstepd then does nothing for them.
//
// Restart: switch_p_libstate_save writes the table (slurmctld calls it when
// it shuts down), switch_p_libstate_restore reads it back before the job
// state.  Its entries stay unconfirmed until a recovered step re-marks its
// id (job_step_allocated), which wins over a stale entry; at the first
// step creation after that, the unconfirmed entries whose job has ended are
// dropped, the others kept until their job ends.  A malformed state file
// is logged (file and line), kept as <file>.bad, and slurmctld starts from
// the re-marks alone: every step slurmctld knows re-marks its id before any
// new step is created, so no live step's id is handed out again.
#include "slurm_adapter/shim.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

#include <dlfcn.h>

#include "lib/agent/agent_config.hpp"
#include "lib/agent/node_agent.hpp"
#include "lib/common/cgroupfs.hpp"
#include "lib/common/files.hpp"
#include "lib/common/procs.hpp"
#include "slurm_adapter/sbcast_cred.hpp"
#include "slurm_adapter/slurm_nodes.hpp"
#include "cosched/protocol.h"
#include "launch_bcast/gate.hpp"
#include "sched_gang/freezer.hpp"
#include "sched_gang/step_guard.hpp"
#include "switch_rdma/context_table.hpp"
#include "switch_rdma/control.hpp"
#include "switch_rdma/step_context.hpp"

extern "C" {
#include "src/common/env.h"
#include "src/common/list.h"
#include "src/common/node_conf.h"
#include "src/common/pack.h"
#include "src/common/read_config.h"
#include "src/common/stepd_api.h"
#include "src/common/run_in_daemon.h"
#include "src/slurmctld/slurmctld.h"
#include "src/slurmd/common/proctrack.h"
#include "src/slurmd/slurmd/slurmd.h"
#include "src/slurmd/slurmstepd/slurmstepd_job.h"
}

STORM_PLUGIN_IDENTITY("Storm communication contexts (switch/rdma)", "switch/rdma")
extern "C" {
extern const uint32_t plugin_id = 150; // unique among switch plugins (>= 100)
}

namespace {

struct SwitchContext {
    storm::Logger log{"switch/rdma"};
    bool configured = false; // SwitchType names this plugin
    storm::agent::AgentConfig config;
    std::unique_ptr<storm::agent::NodeAgent> agent; // slurmd

    // slurmctld: the contexts in use.  Slurm calls under its job lock;
    // the mutex covers libstate_save at shutdown.
    std::mutex mu;
    storm::rdma::ContextTable table;
    bool sweep_pending = false;                 // drop stale restored entries at the next step
    std::map<std::string, in_addr_t> addresses; // NodeAddr -> IPv4

    // slurmstepd: the context job_init opened on the node agent.
    std::optional<storm::rdma::Context> opened;
    // slurmstepd: continues the step if the gang agent dies and stays away;
    // whether Slurm suspended the step (scontrol suspend: its SIGSTOP stays).
    std::unique_ptr<storm::gang::StepGuard> guard;
    std::atomic<bool> slurm_suspended{false};
    bool marked = false; // the step's mark for the agent (mark_suspended)
};

// A step's switch info: its context, or none.
struct JobInfo {
    static constexpr uint32_t magic_value = 0x53524458; // "SRDX"
    uint32_t magic = magic_value;
    std::optional<storm::rdma::Context> ctx;
};
// Packed form: u16 version, then the context's encode() or NULL (packstr).
constexpr uint16_t jobinfo_version = 1;

JobInfo *jobinfo_of(void *p)
{
    auto *j = static_cast<JobInfo *>(p);
    if (j && j->magic != JobInfo::magic_value)
        throw std::logic_error("switch info of another plugin");
    return j;
}

std::string step_name(uint32_t job, uint32_t step)
{
    return std::to_string(job) + "." + std::to_string(step);
}

SwitchContext *g_ctx = nullptr;

// This slurmd's node name.  slurmd exports its `conf` (and so does
// slurmstepd, the same slurmd_conf_t read from slurmd); looked up at run
// time because this plugin is also loaded by processes that have none.
std::string slurmd_node_name()
{
    auto **c = static_cast<slurmd_conf_t **>(dlsym(RTLD_DEFAULT, "conf"));
    if (!c || !*c || !(*c)->node_name)
        throw std::runtime_error("cannot find this slurmd's node name");
    return (*c)->node_name;
}

// slurmd's spool directory (SlurmdSpoolDir, with %n expanded), in slurmd
// and slurmstepd.
std::string slurmd_spool_dir()
{
    auto **c = static_cast<slurmd_conf_t **>(dlsym(RTLD_DEFAULT, "conf"));
    if (!c || !*c || !(*c)->spooldir)
        throw std::runtime_error("cannot find this slurmd's spool directory");
    return (*c)->spooldir;
}

// Where the gang switcher journals the jobs it switches, and records itself
// (step_guard.hpp), in slurmd and slurmstepd.
std::string gang_journal_dir() { return slurmd_spool_dir() + "/storm-gang"; }

// gang_journal_dir() where this node's agent switches jobs (it made the
// directory), else "".
std::string gang_dir_here()
{
    std::string dir = gang_journal_dir();
    struct stat st;
    return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? dir : "";
}

// The processes of the steps (not batch, extern or interactive) of `jobs`
// on this node, as each step's slurmstepd lists them (its proctrack
// container).  Runs on the gang switcher's scanner thread.
std::map<uint32_t, std::vector<pid_t>> list_step_processes(const std::string &spool, const std::string &node,
                                                           const std::set<uint32_t> &jobs)
{
    std::map<uint32_t, std::vector<pid_t>> out;
    List steps = stepd_available(spool.c_str(), node.c_str());
    if (!steps)
        throw std::runtime_error("cannot list the steps in " + spool);
    ListIterator it = list_iterator_create(steps);
    while (auto *loc = static_cast<step_loc_t *>(list_next(it))) {
        if (!jobs.count(loc->step_id.job_id) || loc->step_id.step_id > SLURM_MAX_NORMAL_STEP_ID)
            continue;
        uint16_t proto = 0;
        int fd = stepd_connect(loc->directory, loc->nodename, &loc->step_id, &proto);
        if (fd < 0)
            continue; // the step just ended
        uint32_t *pids = nullptr, count = 0;
        if (stepd_list_pids(fd, proto, &pids, &count) == SLURM_SUCCESS) {
            auto &v = out[loc->step_id.job_id];
            for (uint32_t i = 0; i < count; ++i)
                if (pids[i] > 1 && !storm::kernel_thread(static_cast<pid_t>(pids[i])))
                    v.push_back(static_cast<pid_t>(pids[i]));
        }
        xfree(pids);
        close(fd);
    }
    list_iterator_destroy(it);
    FREE_NULL_LIST(steps);
    return out;
}

// The agents' network as slurmd sees it: Slurm's node table with the agent
// port, this node's index, munge with SlurmUser's and SlurmdUser's uids.
std::optional<storm::agent::AgentNetwork> agent_network(const storm::agent::AgentConfig &config,
                                                        const storm::Logger &log)
{
    auto table = storm::shim::slurm_node_table();
    std::string me = slurmd_node_name();
    storm::agent::AgentNetwork net;
    net.self = UINT32_MAX;
    net.nodes = storm::shim::agent_addresses(table, config.port);
    for (size_t i = 0; i < table.size(); ++i) {
        net.names.push_back(table[i].name);
        if (table[i].name == me)
            net.self = static_cast<uint32_t>(i);
    }
    if (net.self == UINT32_MAX) {
        log.error("node %s is not in slurm.conf's node table: the primitives are off on this node",
                  me.c_str());
        return std::nullopt;
    }
    net.auth = storm::shim::daemon_authenticator();
    // Broadcasts: Slurm's sbcast credential (signed by SlurmUser, or root),
    // open ones journaled in slurmd's spool directory.
    net.authorizer = std::make_unique<storm::shim::SbcastAuthorizer>(
        storm::net::MungeAuth::socket_from_authinfo(slurm_conf.authinfo),
        std::vector<uid_t>{slurm_conf.slurm_user_id, 0}, table);
    std::string spool = slurmd_spool_dir();
    net.journal_dir = spool + "/storm-bcast";
    net.bcast_gate_socket = spool + "/" + storm::bcast::gate::socket_name;
    net.gang_journal_dir = gang_journal_dir();
    net.gang_freeze_group =
        storm::gang::freeze_group_name(me); // the virtual nodes of a host share its cgroups
    net.step_lister = [spool, me](const std::set<uint32_t> &jobs) {
        return list_step_processes(spool, me, jobs);
    };
    net.pool_socket = spool + "/" + storm::rdma::control::socket_name;
    net.pool_stats = spool + "/storm-pool.stats";
    net.pool_trusted = {0, slurm_conf.slurmd_user_id};
    net.cosched_socket = spool + "/" STORM_COSCHED_SOCKET_NAME;
    net.cosched_group = "storm-cosched-" + me; // the virtual nodes of a host share its cgroups
    return net;
}

// ---- slurmctld ------------------------------------------------------------

// The IPv4 address of a node as slurmctld's node table has it (NodeAddr,
// which the node agents use too), resolved once per address.  Caller holds
// g_ctx->mu and slurmctld's node read lock.
in_addr_t node_address(const std::string &name)
{
    node_record_t *node = find_node_record(const_cast<char *>(name.c_str()));
    std::string addr = node && node->comm_name ? node->comm_name : name;
    auto it = g_ctx->addresses.find(addr);
    if (it != g_ctx->addresses.end())
        return it->second;
    in_addr a{};
    if (inet_pton(AF_INET, addr.c_str(), &a) != 1)
        a = storm::shim::resolve_ipv4(name, addr).sin_addr;
    g_ctx->addresses[addr] = a.s_addr;
    return a.s_addr;
}

// Does Storm gang-schedule this partition (SchedulerType=sched/gang and
// OverSubscribe=FORCE:n, n >= 2)?  Is it coscheduled (storm_cosched_partitions;
// caller holds g_ctx->mu)?  step_create holds no partition lock: a
// partition record lives while jobs point at it (deleting one takes the job
// write lock we hold), and max_share and name are not changed in place.
storm::rdma::StepShape step_shape(const slurm_step_layout_t *layout, const step_record_t *step)
{
    const job_record_t *job = step->job_ptr;
    storm::rdma::StepShape s;
    s.job_id = job->job_id;
    s.step_id = step->step_id.step_id;
    s.uid = job->user_id;
    if (const part_record_t *part = job->part_ptr) {
        s.cosched = part->name && g_ctx->config.cosched.covers(part->name);
        bool force = part->max_share & SHARED_FORCE;
        uint32_t n = part->max_share & ~SHARED_FORCE;
        s.force_n = n; // FORCE:n or YES:n: up to n jobs share a node's pool
        s.gang = force && n >= 2 && slurm_conf.schedtype && !std::strcmp(slurm_conf.schedtype, "sched/gang");
    }
    s.ntasks = layout->task_cnt;
    s.node_names = storm::shim::expand_hostlist(layout->node_list);
    if (s.node_names.size() != layout->node_cnt)
        throw std::runtime_error("the step's layout lists " + std::to_string(layout->node_cnt) +
                                 " nodes but its node list " + std::string(layout->node_list) + " has " +
                                 std::to_string(s.node_names.size()));
    for (uint32_t i = 0; i < layout->node_cnt; ++i) {
        storm::rdma::ContextNode node;
        node.addr = node_address(s.node_names[i]);
        node.ranks.assign(layout->tids[i], layout->tids[i] + layout->tasks[i]);
        s.nodes.push_back(std::move(node));
    }
    return s;
}

// Drops the restored entries no recovered step re-marked whose job has
// ended (caller holds g_ctx->mu and slurmctld's job lock).
void sweep_restored()
{
    g_ctx->sweep_pending = false;
    auto dropped = g_ctx->table.sweep([](uint32_t job_id, uint32_t) {
        job_record_t *job = find_job_record(job_id);
        return !job || IS_JOB_FINISHED(job);
    });
    for (const auto &d : dropped)
        g_ctx->log.info("context %u of step %s, from the state file, is free: its job has ended", d.first,
                        step_name(d.second.job_id, d.second.step_id).c_str());
}

// Restores errno on scope exit: step_create reads errno after cleaning up a
// refused step, which calls job_step_complete and free_jobinfo.
struct KeepErrno {
    int saved = errno;
    ~KeepErrno() { errno = saved; }
};

// ---- slurmstepd ------------------------------------------------------------

std::string pool_socket() { return slurmd_spool_dir() + "/" + storm::rdma::control::socket_name; }

} // namespace

extern "C" int init(void)
{
    return storm::shim::init_context(g_ctx, "switch/rdma", [] {
        auto ctx = std::make_unique<SwitchContext>();
        const char *prog = slurm_prog_name ? slurm_prog_name : "unknown";
        ctx->configured = slurm_conf.switch_type && !std::strcmp(slurm_conf.switch_type, "switch/rdma");
        if (!ctx->configured) {
            // slurmd loads every switch plugin; another one is in charge.
            storm::shim::log_loaded(
                ctx->log, running_in_daemon(),
                "Storm %s loaded in %s (Slurm %s); not the configured SwitchType (%s), idle", STORM_VERSION,
                prog, STORM_SLURM_VERSION, slurm_conf.switch_type ? slurm_conf.switch_type : "none");
            return ctx;
        }
        ctx->config = storm::agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
        ctx->table.set_capacity(ctx->config.pool.context_max);
        storm::shim::log_loaded(ctx->log, running_in_daemon(), "Storm %s loaded in %s (Slurm %s)",
                                STORM_VERSION, prog, STORM_SLURM_VERSION);
        if (running_in_slurmd()) {
            ctx->agent = std::make_unique<storm::agent::NodeAgent>(ctx->config, ctx->log,
                                                                   agent_network(ctx->config, ctx->log));
            ctx->agent->start();
        }
        return ctx;
    });
}

// Stops the node agent, if any.
extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

extern "C" {

// New SwitchParameters: the context count (held ids above a lowered
// storm_ctx_max stay until their steps end), the pool's settings and, in
// slurmctld, the coscheduled partitions for new steps (a running node
// agent keeps its local scheduler's settings until slurmd restarts).
int switch_p_reconfig(void)
{
    if (!g_ctx->configured)
        return SLURM_SUCCESS;
    return storm::shim::guarded(g_ctx->log, "reconfig", [] {
        auto config = storm::agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
        std::lock_guard<std::mutex> lk(g_ctx->mu);
        g_ctx->config.pool = config.pool;
        g_ctx->config.cosched = config.cosched;
        g_ctx->table.set_capacity(config.pool.context_max);
        g_ctx->addresses.clear();
        return SLURM_SUCCESS;
    });
}

// ---- slurmctld: the table across restarts (see "Restart" above) ----------

int switch_p_libstate_save(char *dir_name)
{
    if (!g_ctx->configured || !running_in_slurmctld())
        return SLURM_SUCCESS;
    return storm::shim::guarded(g_ctx->log, "libstate_save", [&] {
        std::lock_guard<std::mutex> lk(g_ctx->mu);
        g_ctx->table.save(dir_name);
        g_ctx->log.verbose("saved %zu contexts in %s", g_ctx->table.size(),
                           storm::rdma::ContextTable::path_in(dir_name).c_str());
        return SLURM_SUCCESS;
    });
}

int switch_p_libstate_restore(char *dir_name, bool recover)
{
    if (!g_ctx->configured || !running_in_slurmctld())
        return SLURM_SUCCESS;
    return storm::shim::guarded(g_ctx->log, "libstate_restore", [&] {
        std::lock_guard<std::mutex> lk(g_ctx->mu);
        uint32_t capacity = g_ctx->config.pool.context_max;
        g_ctx->table = storm::rdma::ContextTable(capacity);
        if (!recover) // slurmctld -c: no job is recovered either
            return SLURM_SUCCESS;
        std::string path = storm::rdma::ContextTable::path_in(dir_name);
        try {
            g_ctx->table = storm::rdma::ContextTable::load(dir_name, capacity);
        } catch (const storm::rdma::StateError &e) {
            std::string bad = path + ".bad";
            bool kept = rename(path.c_str(), bad.c_str()) == 0;
            g_ctx->log.error("%s; starting from the steps slurmctld recovers (each re-marks its context)%s%s",
                             e.what(), kept ? ", the file is kept as " : "", kept ? bad.c_str() : "");
        }
        g_ctx->sweep_pending = g_ctx->table.has_unconfirmed();
        g_ctx->log.verbose("restored %zu contexts from %s", g_ctx->table.size(), path.c_str());
        return SLURM_SUCCESS;
    });
}

int switch_p_libstate_clear(void)
{
    std::lock_guard<std::mutex> lk(g_ctx->mu);
    g_ctx->table.clear();
    g_ctx->sweep_pending = false;
    return SLURM_SUCCESS;
}

// ---- the jobinfo: a step's Context, or none -------------------------------

int switch_p_alloc_jobinfo(switch_jobinfo_t **switch_job, uint32_t job_id, uint32_t step_id)
{
    return storm::shim::guarded(g_ctx->log, "alloc_jobinfo", [&] {
        *switch_job = reinterpret_cast<switch_jobinfo_t *>(new JobInfo);
        return SLURM_SUCCESS;
    });
}

// slurmctld, at step creation under the job write lock (srun calls it too,
// without a step record, for steps outside an allocation: no context).
int switch_p_build_jobinfo(switch_jobinfo_t *switch_job, slurm_step_layout_t *step_layout,
                           step_record_t *step_ptr)
{
    if (!g_ctx->configured || !step_ptr || !step_ptr->job_ptr || !running_in_slurmctld())
        return SLURM_SUCCESS;
    uint32_t job_id = step_ptr->job_ptr->job_id, step_id = step_ptr->step_id.step_id;
    std::string name = step_name(job_id, step_id);
    int refused = ESLURM_INTERCONNECT_FAILURE;
    int rc = storm::shim::guarded(g_ctx->log, "build_jobinfo", [&] {
        JobInfo *info = jobinfo_of(switch_job);
        if (!info)
            throw std::logic_error("no switch info allocated");
        if (!step_layout || !step_layout->task_cnt || !step_layout->tids || !step_layout->tasks) {
            g_ctx->log.verbose("step %s: no tasks in its layout, no communication context", name.c_str());
            return SLURM_SUCCESS;
        }
        std::lock_guard<std::mutex> lk(g_ctx->mu);
        if (g_ctx->sweep_pending)
            sweep_restored();
        try {
            auto ctx = storm::rdma::make_context(g_ctx->config.pool, step_shape(step_layout, step_ptr));
            auto id = g_ctx->table.allocate(job_id, step_id);
            if (!id)
                throw storm::rdma::contexts_exhausted(g_ctx->table.capacity());
            ctx.id = *id;
            try {
                ctx.validate();
            } catch (...) {
                g_ctx->table.release(*id, job_id, step_id);
                throw;
            }
            info->ctx = std::move(ctx);
        } catch (const storm::rdma::StepRefused &e) {
            if (e.busy())
                refused = ESLURM_INTERCONNECT_BUSY;
            g_ctx->log.error("step %s: %s", name.c_str(), e.what());
            return SLURM_ERROR;
        } catch (const std::exception &e) {
            g_ctx->log.error("step %s: no communication context: %s", name.c_str(), e.what());
            return SLURM_ERROR;
        }
        g_ctx->log.verbose("step %s: context %u (%s, n=%u, %u tasks on %u nodes%s)", name.c_str(),
                           info->ctx->id, storm::rdma::mode_name(info->ctx->mode), info->ctx->divisions,
                           info->ctx->ntasks, static_cast<unsigned>(info->ctx->nodes.size()),
                           info->ctx->cosched ? ", coscheduled" : "");
        return SLURM_SUCCESS;
    });
    if (rc != SLURM_SUCCESS)
        slurm_seterrno(refused);
    return rc;
}

int switch_p_duplicate_jobinfo(switch_jobinfo_t *source, switch_jobinfo_t **dest)
{
    return storm::shim::guarded(g_ctx->log, "duplicate_jobinfo", [&] {
        JobInfo *src = jobinfo_of(source);
        *dest = reinterpret_cast<switch_jobinfo_t *>(src ? new JobInfo(*src) : new JobInfo);
        return SLURM_SUCCESS;
    });
}

void switch_p_free_jobinfo(switch_jobinfo_t *switch_job)
{
    KeepErrno keep;
    delete static_cast<JobInfo *>(static_cast<void *>(switch_job));
}

int switch_p_pack_jobinfo(switch_jobinfo_t *switch_job, buf_t *buffer, uint16_t protocol_version)
{
    return storm::shim::guarded(g_ctx->log, "pack_jobinfo", [&] {
        JobInfo *info = jobinfo_of(switch_job);
        pack16(jobinfo_version, buffer);
        if (info && info->ctx) {
            std::string text = info->ctx->encode();
            packstr(text.data(), buffer); // packmem takes a non-const pointer
        } else {
            packnull(buffer);
        }
        return SLURM_SUCCESS;
    });
}

int switch_p_unpack_jobinfo(switch_jobinfo_t **switch_job, buf_t *buffer, uint16_t protocol_version)
{
    *switch_job = nullptr;
    return storm::shim::guarded(g_ctx->log, "unpack_jobinfo", [&] {
        uint16_t version = 0;
        if (unpack16(&version, buffer) != SLURM_SUCCESS)
            throw std::runtime_error("truncated switch info");
        if (version != jobinfo_version)
            throw std::runtime_error("switch info of version " + std::to_string(version) + " (this is " +
                                     std::to_string(jobinfo_version) + ")");
        char *text = nullptr;
        uint32_t len = 0;
        if (unpackstr_xmalloc_chooser(&text, &len, buffer) != SLURM_SUCCESS)
            throw std::runtime_error("truncated switch info");
        auto info = std::make_unique<JobInfo>();
        try {
            if (text)
                info->ctx = storm::rdma::Context::decode(text);
        } catch (...) {
            xfree(text);
            throw;
        }
        xfree(text);
        *switch_job = reinterpret_cast<switch_jobinfo_t *>(info.release());
        return SLURM_SUCCESS;
    });
}

// No keys: Slurm's generic code asks none of switch/rdma.
int switch_p_get_jobinfo(switch_jobinfo_t *switch_job, int key, void *resulting_data)
{
    slurm_seterrno(EINVAL);
    return SLURM_ERROR;
}

// ---- slurmstepd hooks around the tasks --------------------------------------

int switch_p_job_preinit(stepd_step_rec_t *job) { return SLURM_SUCCESS; }

namespace {

// srun --bcast through launch/bcast: the tasks wait until the program is in
// place on this node (every node confirmed every byte).  The step fails
// with the broadcast's error instead.
int hold_for_broadcasts(stepd_step_rec_t *job)
{
    const char *text = getenvp(job->env, storm::bcast::gate::env_name);
    if (!text)
        return SLURM_SUCCESS;
    std::string name = step_name(job->step_id.job_id, job->step_id.step_id);
    try {
        auto sids = storm::bcast::gate::parse(text);
        storm::bcast::gate::wait(slurmd_spool_dir() + "/" + storm::bcast::gate::socket_name,
                                 job->step_id.job_id, job->step_id.step_id, sids);
        g_ctx->log.verbose("step %s: broadcast %s in place, tasks start", name.c_str(), text);
        return SLURM_SUCCESS;
    } catch (const storm::net::UnixUnreachable &e) {
        g_ctx->log.error("step %s: no launch gate on this node, so no task waits for the broadcast of its "
                         "program: not started (%s)",
                         name.c_str(), e.what());
    } catch (const std::invalid_argument &e) {
        g_ctx->log.error("step %s: %s=\"%s\": %s: not started", name.c_str(), storm::bcast::gate::env_name,
                         text, e.what());
    } catch (const std::exception &e) {
        g_ctx->log.error("step %s: its program is not in place on this node: %s", name.c_str(), e.what());
    }
    return SLURM_ERROR;
}

// The step's processes that a dead gang agent left stopped, continued:
// its job's freezer group (freezer.hpp) thawed, and, unless
// Slurm suspended the step, each process stopped by a signal sent SIGCONT.
// How many processes were in a thawed group or continued.  On the guard's
// thread.
size_t continue_step(stepd_step_rec_t *job)
{
    if (!job->cont_id)
        return 0; // no container yet (proctrack/pgid would list the kernel's threads)
    pid_t *pids = nullptr;
    int n = 0;
    if (proctrack_g_get_pids(job->cont_id, &pids, &n) != SLURM_SUCCESS)
        return 0;
    std::string root = storm::cgroupfs::find_mount("/proc/self/mountinfo", "cgroup2", "");
    std::string group = "/" + storm::gang::freeze_group_name(slurmd_node_name()) + "/" +
                        storm::gang::job_group_name(job->step_id.job_id);
    std::set<std::string> thawed;
    size_t count = 0;
    for (int i = 0; i < n; ++i) {
        pid_t pid = pids[i];
        if (pid <= 1 || storm::kernel_thread(pid))
            continue;
        bool continued = false;
        std::string cg = root.empty() ? "" : storm::cgroupfs::cgroup_of("/proc", pid, "");
        if (cg.size() >= group.size() && cg.compare(cg.size() - group.size(), group.size(), group) == 0) {
            std::string freeze = root + cg + "/cgroup.freeze";
            if (!thawed.count(cg) && storm::read_file(freeze).value_or("").rfind("1", 0) == 0 &&
                storm::cgroupfs::write_text(freeze, "0"))
                thawed.insert(cg);
            continued = thawed.count(cg) > 0;
        }
        char buf[512];
        const char *f = storm::stat_fields("/proc/" + std::to_string(pid) + "/stat", buf);
        if (f && f[0] == 'T' && !g_ctx->slurm_suspended && kill(pid, SIGCONT) == 0)
            continued = true;
        count += continued;
    }
    xfree(pids);
    return count;
}

// Where this node's agent switches gang-scheduled jobs: the step's guard
// (step_guard.hpp) watches it.
void guard_step(stepd_step_rec_t *job)
{
    if (job->batch || job->step_id.step_id == SLURM_EXTERN_CONT ||
        job->step_id.step_id == SLURM_BATCH_SCRIPT || job->step_id.step_id == SLURM_INTERACTIVE_STEP)
        return; // the agent switches the other steps only
    std::string dir = gang_dir_here();
    if (dir.empty())
        return; // no gang scheduling on this node
    g_ctx->guard = std::make_unique<storm::gang::StepGuard>(
        storm::gang::StepGuardConfig{dir, job->step_id.job_id,
                                     step_name(job->step_id.job_id, job->step_id.step_id)},
        [job] { return continue_step(job); }, g_ctx->log);
}

// Marks (or unmarks) the step as suspended by Slurm for the node agent's
// fail-safes (step_guard.hpp), where the agent switches jobs.  A failure
// is logged: the agent then treats the step as any other.
void mark_suspended(stepd_step_rec_t *job, bool on)
{
    if (on == g_ctx->marked)
        return;
    std::string dir = gang_dir_here();
    if (dir.empty())
        return; // no gang scheduling on this node
    g_ctx->marked = on;
    if (!storm::gang::mark_suspended(dir, job->step_id.job_id, job->step_id.step_id, on))
        g_ctx->log.error("gang: step %s: cannot mark it suspended by Slurm in %s: %s: a node agent started "
                         "meanwhile may continue it",
                         step_name(job->step_id.job_id, job->step_id.step_id).c_str(), dir.c_str(),
                         std::strerror(errno));
}

} // namespace

// Root, before the tasks start: opens the step's context on the node
// agent, then holds the step until srun --bcast's broadcasts ended here.
// In that order, so that the opening overlaps the transfer instead of
// following it; if the hold fails, job_postfini (which slurmstepd calls
// after a failed job_init too) closes the context.
int switch_p_job_init(stepd_step_rec_t *job)
{
    JobInfo *info = nullptr;
    int rc = storm::shim::guarded(g_ctx->log, "job_init", [&] {
        info = jobinfo_of(job->switch_job ? job->switch_job->data : nullptr);
        return SLURM_SUCCESS;
    });
    if (rc != SLURM_SUCCESS)
        return rc;
    storm::shim::guarded(g_ctx->log, "job_init: the step's gang fail-safe", [&] {
        guard_step(job);
        return SLURM_SUCCESS;
    });
    if (!info || !info->ctx)
        return hold_for_broadcasts(job);
    const auto &ctx = *info->ctx;
    std::string name = step_name(ctx.job_id, ctx.step_id);
    try {
        storm::rdma::control::request(pool_socket(), storm::rdma::control::open(ctx));
    } catch (const storm::rdma::control::AgentUnreachable &e) {
        g_ctx->log.error("step %s: node agent: not running on this node (%s)", name.c_str(), e.what());
        return SLURM_ERROR;
    } catch (const std::exception &e) {
        g_ctx->log.error("step %s: node agent: %s", name.c_str(), e.what());
        return SLURM_ERROR;
    }
    g_ctx->opened = ctx;
    g_ctx->log.verbose("step %s: context %u open on the node agent", name.c_str(), ctx.id);
    return hold_for_broadcasts(job);
}

// In each task, as its user, before exec: the context and the agent's
// socket in the task's environment.
int switch_p_job_attach(switch_jobinfo_t *jobinfo, char ***env, uint32_t nodeid, uint32_t procid,
                        uint32_t nnodes, uint32_t nprocs, uint32_t rank)
{
    return storm::shim::guarded(g_ctx->log, "job_attach", [&] {
        JobInfo *info = jobinfo_of(jobinfo);
        // Whatever the task's user passed on: only slurmstepd says.  The
        // launch gate's variable was for this slurmstepd alone: an srun in
        // a task must not inherit it.
        unsetenvp(*env, storm::bcast::gate::env_name);
        unsetenvp(*env, STORM_COSCHED_SOCKET_ENV);
        unsetenvp(*env, STORM_COSCHED_REFUSED_ENV);
        if (!info || !info->ctx)
            return SLURM_SUCCESS;
        const auto &ctx = *info->ctx;
        // Implicit coscheduling: where the local scheduler listens, for the
        // PMPI library (spank/storm's --storm-cosched) or libstormmsg, in
        // the steps slurmctld marked coscheduled only (the agent admits
        // their jobs, whose contexts job_init opened).  The others' tasks
        // do not try, and learn why.
        if (ctx.cosched) {
            std::string cosched = slurmd_spool_dir() + "/" STORM_COSCHED_SOCKET_NAME;
            if (!env_array_overwrite(env, STORM_COSCHED_SOCKET_ENV, cosched.c_str()))
                throw std::runtime_error("cannot set " STORM_COSCHED_SOCKET_ENV " in the task's environment");
        } else if (g_ctx->config.cosched.enabled()) {
            // The partition's name is the task's environment's: for the
            // message only.
            const char *part = getenvp(*env, "SLURM_JOB_PARTITION");
            std::string why =
                part && !g_ctx->config.cosched.covers(part)
                    ? "job " + std::to_string(ctx.job_id) + "'s partition \"" + part + "\" is not coscheduled"
                    : "slurmctld did not mark step " + step_name(ctx.job_id, ctx.step_id) +
                          " coscheduled (its storm_cosched_partitions do not list the job's partition)";
            if (!env_array_overwrite(env, STORM_COSCHED_REFUSED_ENV, why.c_str()))
                throw std::runtime_error("cannot set " STORM_COSCHED_REFUSED_ENV
                                         " in the task's environment");
        }
        std::string text = ctx.encode(), socket = pool_socket();
        if (!env_array_overwrite(env, storm::rdma::context_env, text.c_str()) ||
            !env_array_overwrite(env, storm::rdma::control::socket_env, socket.c_str()))
            throw std::runtime_error("cannot set STORM_CTX and STORM_POOL_SOCKET in the task's environment");
        return SLURM_SUCCESS;
    });
}

// Root, after the tasks (some of their processes may remain): nothing; the
// context is closed in postfini, once every process is gone.
int switch_p_job_fini(switch_jobinfo_t *jobinfo) { return SLURM_SUCCESS; }

// Root, after every process of the step is killed (also when job_init
// failed): closes the context job_init opened.  A failure is only logged.
int switch_p_job_postfini(stepd_step_rec_t *job)
{
    g_ctx->guard.reset(); // every process is gone: nothing left to continue
    mark_suspended(job, false);
    if (!g_ctx->opened)
        return SLURM_SUCCESS;
    storm::rdma::Context ctx = std::move(*g_ctx->opened);
    g_ctx->opened.reset();
    std::string name = step_name(ctx.job_id, ctx.step_id);
    try {
        storm::rdma::control::request(pool_socket(),
                                      storm::rdma::control::close(ctx.id, ctx.job_id, ctx.step_id));
        g_ctx->log.verbose("step %s: context %u closed", name.c_str(), ctx.id);
    } catch (const std::exception &e) {
        g_ctx->log.error("step %s: node agent: closing context %u: %s", name.c_str(), ctx.id, e.what());
    }
    return SLURM_SUCCESS;
}

// scontrol suspend/resume hooks (not used for gang scheduling: see README).
int switch_p_job_suspend_test(switch_jobinfo_t *jobinfo) { return SLURM_SUCCESS; }
void switch_p_job_suspend_info_get(switch_jobinfo_t *jobinfo, void *suspend_info) {}
void switch_p_job_suspend_info_pack(void *suspend_info, buf_t *buffer, uint16_t protocol_version) {}
int switch_p_job_suspend_info_unpack(void **suspend_info, buf_t *buffer, uint16_t protocol_version)
{
    return SLURM_SUCCESS;
}
void switch_p_job_suspend_info_free(void *suspend_info) {}
int switch_p_job_suspend(void *suspend_info, int max_wait) { return SLURM_SUCCESS; }
int switch_p_job_resume(void *suspend_info, int max_wait) { return SLURM_SUCCESS; }
// slurmstepd: the gang fail-safes leave a step Slurm suspended stopped: the
// step's own (the flag) and the node agent's (the step's mark,
// step_guard.hpp), until Slurm resumes it.
int switch_p_job_step_pre_suspend(stepd_step_rec_t *job)
{
    g_ctx->slurm_suspended = true;
    mark_suspended(job, true);
    return SLURM_SUCCESS;
}
int switch_p_job_step_post_suspend(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_step_pre_resume(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_step_post_resume(stepd_step_rec_t *job)
{
    mark_suspended(job, false);
    g_ctx->slurm_suspended = false;
    return SLURM_SUCCESS;
}

// ---- slurmctld step bookkeeping (job write lock held) ----------------------

// The step ended (or its record is freed, also after a refused build):
// its id is free again.
int switch_p_job_step_complete(switch_jobinfo_t *jobinfo, char *nodelist)
{
    KeepErrno keep;
    if (!running_in_slurmctld())
        return SLURM_SUCCESS;
    return storm::shim::guarded(g_ctx->log, "job_step_complete", [&] {
        JobInfo *info = jobinfo_of(jobinfo);
        if (!info || !info->ctx)
            return SLURM_SUCCESS;
        const auto &c = *info->ctx;
        std::lock_guard<std::mutex> lk(g_ctx->mu);
        if (g_ctx->table.release(c.id, c.job_id, c.step_id))
            g_ctx->log.verbose("step %s: context %u released", step_name(c.job_id, c.step_id).c_str(), c.id);
        return SLURM_SUCCESS;
    });
}

// A step recovered from slurmctld's job state: its id is held again.
int switch_p_job_step_allocated(switch_jobinfo_t *jobinfo, char *nodelist)
{
    if (!running_in_slurmctld())
        return SLURM_SUCCESS;
    return storm::shim::guarded(g_ctx->log, "job_step_allocated", [&] {
        JobInfo *info = jobinfo_of(jobinfo);
        if (!info || !info->ctx)
            return SLURM_SUCCESS;
        const auto &c = *info->ctx;
        std::string name = step_name(c.job_id, c.step_id);
        std::lock_guard<std::mutex> lk(g_ctx->mu);
        auto before = g_ctx->table.holder(c.id);
        using Mark = storm::rdma::ContextTable::Mark;
        switch (g_ctx->table.mark(c.id, c.job_id, c.step_id)) {
        case Mark::added:
        case Mark::confirmed:
            g_ctx->log.verbose("step %s: context %u recovered", name.c_str(), c.id);
            break;
        case Mark::replaced:
            g_ctx->log.info("step %s: context %u recovered; the state file gave it to step %s", name.c_str(),
                            c.id, step_name(before->job_id, before->step_id).c_str());
            break;
        case Mark::conflict:
            g_ctx->log.error(
                "step %s: context %u is also held by step %s (slurmctld's job state lists both): "
                "it is free again once step %s ends",
                name.c_str(), c.id, step_name(before->job_id, before->step_id).c_str(),
                step_name(before->job_id, before->step_id).c_str());
            break;
        }
        return SLURM_SUCCESS;
    });
}

// The job ended: any id its steps still hold is free.
void switch_p_job_complete(uint32_t job_id)
{
    if (!g_ctx->configured || !running_in_slurmctld())
        return;
    storm::shim::guarded(g_ctx->log, "job_complete", [&] {
        std::lock_guard<std::mutex> lk(g_ctx->mu);
        for (uint32_t id : g_ctx->table.release_job(job_id))
            g_ctx->log.verbose("job %u ended: context %u released", job_id, id);
        return SLURM_SUCCESS;
    });
}

} // extern "C"
