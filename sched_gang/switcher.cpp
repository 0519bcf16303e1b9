#include "sched_gang/switcher.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/common/files.hpp"
#include "lib/common/params.hpp"
#include "lib/common/percentile.hpp"
#include "lib/common/realtime.hpp"
#include "lib/common/stop_thread.hpp"
#include "lib/common/thread_name.hpp"
#include "lib/common/timeval.hpp"
#include "sched_gang/step_guard.hpp"

namespace storm::gang {

namespace {

constexpr size_t kDelays = 4096;

int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

int pidfd_signal(int fd, int sig)
{
    return static_cast<int>(syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0));
}

std::string ms_text(uint64_t ms) { return format_duration_us(ms * 1000); }

// "; left stopped for Slurm to resume (scontrol suspend): jobs J K", or "".
std::string held_text(const std::set<uint32_t> &jobs)
{
    if (jobs.empty())
        return "";
    std::string s = "; left stopped for Slurm to resume (scontrol suspend): job";
    s += jobs.size() > 1 ? "s" : "";
    for (uint32_t id : jobs)
        s += " " + std::to_string(id);
    return s;
}

} // namespace

Switcher::Switcher(event_base *base, prim::Engine &engine, StepLister lister, SwitcherConfig config,
                   Logger log)
    : base_(base), engine_(engine), lister_(std::move(lister)), cfg_(std::move(config)),
      log_(log.child("gang"))
{
    // Whatever throws leaves no event or descriptor behind: the journal's
    // folder first, free_events() on the failures after.
    if (!cfg_.journal_dir.empty() && mkdir(cfg_.journal_dir.c_str(), 0700) < 0 && errno != EEXIST)
        throw std::system_error(errno, std::generic_category(), "gang switcher: mkdir " + cfg_.journal_dir);
    tick_ = event_new(base_, -1, EV_PERSIST, on_tick, this);
    timeval tv{1, 0};
    if (!tick_ || event_add(tick_, &tv) < 0) {
        free_events();
        throw std::runtime_error("gang switcher: cannot register its timer");
    }
    failsafe_ev_ = evtimer_new(base_, on_failsafe_ev, this);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ >= 0)
        wake_ev_ = event_new(base_, wake_fd_, EV_READ | EV_PERSIST, on_wake, this);
    if (!failsafe_ev_ || !wake_ev_ || event_add(wake_ev_, nullptr) < 0) {
        free_events();
        throw std::runtime_error("gang switcher: cannot register its fail-safe timer and scanner wake-up");
    }
    if (cfg_.freeze && !cfg_.signals_only) {
        try {
            freezer_ = std::make_unique<Freezer>(*cfg_.freeze, log); // names itself
            log_.info("jobs are stopped with the cgroup v2 freezer (groups under %s)",
                      freezer_->base().c_str());
        } catch (const std::exception &e) {
            log_.warning("jobs are stopped with signals: the cgroup v2 freezer cannot be used: %s", e.what());
        }
    } else if (cfg_.freeze) {
        log_.info("jobs are stopped with signals (storm_gang_stop=signal)");
        try {
            Freezer sweep(*cfg_.freeze, log); // thaws what an agent set to freeze left
        } catch (const std::exception &) {
            // no usable hierarchy: nothing can have been frozen in it
        }
    }
    if (cfg_.mcast.enabled()) {
        try {
            strobe_sock_ = std::make_unique<net::GroupSocket>(
                base_, cfg_.mcast.group, strobe_port(cfg_.mcast), cfg_.mcast.iface, false,
                [this](std::string_view d) { on_datagram(d); });
        } catch (const std::exception &e) {
            log_.warning("this node gets only the strobes that come down the tree (about every 100 ms "
                         "while the manager multicasts them): %s",
                         e.what());
        }
    }
    try {
        thread_ = std::thread([this] {
            name_thread("storm-scan");
            scanner();
        });
    } catch (...) {
        free_events();
        throw;
    }
}

