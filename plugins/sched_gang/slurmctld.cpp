// sched/gang in slurmctld: Storm's machine manager and its poller.
//
// When a partition has OverSubscribe=FORCE:N (N >= 2), init() starts the
// machine manager (sched_gang/manager.hpp) and a poller thread that reads
// slurmctld's job list every 50 ms under a read lock and hands the manager
// the running and suspended jobs of those partitions with the cores Slurm
// gave them.  Slurm places the jobs (cons_tres shares each core among up
// to N jobs); Storm decides which of them run when.
//
// Locking: slurmctld calls init() and sched_p_reconfig() with its
// configuration write lock held, so they read the partition list without
// locking; fini() runs without locks and joins the poller.
#include "plugins/sched_gang/parts.hpp"

#include "agent/agent_config.hpp"
#include "lib/common/thread_name.hpp"
#include "lib/net/munge_auth.hpp"
#include "slurm_adapter/ctld_lock.hpp"
#include "slurm_adapter/slurm_nodes.hpp"
#include "slurm_api.hpp"

extern "C" {
#include "src/common/job_resources.h"
#include "src/common/read_config.h"
#include "src/slurmctld/locks.h"
#include "src/slurmctld/slurmctld.h"
}

namespace storm::plugins::sched_gang {

namespace {

using storm::shim::ctld_lock;

storm::gang::Timing timing(const storm::gang::GangConfig &c) { return {c.quantum, c.failsafe, c.mpl}; }

// Whether `host` (the index among the job's nodes) has core `core` of
// socket `socket` in the job's allocation.
bool has_core(job_resources_t *jr, uint32_t host, uint16_t socket, uint16_t core)
{
    int off = get_job_resources_offset(jr, host, socket, core);
    return off >= 0 && jr->core_bitmap && bit_test(jr->core_bitmap, off);
}

// The cells of a job: (Storm's node index << 20 | core) for each core
// Slurm allocated it, or (node << 20) for each node with `whole_nodes`;
// its nodes as a set of Storm's indices.
bool job_shape(job_record_t *job, const std::map<std::string, uint32_t> &index, bool whole_nodes,
               storm::gang::JobShape &shape)
{
    job_resources_t *jr = job->job_resrcs;
    if (!jr || !jr->node_bitmap || !jr->sock_core_rep_count)
        return false;
    shape.job_id = job->job_id;
    std::vector<uint32_t> nodes;
    uint32_t host = 0, k = 0, covered = jr->sock_core_rep_count[0];
    for (int n = bit_ffs(jr->node_bitmap); n >= 0 && n < node_record_count; ++n) {
        if (!bit_test(jr->node_bitmap, n))
            continue;
        while (host >= covered && k + 1 < jr->nhosts)
            covered += jr->sock_core_rep_count[++k];
        node_record_t *node = node_record_table_ptr[n];
        auto idx = node && node->name ? index.find(node->name) : index.end();
        if (idx != index.end()) {
            nodes.push_back(idx->second);
            if (whole_nodes) {
                shape.cells.push_back(uint64_t(idx->second) << 20);
                ++host;
                continue;
            }
            uint16_t sockets = jr->sockets_per_node[k], cps = jr->cores_per_socket[k];
            for (uint16_t so = 0; so < sockets; ++so)
                for (uint16_t co = 0; co < cps; ++co)
                    if (has_core(jr, host, so, co))
                        shape.cells.push_back(uint64_t(idx->second) << 20 | uint64_t(so * cps + co));
        }
        ++host;
    }
    shape.nodes = storm::net::RangeSet::of(nodes);
    return !nodes.empty();
}

} // namespace

GangMachine::GangMachine(const Logger &log) : log(log), gang_log(log.child("gang")) {}

GangMachine::~GangMachine()
{
    {
        std::lock_guard<std::mutex> lk(mu);
        quit = true;
    }
    cv.notify_all();
    if (poller.joinable())
        poller.join();
    manager.reset();
}

void GangMachine::start_manager(const storm::gang::GangConfig &c)
{
    auto agent = storm::agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
    storm::gang::ManagerConfig mc;
    auto table = storm::shim::slurm_node_table();
    mc.nodes = storm::shim::agent_addresses(table, agent.port);
    for (size_t i = 0; i < table.size(); ++i) {
        mc.names.push_back(table[i].name);
        index[table[i].name] = static_cast<uint32_t>(i);
    }
    mc.fanout = agent.fanout;
    whole_nodes = !agent.pool.force_divided;
    mc.rt_priority = agent.rt_priority;
    mc.mcast = agent.mcast;
    mc.timing = timing(c);
    if (slurm_conf.state_save_location)
        mc.status_path = std::string(slurm_conf.state_save_location) + "/storm-gang.status";
    manager = std::make_unique<storm::gang::MachineManager>(std::move(mc),
                                                            storm::shim::daemon_authenticator(), log);
    manager->start();
    poller = std::thread([this] {
        storm::name_thread("storm-poll");
        poll();
    });
}

// The running and suspended jobs of the gang partitions, read under
// slurmctld's job, node and partition read locks.
storm::gang::Snapshot GangMachine::snapshot()
{
    std::vector<std::string> parts;
    {
        std::lock_guard<std::mutex> lk(mu);
        parts = gang_parts;
    }
    storm::gang::Snapshot s;
    slurmctld_lock_t lock = ctld_lock(READ_LOCK, READ_LOCK, READ_LOCK);
    lock_slurmctld(lock);
    storm::slurm_api::slurm_list_itr it = list_iterator_create(job_list);
    while (auto *job = static_cast<job_record_t *>(list_next(it))) {
        if (!job->part_ptr || !job->part_ptr->name ||
            std::find(parts.begin(), parts.end(), job->part_ptr->name) == parts.end())
            continue;
        if (IS_JOB_SUSPENDED(job)) {
            s.suspended.push_back(job->job_id);
            continue;
        }
        storm::gang::JobShape shape;
        if (IS_JOB_RUNNING(job) && !IS_JOB_COMPLETING(job) && job_shape(job, index, whole_nodes, shape))
            s.running.push_back(std::move(shape));
    }
    list_iterator_destroy(it);
    unlock_slurmctld(lock);
    return s;
}

// Each running job's end time moves on by the time it spent stopped in
// other slots (MachineManager::take_stopped), in whole seconds, as Slurm
// moves a suspended job's: its time limit counts the time it ran.  Under
// slurmctld's job write lock.
void GangMachine::extend_end_times()
{
    auto stopped = manager->take_stopped();
    if (stopped.empty())
        return;
    slurmctld_lock_t lock = ctld_lock(WRITE_LOCK, NO_LOCK, NO_LOCK);
    lock_slurmctld(lock);
    bool moved = false;
    for (auto &[id, t] : stopped) {
        job_record_t *job = find_job_record(id);
        if (!job || !IS_JOB_RUNNING(job) || job->time_limit == INFINITE || job->time_limit == NO_VAL) {
            carry.erase(id);
            continue;
        }
        auto &c = carry[id];
        c += t;
        auto secs = std::chrono::duration_cast<std::chrono::seconds>(c);
        if (secs.count() > 0) {
            job->end_time += static_cast<time_t>(secs.count());
            c -= secs;
            moved = true;
        }
    }
    if (moved)
        last_job_update = time(nullptr); // squeue and scontrol see the new end times
    unlock_slurmctld(lock);
    // Jobs not stopped in the last second (ended ones among them) drop
    // what they carry, under a second each: the map holds no ended job.
    for (auto it = carry.begin(); it != carry.end();)
        it = stopped.count(it->first) ? std::next(it) : carry.erase(it);
}

void GangMachine::poll() noexcept
{
    std::unique_lock<std::mutex> lk(mu);
    unsigned round = 0;
    while (!quit) {
        lk.unlock();
        try {
            manager->submit(snapshot());
            if (++round % 20 == 0) // once a second
                extend_end_times();
        } catch (const std::exception &e) {
            gang_log.error("reading the job list: %s", e.what());
        }
        lk.lock();
        cv.wait_for(lk, std::chrono::milliseconds(50), [this] { return quit; });
    }
}

void GangMachine::init(const storm::gang::GangConfig &c)
{
    gang_parts = c.partitions;
    if (running_in_slurmctld() && !c.partitions.empty())
        start_manager(c);
    else if (running_in_slurmctld())
        gang_log.info("no partition has OverSubscribe=FORCE:N with N >= 2: nothing to gang-schedule");
}

void GangMachine::reconfigure(const storm::gang::GangConfig &c)
{
    {
        std::lock_guard<std::mutex> lk(mu);
        gang_parts = c.partitions;
    }
    if (manager)
        manager->set_timing(timing(c));
    else if (!c.partitions.empty() && running_in_slurmctld())
        start_manager(c);
}

} // namespace storm::plugins::sched_gang
