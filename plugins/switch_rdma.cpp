// switch/rdma: communication contexts for job steps, and the home of the
// node agent inside slurmd.
//
// Slurm-facing shim.  Slurm loads switch plugins in four places:
//  - slurmctld and srun (the configured SwitchType): job step switch info;
//  - slurmstepd (the configured one): step set-up hooks around the tasks;
//  - slurmd, which loads EVERY switch_*.so in PluginDir after daemonizing
//    and calls its init().  Slurm has no node-init hook, so init() is where
//    the node agent (lib/agent) starts: only when the process is slurmd and
//    SwitchType=switch/rdma.  fini() stops it.
// The per-step context (switch_rdma/) is not carried yet: the jobinfo is
// empty, as with switch/none.
#include "plugins/common/shim.hpp"

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <unistd.h>

#include <dlfcn.h>

#include "lib/agent/node_agent.hpp"
#include "plugins/common/sbcast_cred.hpp"
#include "plugins/common/slurm_nodes.hpp"

extern "C" {
#include "src/common/list.h"
#include "src/common/read_config.h"
#include "src/common/stepd_api.h"
#include "src/common/run_in_daemon.h"
#include "src/slurmctld/slurmctld.h"
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
    std::unique_ptr<storm::agent::NodeAgent> agent;
};

SwitchContext *g_ctx = nullptr;

// This slurmd's node name.  slurmd exports its `conf`; looked up at run time
// because this plugin is also loaded by processes that have none.
std::string slurmd_node_name()
{
    auto **c = static_cast<slurmd_conf_t **>(dlsym(RTLD_DEFAULT, "conf"));
    if (!c || !*c || !(*c)->node_name)
        throw std::runtime_error("cannot find this slurmd's node name");
    return (*c)->node_name;
}

// slurmd's spool directory (SlurmdSpoolDir, with %n expanded).
std::string slurmd_spool_dir()
{
    auto **c = static_cast<slurmd_conf_t **>(dlsym(RTLD_DEFAULT, "conf"));
    if (!c || !*c || !(*c)->spooldir)
        throw std::runtime_error("cannot find this slurmd's spool directory");
    return (*c)->spooldir;
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
    net.gang_journal_dir = spool + "/storm-gang";
    net.step_lister = [spool, me](const std::set<uint32_t> &jobs) {
        return list_step_processes(spool, me, jobs);
    };
    net.pool_socket = spool + "/" + storm::rdma::control::socket_name;
    net.pool_stats = spool + "/storm-pool.stats";
    net.pool_trusted = {0, slurm_conf.slurmd_user_id};
    return net;
}

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
        auto config = storm::agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
        storm::shim::log_loaded(ctx->log, running_in_daemon(), "Storm %s loaded in %s (Slurm %s)",
                                STORM_VERSION, prog, STORM_SLURM_VERSION);
        if (running_in_slurmd()) {
            ctx->agent =
                std::make_unique<storm::agent::NodeAgent>(config, ctx->log, agent_network(config, ctx->log));
            ctx->agent->start();
        }
        return ctx;
    });
}

// Stops the node agent, if any.
extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

extern "C" {

int switch_p_reconfig(void) { return SLURM_SUCCESS; }

// State of the switch plugin in slurmctld (contexts will be saved here).
int switch_p_libstate_save(char *dir_name) { return SLURM_SUCCESS; }
int switch_p_libstate_restore(char *dir_name, bool recover) { return SLURM_SUCCESS; }
int switch_p_libstate_clear(void) { return SLURM_SUCCESS; }

// Job step switch info: empty for now (a NULL jobinfo, as switch/none).
int switch_p_alloc_jobinfo(switch_jobinfo_t **switch_job, uint32_t job_id, uint32_t step_id)
{
    *switch_job = nullptr;
    return SLURM_SUCCESS;
}
int switch_p_build_jobinfo(switch_jobinfo_t *switch_job, slurm_step_layout_t *step_layout,
                           step_record_t *step_ptr)
{
    return SLURM_SUCCESS;
}
int switch_p_duplicate_jobinfo(switch_jobinfo_t *source, switch_jobinfo_t **dest)
{
    *dest = nullptr;
    return SLURM_SUCCESS;
}
void switch_p_free_jobinfo(switch_jobinfo_t *switch_job) {}
int switch_p_pack_jobinfo(switch_jobinfo_t *switch_job, buf_t *buffer, uint16_t protocol_version)
{
    return SLURM_SUCCESS;
}
int switch_p_unpack_jobinfo(switch_jobinfo_t **switch_job, buf_t *buffer, uint16_t protocol_version)
{
    *switch_job = nullptr;
    return SLURM_SUCCESS;
}
int switch_p_get_jobinfo(switch_jobinfo_t *switch_job, int key, void *resulting_data)
{
    slurm_seterrno(EINVAL);
    return SLURM_ERROR;
}

// slurmstepd hooks around the tasks.
int switch_p_job_preinit(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_init(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_attach(switch_jobinfo_t *jobinfo, char ***env, uint32_t nodeid, uint32_t procid,
                        uint32_t nnodes, uint32_t nprocs, uint32_t rank)
{
    return SLURM_SUCCESS;
}
int switch_p_job_fini(switch_jobinfo_t *jobinfo) { return SLURM_SUCCESS; }
int switch_p_job_postfini(stepd_step_rec_t *job) { return SLURM_SUCCESS; }

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
int switch_p_job_step_pre_suspend(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_step_post_suspend(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_step_pre_resume(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_step_post_resume(stepd_step_rec_t *job) { return SLURM_SUCCESS; }

// slurmctld step bookkeeping.
int switch_p_job_step_complete(switch_jobinfo_t *jobinfo, char *nodelist) { return SLURM_SUCCESS; }
int switch_p_job_step_allocated(switch_jobinfo_t *jobinfo, char *nodelist) { return SLURM_SUCCESS; }
void switch_p_job_complete(uint32_t job_id) {}

} // extern "C"