void Switcher::on_datagram(std::string_view d)
{
    try {
        uint64_t epoch = strobe_datagram_epoch(d);
        if (epoch != epoch_ || !key_)
            return; // another table's (this node is behind or ahead): its own strobes will come
        Strobe s = open_strobe(d, *key_);
        if (s.seq <= last_seq_)
            return; // applied already (the tree was first), or a replay
        engine_.set_variable("gang:mcast_strobes", static_cast<int64_t>(++mc_applied_));
        on_strobe(s);
    } catch (const std::exception &e) {
        engine_.set_variable("gang:mcast_rejected", static_cast<int64_t>(++mc_rejected_));
        if (!mc_reject_logged_)
            log_.error("dropped a strobe datagram: %s (logged once per table)", e.what());
        mc_reject_logged_ = true;
    }
}

Switcher::~Switcher()
{
    stop_thread(mu_, quit_, cv_, thread_);
    continue_all("the node agent stops");
    for (auto &[id, j] : jobs_)
        for (auto &p : j.procs)
            close(p.fd);
    for (auto &[id, procs] : found_)
        for (auto &p : procs)
            close(p.fd);
    freezer_.reset(); // thaws and gives back every group's processes
    free_events();
    remove_journal();
}

void Switcher::free_events() noexcept
{
    for (event **ev : {&tick_, &failsafe_ev_, &wake_ev_})
        if (*ev) {
            event_free(*ev);
            *ev = nullptr;
        }
    if (wake_fd_ >= 0)
        close(wake_fd_);
    wake_fd_ = -1;
}

bool Switcher::stopped(uint32_t job) const
{
    auto it = jobs_.find(job);
    return it != jobs_.end() && it->second.stopped;
}

size_t Switcher::processes(uint32_t job) const
{
    auto it = jobs_.find(job);
    return it == jobs_.end() ? 0 : it->second.procs.size() + (freezer_ ? freezer_->held(job) : 0);
}

void Switcher::recover()
{
    if (cfg_.journal_dir.empty())
        return;
    auto journal = read_file(cfg_.journal_dir + "/" + kJournal);
    if (!journal)
        return;
    std::set<uint32_t> jobs = journal_jobs(*journal), slurms, held = suspended_by_slurm(cfg_.journal_dir);
    for (auto it = jobs.begin(); it != jobs.end();)
        if (held.count(*it)) { // Slurm's SIGSTOP holds: Slurm resumes it
            slurms.insert(*it);
            it = jobs.erase(it);
        } else {
            ++it;
        }
    size_t n = 0;
    if (!jobs.empty()) {
        try {
            for (auto &[job, pids] : lister_(jobs, {})) // every process, to continue each
                for (pid_t pid : pids)
                    if (kill(pid, SIGCONT) == 0)
                        ++n;
        } catch (const std::exception &e) {
            log_.error("cannot list the processes of jobs a previous agent managed: %s", e.what());
        }
    }
    log_.info("continued %zu processes of %zu jobs a previous node agent was switching%s", n, jobs.size(),
              held_text(slurms).c_str());
    remove_journal();
}

void Switcher::remove_journal()
{
    if (cfg_.journal_dir.empty())
        return;
    remove_file(cfg_.journal_dir + "/" + kJournal);
    remove_file(cfg_.journal_dir + "/" + kAgentRecord);
}

bool Switcher::on_signal(const std::string &event, const std::string &data)
{
    if (event.rfind("gang:", 0) != 0)
        return false;
    on_chunk(event, 0, 0, data.size(), data);
    return true;
}

std::string Switcher::on_chunk(const std::string &event, uint64_t origin, uint64_t offset, uint64_t total,
                               std::string_view data)
{
    try {
        if (event == kStrobeEvent) {
            if (offset != 0 || data.size() != total)
                throw net::DecodeError("a strobe in pieces");
            return on_strobe(Strobe::decode(data));
        }
        if (event != kTableEvent)
            throw net::DecodeError("unknown gang event " + event);
        if (offset == 0) {
            table_part_.clear();
            table_origin_ = origin;
        } else if (origin != table_origin_ || offset != table_part_.size())
            throw net::DecodeError("a table chunk out of order");
        table_part_.append(data);
        if (table_part_.size() == total) {
            std::string whole;
            whole.swap(table_part_);
            on_table(Table::decode(whole));
        }
        return "";
    } catch (const std::exception &e) {
        table_part_.clear();
        log_.error("dropped a malformed %s: %s", event.c_str(), e.what());
        return std::string("gang: malformed ") + event + ": " + e.what();
    }
}

