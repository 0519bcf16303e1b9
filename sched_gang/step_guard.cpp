#include "sched_gang/step_guard.hpp"

#include <cstdio>
#include <dirent.h>
#include <sstream>
#include <unistd.h>
#include <vector>

#include "lib/common/files.hpp"
#include "lib/common/procs.hpp"
#include "lib/common/stop_thread.hpp"
#include "sched_gang/config.hpp"

namespace storm::gang {

namespace {

// starttime, the 22nd field of /proc/PID/stat (the 20th after "pid (comm) "),
// of a process that has not exited: nullopt for one that is gone, or a
// zombie (exited, not yet reaped: its entry stays until its parent waits).
std::optional<unsigned long long> start_time(pid_t pid)
{
    char buf[512];
    const char *f = stat_fields("/proc/" + std::to_string(pid) + "/stat", buf);
    if (!f || f[0] == 'Z' || f[0] == 'X')
        return std::nullopt;
    unsigned long long start = 0;
    if (sscanf(f, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &start) != 1)
        return std::nullopt;
    return start;
}

} // namespace

std::string format_agent_record(const AgentRecord &r)
{
    return std::to_string(r.pid) + " " + std::to_string(r.start) + " " + std::to_string(r.failsafe_ms) + "\n";
}

std::optional<AgentRecord> parse_agent_record(const std::string &text)
{
    AgentRecord r;
    long long pid = 0;
    unsigned long long start = 0, fs = 0;
    int used = 0;
    if (sscanf(text.c_str(), "%lld %llu %llu%n", &pid, &start, &fs, &used) != 3 || pid <= 0 ||
        fs > UINT32_MAX || text.find_first_not_of(" \n", static_cast<size_t>(used)) != std::string::npos)
        return std::nullopt;
    r.pid = static_cast<pid_t>(pid);
    r.start = start;
    r.failsafe_ms = static_cast<uint32_t>(fs);
    return r;
}

AgentRecord own_agent_record(uint32_t failsafe_ms)
{
    AgentRecord r;
    r.pid = getpid();
    r.start = start_time(r.pid).value_or(0);
    r.failsafe_ms = failsafe_ms;
    return r;
}

bool agent_alive(const AgentRecord &r)
{
    auto start = start_time(r.pid);
    return start && *start == r.start; // another process under a reused pid is not the agent
}

std::set<uint32_t> journal_jobs(const std::string &journal)
{
    std::istringstream in(journal);
    std::set<uint32_t> jobs;
    uint32_t id;
    while (in >> id)
        jobs.insert(id);
    return jobs;
}

std::string suspended_mark_name(uint32_t job, uint32_t step)
{
    return "suspended." + std::to_string(job) + "." + std::to_string(step);
}

bool mark_suspended(const std::string &dir, uint32_t job, uint32_t step, bool on)
{
    std::string path = dir + "/" + suspended_mark_name(job, step);
    if (!on) {
        remove_file(path);
        return true;
    }
    return replace_file(path, format_agent_record(own_agent_record(0)), 0600);
}

std::set<uint32_t> suspended_by_slurm(const std::string &dir)
{
    std::set<uint32_t> held;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return held;
    std::vector<std::string> stale;
    while (dirent *e = readdir(d)) {
        // "suspended.<job>.<step>" (not a mark's spare, *.new)
        unsigned long job = 0, step = 0;
        int used = 0;
        if (sscanf(e->d_name, "suspended.%lu.%lu%n", &job, &step, &used) != 2 || e->d_name[used] != '\0' ||
            suspended_mark_name(static_cast<uint32_t>(job), static_cast<uint32_t>(step)) != e->d_name)
            continue;
        auto text = read_file(dir + "/" + e->d_name);
        auto rec = text ? parse_agent_record(*text) : std::nullopt;
        if (rec && agent_alive(*rec))
            held.insert(static_cast<uint32_t>(job));
        else if (text)
            stale.push_back(e->d_name); // its slurmstepd is gone
    }
    closedir(d);
    for (const auto &name : stale)
        remove_file(dir + "/" + name);
    return held;
}

bool GuardState::observe(std::chrono::steady_clock::time_point now, bool listed, bool alive,
                         std::chrono::milliseconds failsafe)
{
    if (alive || !listed) {
        // An agent runs (it switches, and continues what it stopped), or
        // none switches this job: nothing to guard.
        gone_since_.reset();
        if (alive)
            resumed_ = false;
        return false;
    }
    if (!gone_since_)
        gone_since_ = now;
    if (resumed_ || now - *gone_since_ < failsafe)
        return false;
    resumed_ = true;
    return true;
}

StepGuard::StepGuard(StepGuardConfig cfg, std::function<size_t()> resume, Logger log)
    : cfg_(std::move(cfg)), resume_(std::move(resume)), log_(log.child("gang"))
{
    thread_ = std::thread([this] { run(); });
}

StepGuard::~StepGuard() { stop_thread(mu_, stop_, cv_, thread_); }

unsigned StepGuard::resumes() const noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    return resumes_;
}

void StepGuard::run() noexcept
{
    GuardState state;
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_for(lk, cfg_.poll, [this] { return stop_; })) {
        lk.unlock();
        try {
            auto journal = read_file(cfg_.journal_dir + "/" + kJournal);
            bool listed = journal && journal_jobs(*journal).count(cfg_.job);
            std::optional<AgentRecord> rec;
            if (listed)
                if (auto text = read_file(cfg_.journal_dir + "/" + kAgentRecord))
                    rec = parse_agent_record(*text);
            // No record (an agent that keeps none): nothing to go by.
            listed = listed && rec;
            bool alive = rec && agent_alive(*rec);
            auto failsafe =
                rec && rec->failsafe_ms ? std::chrono::milliseconds(rec->failsafe_ms) : GangConfig{}.failsafe;
            if (state.observe(std::chrono::steady_clock::now(), listed, alive, failsafe)) {
                size_t n = resume_();
                log_.error("step %s: the node agent that switches job %u (slurmd pid %d) is gone for %lld "
                           "ms: continued %zu of the step's processes",
                           cfg_.step.c_str(), cfg_.job, static_cast<int>(rec->pid),
                           static_cast<long long>(failsafe.count()), n);
                std::lock_guard<std::mutex> g(mu_);
                resumes_++;
            }
        } catch (const std::exception &e) {
            log_.error("step %s: fail-safe check: %s", cfg_.step.c_str(), e.what());
        }
        lk.lock();
    }
}

} // namespace storm::gang