void Switcher::signal_job(uint32_t id, Job &j, int sig)
{
    for (auto &p : j.procs)
        if (pidfd_signal(p.fd, sig) < 0 && errno != ESRCH)
            log_.error("cannot send %s to process %d of job %u: %s", sigabbrev_np(sig), p.pid, id,
                       std::strerror(errno));
}

void Switcher::stop_job(uint32_t id, Job &j)
{
    if (freezer_)
        freezer_->set_frozen(id, true);
    signal_job(id, j, SIGSTOP);
    j.stopped = j.out = true;
}

void Switcher::continue_job(uint32_t id, Job &j, bool sigcont)
{
    if (freezer_)
        freezer_->set_frozen(id, false);
    if (sigcont)
        signal_job(id, j, SIGCONT);
    j.stopped = j.out = false;
}

void Switcher::on_table(const Table &t)
{
    if (t.epoch == epoch_)
        return; // sent again to nodes that missed it
    std::set<uint32_t> hands_off(t.hands_off.begin(), t.hands_off.end());
    std::map<uint32_t, Job> next;
    for (const auto &tj : t.jobs) {
        if (!tj.nodes.contains(cfg_.self))
            continue;
        Job &n = next[tj.job_id];
        auto old = jobs_.find(tj.job_id);
        if (old != jobs_.end()) {
            n = std::move(old->second);
            jobs_.erase(old);
        }
        n.mask = tj.mask;
    }
    for (auto &[id, j] : jobs_) {
        if (hands_off.count(id))
            log_.verbose("job %u suspended by Slurm: Slurm resumes it", id);
        else if (j.stopped)
            continue_job(id, j);
        // Thawed even when Slurm suspended it: Slurm's SIGSTOP, held while
        // it was frozen, then takes effect.
        if (freezer_)
            freezer_->release(id);
        for (auto &p : j.procs)
            close(p.fd);
    }
    size_t before = jobs_.size();
    jobs_ = std::move(next);
    epoch_ = t.epoch;
    last_seq_ = 0; // a restarted manager counts from 1 again (under a new epoch)
    key_.reset();
    if (t.has_key)
        key_ = t.strobe_key;
    mc_reject_logged_ = false;
    failsafe_ms_ = t.failsafe_ms;
    quantum_us_ = t.quantum_us;
    last_strobe_ = std::chrono::steady_clock::now();
    log_.verbose("table %llu: %zu of its %zu jobs on this node (was %zu), %u slots",
                 static_cast<unsigned long long>(t.epoch), jobs_.size(), t.jobs.size(), before, t.slots);
    write_journal();
    arm_failsafe();
    std::string why = realtime_.want(!jobs_.empty());
    if (!why.empty())
        log_.warning("cannot run the node agent at real-time priority %u (%s): strobes will be late "
                     "under CPU-bound jobs",
                     cfg_.rt_priority, why.c_str());
    {
        std::lock_guard<std::mutex> lk(mu_);
        wanted_.clear();
        for (auto &[id, j] : jobs_)
            wanted_.insert(id);
        rescan_now_ = true;
    }
    cv_.notify_all();
    engine_.set_variable("gang:epoch", static_cast<int64_t>(epoch_ & (~uint64_t(0) >> 2)));
    engine_.set_variable("gang:jobs", static_cast<int64_t>(jobs_.size()));
}

std::string Switcher::on_strobe(const Strobe &s, bool replay)
{
    if (s.epoch != epoch_) {
        ++ignored_;
        return "gang: stale table (holds epoch " + std::to_string(epoch_) + ", strobe of " +
               std::to_string(s.epoch) + ")";
    }
    if (!replay) {
        if (s.seq <= last_seq_)
            return ""; // applied already: it came by multicast first
        last_seq_ = s.seq;
    }
    uint64_t bit = uint64_t(1) << s.slot;
    if (halting_) {
        // The previous switch waits for its contexts to halt: this strobe
        // is applied when it finishes, in order.
        deferred_.push_back(s);
    } else {
        bool lend = lends(bit);
        lent_ += lend;
        std::set<uint32_t> leaving;
        if (hook_)
            for (auto &[id, j] : jobs_)
                if (!(j.mask & bit) && !j.out)
                    leaving.insert(id);
        if (!leaving.empty() && hook_->halt(leaving, s.seq, quantum_us_)) {
            halting_ = true;
            halting_bit_ = bit;
            halting_seq_ = s.seq;
            halting_lend_ = lend;
        } else {
            finish_switch(bit, s.seq, lend);
        }
    }
    if (replay)
        return ""; // counted when it came
    last_strobe_ = std::chrono::steady_clock::now();
    arm_failsafe();
    if (failsafe_active_) {
        failsafe_active_ = false;
        log_.info("strobes resumed: switching again");
    }
    int64_t d = (realtime_ns() - s.sent_ns) / 1000;
    uint32_t us = d < 0 ? 0 : d > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(d);
    Delay rec{last_strobe_, us};
    if (delays_us_.size() < kDelays)
        delays_us_.push_back(rec);
    else
        delays_us_[delay_next_] = rec;
    delay_next_ = (delay_next_ + 1) % kDelays;
    ++applied_;
    return "";
}

// Whether the slot `bit` lends the node (switcher.hpp: Lending): some job
// runs that the switch would stop, none of the slot's jobs has a live
// process here, and no job of the node has a context whose tasks follow
// the strobes here (the hook still sees every switch: `out`).
bool Switcher::lends(uint64_t bit)
{
    if (!cfg_.lend)
        return false;
    bool stops = std::any_of(jobs_.begin(), jobs_.end(),
                             [bit](const auto &j) { return !(j.second.mask & bit) && !j.second.stopped; });
    if (!stops)
        return false;
    // The hook first: it reads only memory, where busy_here() may read the
    // freezer group's cgroup.events at every strobe.
    if (hook_) {
        std::set<uint32_t> ids;
        for (const auto &j : jobs_)
            ids.insert(j.first);
        if (hook_->follows(ids))
            return false;
    }
    for (auto &[id, j] : jobs_)
        if ((j.mask & bit) && busy_here(id, j))
            return false;
    for (auto &[id, j] : jobs_)
        if ((j.mask & bit) && !j.idle_logged) {
            j.idle_logged = true;
            log_.verbose("job %u has no live process on this node: its slot leaves the node to the "
                         "jobs that run",
                         id);
        }
    return true;
}

// Whether the job has a live process here: one the last scan found that has
// not exited, or any in its freezer group.  Idle stays idle until the next
// scan (which alone brings new processes): no system call then.
bool Switcher::busy_here(uint32_t id, Job &j)
{
    if (j.idle)
        return false;
    if (freezer_ && freezer_->populated(id))
        return true;
    if (!j.procs.empty()) {
        std::vector<pollfd> fds;
        for (const auto &p : j.procs)
            fds.push_back({p.fd, POLLIN, 0});
        if (poll(fds.data(), fds.size(), 0) < 0)
            return true;
        for (const auto &f : fds)
            if (!(f.revents & (POLLIN | POLLHUP | POLLERR)))
                return true; // a pidfd is readable once its process exited
    }
    j.idle = true;
    return false;
}

void Switcher::finish_switch(uint64_t bit, uint64_t seq, bool lend)
{
    // Outgoing jobs first: the two slots' jobs never run at once.  The hook
    // sees the switch every node makes (`out`); a node that lends leaves
    // the outgoing jobs running and the slot's (idle here) as they are.
    std::set<uint32_t> leaving, running;
    for (auto &[id, j] : jobs_) {
        if (j.mask & bit)
            continue;
        if (!j.out)
            leaving.insert(id);
        if (!lend && !j.stopped)
            stop_job(id, j);
        j.out = true;
    }
    for (auto &[id, j] : jobs_)
        if (j.mask & bit)
            running.insert(id);
    if (hook_)
        hook_->swap(leaving, running, seq);
    for (auto &[id, j] : jobs_)
        if (j.mask & bit) {
            if (j.stopped && !lend)
                continue_job(id, j);
            j.out = false;
        }
    if (hook_)
        hook_->release(running, seq);
}

void Switcher::halted()
{
    if (!halting_)
        return;
    halting_ = false;
    finish_switch(halting_bit_, halting_seq_, halting_lend_);
    while (!halting_ && !deferred_.empty()) {
        Strobe s = deferred_.front();
        deferred_.pop_front();
        if (s.epoch == epoch_)
            on_strobe(s, true);
    }
    arm_failsafe(); // it may have stopped jobs after the timer went off
}

void Switcher::rescan()
{
    {
        std::lock_guard<std::mutex> lk(mu_);
        rescan_now_ = true;
    }
    cv_.notify_all();
}

void Switcher::continue_all(const char *why)
{
    size_t n = 0;
    std::set<uint32_t> slurms, held;
    bool looked = false;
    for (auto &[id, j] : jobs_) {
        if (!j.stopped)
            continue;
        if (!looked && !cfg_.journal_dir.empty()) {
            held = suspended_by_slurm(cfg_.journal_dir);
            looked = true;
        }
        // One Slurm suspended is released, not continued: thawed (Slurm's
        // SIGSTOP holds inside the group), and no SIGCONT.
        bool slurm = held.count(id) > 0;
        continue_job(id, j, !slurm);
        if (slurm)
            slurms.insert(id);
        else
            ++n;
    }
    if (n || !slurms.empty())
        log_.info("%s: continued %zu stopped jobs%s", why, n, held_text(slurms).c_str());
}

void Switcher::on_tick(int, short, void *arg) { static_cast<Switcher *>(arg)->tick(); }

void Switcher::tick()
{
    if (freezer_)
        freezer_->retry();
    publish_stats();
}

void Switcher::on_wake(int fd, short, void *arg)
{
    uint64_t n;
    while (read(fd, &n, sizeof n) > 0) {
    }
    static_cast<Switcher *>(arg)->take_found();
}

void Switcher::take_found()
{
    std::map<uint32_t, std::vector<Proc>> found;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!found_ready_)
            return;
        found.swap(found_);
        found_ready_ = false;
    }
    for (auto &[id, procs] : found) {
        auto it = jobs_.find(id);
        if (it == jobs_.end()) {
            for (auto &p : procs)
                close(p.fd);
            continue;
        }
        for (auto &p : it->second.procs)
            close(p.fd);
        if (freezer_) {
            // Into the job's group (frozen if the job is stopped); what the
            // freezer cannot hold stays with the signals.
            std::vector<pid_t> pids;
            for (auto &p : procs)
                pids.push_back(p.pid);
            std::vector<pid_t> rest = freezer_->attach(id, pids, it->second.stopped);
            auto kept = std::partition(procs.begin(), procs.end(), [&rest](const Proc &p) {
                return std::find(rest.begin(), rest.end(), p.pid) != rest.end();
            });
            for (auto p = kept; p != procs.end(); ++p)
                close(p->fd);
            procs.erase(kept, procs.end());
        }
        it->second.procs = std::move(procs);
        it->second.idle = false; // looked at again at its next slot
        if (it->second.stopped)  // processes it started since the last scan
            signal_job(id, it->second, SIGSTOP);
    }
    all_held_ = freezer_ && !jobs_.empty() &&
                std::all_of(jobs_.begin(), jobs_.end(), [](const auto &j) { return j.second.procs.empty(); });
}

void Switcher::arm_failsafe()
{
    if (!failsafe_ms_ || jobs_.empty()) {
        event_del(failsafe_ev_);
        return;
    }
    auto due = last_strobe_ + std::chrono::milliseconds(failsafe_ms_);
    timeval tv = to_timeval(
        std::chrono::duration_cast<std::chrono::microseconds>(due - std::chrono::steady_clock::now()));
    event_add(failsafe_ev_, &tv); // a pending timer is moved
}

void Switcher::on_failsafe_ev(int, short, void *arg) { static_cast<Switcher *>(arg)->on_failsafe(); }

void Switcher::on_failsafe()
{
    if (!failsafe_ms_)
        return;
    if (std::chrono::steady_clock::now() - last_strobe_ < std::chrono::milliseconds(failsafe_ms_)) {
        arm_failsafe(); // a strobe came meanwhile
        return;
    }
    bool any = std::any_of(jobs_.begin(), jobs_.end(), [](const auto &j) { return j.second.stopped; });
    if (!any)
        return;
    // Counted and logged once until strobes resume; a job a late halt
    // stopped after that is continued too (halted() re-arms the timer).
    std::string why = "no strobe for " + ms_text(failsafe_ms_);
    if (!failsafe_active_) {
        failsafe_active_ = true;
        ++failsafes_;
    }
    continue_all(why.c_str());
}

void Switcher::publish_stats()
{
    auto set = [this](const char *k, uint64_t v) { engine_.set_variable(k, static_cast<int64_t>(v)); };
    set("gang:strobes", applied_);
    set("gang:ignored", ignored_);
    set("gang:failsafes", failsafes_);
    set("gang:lent", lent_);
    set("gang:frozen_jobs", freezer_ ? freezer_->jobs() : 0); // jobs switched with the freezer
    set("gang:stopped", static_cast<uint64_t>(std::count_if(jobs_.begin(), jobs_.end(),
                                                            [](const auto &j) { return j.second.stopped; })));
    // The last 4096 strobes of the last 30 s: the steady state, not the
    // start-up of the jobs (or a stall) long past.
    auto since = std::chrono::steady_clock::now() - std::chrono::seconds(30);
    std::vector<uint32_t> d;
    for (const auto &r : delays_us_)
        if (r.at >= since)
            d.push_back(r.us);
    if (d.empty())
        return;
    set("gang:delay_p50_us", percentile(d, 0.50));
    set("gang:delay_p99_us", percentile(d, 0.99));
    set("gang:delay_max_us", *std::max_element(d.begin(), d.end()));
}

void Switcher::write_journal()
{
    if (cfg_.journal_dir.empty())
        return;
    if (jobs_.empty()) {
        remove_journal();
        return;
    }
    std::string path = cfg_.journal_dir + "/" + kJournal, record = cfg_.journal_dir + "/" + kAgentRecord;
    std::string text;
    for (auto &[id, j] : jobs_)
        text += std::to_string(id) + "\n";
    // Who journals them, first: each step's slurmstepd continues its
    // processes if this process dies and stays away (step_guard.hpp).
    if (!replace_file(record, format_agent_record(own_agent_record(failsafe_ms_)), 0600, Spare::keep) ||
        !replace_file(path, text, 0600, Spare::keep))
        log_.error("cannot journal the switched jobs in %s: %s (a crashed agent's successor could not "
                   "continue them)",
                   path.c_str(), std::strerror(errno));
}

void Switcher::scanner() noexcept
{
    std::string last_error;
    // Right after a table change the jobs' steps are starting: scan at
    // 50 ms, then at doubling intervals up to cfg_.rescan.
    auto interval = cfg_.rescan;
    for (;;) {
        std::set<uint32_t> want;
        {
            std::unique_lock<std::mutex> lk(mu_);
            bool woken = cv_.wait_for(lk, interval, [this] { return quit_ || rescan_now_; });
            if (quit_)
                return;
            if (woken && rescan_now_)
                interval = std::chrono::milliseconds(50);
            else
                interval =
                    std::min(interval * 2, all_held_ ? std::max(cfg_.rescan, cfg_.rescan_held) : cfg_.rescan);
            rescan_now_ = false;
            want = wanted_;
        }
        if (want.empty())
            continue;
        // One listing, then a pidfd per process: from then on a signal can
        // reach only that process.  (A pid recycled between the listing and
        // pidfd_open would need the whole pid space to wrap within
        // microseconds.)
        std::map<uint32_t, std::vector<Proc>> out;
        try {
            // Where the freezer holds a step's processes, its step need
            // not be listed again (step_lister.hpp): their children are
            // born in the job's group.
            node::HeldTest held;
            if (freezer_)
                held = [this](uint32_t job, pid_t pid) { return freezer_->holds(job, pid); };
            for (auto &[job, pids] : lister_(want, held))
                for (pid_t pid : pids) {
                    int fd = pidfd_open(pid);
                    if (fd >= 0)
                        out[job].push_back({pid, fd});
                }
            for (uint32_t job : want)
                out[job]; // jobs with no process now
            last_error.clear();
        } catch (const std::exception &e) {
            for (auto &[job, procs] : out)
                for (auto &p : procs)
                    close(p.fd);
            if (last_error != e.what())
                log_.error("cannot list the jobs' processes: %s", e.what());
            last_error = e.what();
            continue;
        }
        std::lock_guard<std::mutex> lk(mu_);
        for (auto &[job, procs] : found_)
            for (auto &p : procs)
                close(p.fd);
        found_ = std::move(out);
        found_ready_ = true;
        uint64_t one = 1;
        if (write(wake_fd_, &one, sizeof one) < 0) {
            // full (2^64 - 2 unread): the loop has a wake-up pending anyway
        }
    }
}

} // namespace storm::gang
