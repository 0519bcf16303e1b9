#include "cosched/channel.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <iterator>
#include <sys/socket.h>
#include <system_error>
#include <unistd.h>

#include <event2/event.h>

#include "lib/node/cosched_protocol.h"
#include "lib/common/files.hpp"
#include "lib/common/signals.hpp"
#include "lib/common/stop_thread.hpp"
#include "lib/common/thread_name.hpp"

namespace storm::cosched {

namespace {

uint32_t be32(const unsigned char *p)
{
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void put32(unsigned char *p, uint32_t v)
{
    p[0] = static_cast<unsigned char>(v >> 24);
    p[1] = static_cast<unsigned char>(v >> 16);
    p[2] = static_cast<unsigned char>(v >> 8);
    p[3] = static_cast<unsigned char>(v);
}

bool send_packet(int fd, const void *data, size_t n)
{
    ssize_t r;
    do
        r = send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    return r == static_cast<ssize_t>(n);
}

// The variables of /proc/<pid>/environ; false (errno set) when unreadable.
bool environ_of(const std::string &proc_root, pid_t pid, std::map<std::string, std::string> &env)
{
    auto text = read_file(proc_root + "/" + std::to_string(pid) + "/environ");
    if (!text)
        return false;
    const std::string &all = *text;
    size_t start = 0;
    while (start < all.size()) {
        size_t end = all.find('\0', start);
        if (end == std::string::npos)
            end = all.size();
        std::string item = all.substr(start, end - start);
        size_t eq = item.find('=');
        if (eq != std::string::npos)
            env.emplace(item.substr(0, eq), item.substr(eq + 1));
        start = end + 1;
    }
    return true;
}

} // namespace

Verifier make_verifier(node::StepLister lister, std::shared_ptr<const Admissions> admissions,
                       std::vector<std::string> partitions, std::string proc_root)
{
    using Cache = std::map<uint32_t, std::pair<std::chrono::steady_clock::time_point, std::vector<pid_t>>>;
    auto cache = std::make_shared<Cache>();
    return [lister = std::move(lister), admissions = std::move(admissions),
            partitions = std::move(partitions), proc_root = std::move(proc_root),
            cache](pid_t pid, uid_t uid, uint32_t job) {
        Verdict v;
        std::map<std::string, std::string> env;
        if (!environ_of(proc_root, pid, env)) {
            v.error =
                "cannot read " + proc_root + "/" + std::to_string(pid) + "/environ: " + std::strerror(errno);
            return v;
        }
        auto id = env.find("SLURM_JOB_ID");
        if (id == env.end()) {
            v.error = "pid " + std::to_string(pid) + " is not a task of a Slurm job (no SLURM_JOB_ID)";
            return v;
        }
        if (id->second != std::to_string(job)) {
            v.error = "pid " + std::to_string(pid) + " belongs to job " + id->second + ", not to job " +
                      std::to_string(job);
            return v;
        }
        if (!admissions || !admissions->admitted(job)) {
            // The environment's partition words the reason; it decides
            // nothing (its user can set it).
            v.error = "job " + std::to_string(job) + " is not coscheduled on this node";
            auto part = env.find("SLURM_JOB_PARTITION");
            bool listed = part != env.end() &&
                          std::find(partitions.begin(), partitions.end(), part->second) != partitions.end();
            if (part != env.end() && !listed) {
                v.error += " (its partition \"" + part->second + "\" is not coscheduled)";
            } else {
                v.error += ": slurmstepd opened no coscheduled step of it here";
                if (part != env.end())
                    v.error +=
                        " (SLURM_JOB_PARTITION=\"" + part->second + "\" in its environment does not count)";
            }
            return v;
        }
        // The kernel's uid of the peer (SO_PEERCRED), against the owner
        // slurmctld named: checked at every registration, cached listing or
        // not, so a process of another user that inherits a freed pid of
        // the job's is refused.
        if (!admissions->admitted_for(job, uid)) {
            v.error = "pid " + std::to_string(pid) + " runs as uid " + std::to_string(uid) + ", not as job " +
                      std::to_string(job) + "'s owner";
            return v;
        }
        if (!lister) {
            v.procs = {pid};
            return v;
        }
        auto now = std::chrono::steady_clock::now();
        auto &c = (*cache)[job];
        auto has = [&](const std::vector<pid_t> &v) { return std::find(v.begin(), v.end(), pid) != v.end(); };
        if (now - c.first < std::chrono::seconds(2) && has(c.second)) {
            v.procs = c.second;
            return v;
        }
        std::map<uint32_t, std::vector<pid_t>> listed;
        try {
            listed = lister({job}, {}); // every step in full: the verifier holds nothing
        } catch (const std::exception &e) {
            cache->erase(job);
            v.error = std::string("cannot list job ") + std::to_string(job) + "'s processes: " + e.what();
            return v;
        }
        v.procs = listed[job];
        for (auto it = cache->begin(); it != cache->end();)
            it = now - it->second.first >= std::chrono::seconds(2) ? cache->erase(it) : std::next(it);
        (*cache)[job] = {now, v.procs};
        if (std::find(v.procs.begin(), v.procs.end(), pid) == v.procs.end()) {
            v.error = "pid " + std::to_string(pid) + " is not a process of job " + std::to_string(job) +
                      "'s steps here";
            v.procs.clear();
        }
        return v;
    };
}

Channel::Channel(event_base *base, std::string socket_path, Verifier verifier, Handler &handler, Logger log)
    : base_(base), verifier_(std::move(verifier)), handler_(handler), log_(log.child("cosched")),
      server_(base, std::move(socket_path), log, "cosched", "request socket",
              [this](int fd, const ucred &cred) { on_client(fd, cred); })
{
    // Tasks of every user register here: each user's connections are bounded.
    server_.limit_per_uid(net::UnixServer::kDefaultPerUid);
    // A task registers right after it connects; once its registration is
    // in, it may idle as long as it lives.
    server_.first_request_within(net::UnixServer::kDefaultFirstRequest,
                                 [this](int fd) { drop(fd, "", false); });
}

Channel::~Channel()
{
    stop_thread(mu_, quit_, cv_, thread_);
    if (wake_ev_)
        event_free(wake_ev_);
    for (int &fd : wake_)
        if (fd >= 0)
            ::close(fd);
    for (auto &[fd, c] : clients_) {
        if (c->ev)
            event_free(c->ev);
        ::close(fd);
    }
    clients_.clear();
    // server_ closes the socket and removes its file.
}

void Channel::start()
{
    server_.start();
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
        throw std::system_error(errno, std::generic_category(), "cosched: pipe");
    wake_ev_ = event_new(base_, wake_[0], EV_READ | EV_PERSIST, on_verified, this);
    if (!wake_ev_ || event_add(wake_ev_, nullptr) != 0)
        throw std::runtime_error("cosched: cannot register the request socket's events");
    thread_ = std::thread([this] {
        name_thread("storm-cosched");
        worker();
    });
}

void Channel::worker() noexcept
{
    // slurmd's signals (SIGTERM, SIGHUP, ...) are for its own threads.
    block_all_signals();
    for (;;) {
        Check c;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [this] { return quit_ || !checks_.empty(); });
            if (quit_)
                return;
            c = checks_.pop();
        }
        try {
            c.verdict = verifier_(c.pid, c.uid, c.job);
        } catch (const std::exception &e) {
            c.verdict.error = std::string("cannot check it: ") + e.what();
        }
        {
            std::lock_guard<std::mutex> lk(mu_);
            done_.push_back(std::move(c));
        }
        char b = 1;
        if (write(wake_[1], &b, 1) < 0) {
            // The pipe is full: the loop has bytes to wake it already.
        }
    }
}

void Channel::on_verified(int fd, short, void *arg)
{
    auto *self = static_cast<Channel *>(arg);
    char buf[256];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    std::deque<Check> done;
    {
        std::lock_guard<std::mutex> lk(self->mu_);
        done.swap(self->done_);
    }
    for (auto &c : done) {
        auto it = self->clients_.find(c.fd);
        if (it == self->clients_.end() || it->second->serial != c.serial)
            continue; // closed meanwhile
        self->finish_register(*it->second, c.verdict);
    }
}

void Channel::on_client(int fd, const ucred &cred)
{
    if (cred.pid <= 0) {
        // A peer in another pid namespace: nothing could verify it.
        log_.error("cannot read a client's credentials: its pid is not visible here");
        ::close(fd);
        return;
    }
    auto client = std::make_unique<Client>();
    client->fd = fd;
    client->pid = cred.pid;
    client->uid = cred.uid;
    net::keep_watched(base_, clients_, std::move(client), on_readable, this);
}

void Channel::on_readable(int fd, short, void *arg)
{
    auto *self = static_cast<Channel *>(arg);
    // A few requests per wakeup, so that one busy task cannot hold the loop.
    for (int i = 0; i < 16; ++i) {
        auto it = self->clients_.find(fd);
        if (it == self->clients_.end())
            return;
        Client &c = *it->second;
        unsigned char buf[STORM_COSCHED_MAX_MSG + 1];
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0) {
            self->drop(fd, n == 0 ? "" : std::strerror(errno), n < 0);
            return;
        }
        self->handle(c, buf, static_cast<size_t>(n));
        auto again = self->clients_.find(fd);
        if (again != self->clients_.end() && again->second->serial)
            return; // its registration is being checked: nothing more until then
    }
}

void Channel::drop(int fd, const std::string &why, bool log_error)
{
    auto it = clients_.find(fd);
    if (it == clients_.end())
        return;
    std::unique_ptr<Client> c = std::move(it->second);
    clients_.erase(it);
    if (log_error)
        log_.error("closed the request channel of pid %d (uid %u): %s", c->pid, c->uid, why.c_str());
    if (c->ev)
        event_free(c->ev);
    server_.settled(fd);
    ::close(fd);
    if (c->job)
        handler_.on_unregister(fd, c->pid, c->job);
}

void Channel::refuse(Client &c, const std::string &why)
{
    ++refused_;
    log_.error("refused pid %d (uid %u): %s", c.pid, c.uid, why.c_str());
    unsigned char m[STORM_COSCHED_MSG_SIZE + 240] = {STORM_COSCHED_VERSION, STORM_COSCHED_ERROR};
    size_t len = std::min<size_t>(why.size(), 240);
    std::memcpy(m + STORM_COSCHED_MSG_SIZE, why.data(), len);
    send_packet(c.fd, m, STORM_COSCHED_MSG_SIZE + len);
    drop(c.fd, why, false);
}

void Channel::handle(Client &c, const unsigned char *m, size_t n)
{
    auto bad = [&](const std::string &why) {
        ++refused_;
        drop(c.fd, "malformed request: " + why, true);
    };
    if (n != STORM_COSCHED_MSG_SIZE)
        return bad(std::to_string(n) + " bytes, not " + std::to_string(STORM_COSCHED_MSG_SIZE));
    if (m[0] != STORM_COSCHED_VERSION)
        return bad("version " + std::to_string(m[0]) + ", not " + std::to_string(STORM_COSCHED_VERSION));
    if (m[3] != 0)
        return bad("reserved byte is not zero");
    uint8_t type = m[1], status = m[2];
    uint32_t job = be32(m + 4), rank = be32(m + 8), count = be32(m + 12);
    switch (type) {
    case STORM_COSCHED_REGISTER: {
        if (c.job)
            return bad("a second registration (already job " + std::to_string(c.job) + ")");
        if (!job || status != 0 || count != 0)
            return bad("a registration with job " + std::to_string(job) + ", status " +
                       std::to_string(status) + ", count " + std::to_string(count));
        // Not read until the worker has checked it (on_verified), which
        // registers it or closes it: the deadline no longer applies.
        server_.settled(c.fd);
        c.serial = ++next_serial_;
        c.want_job = job;
        c.want_rank = rank;
        event_del(c.ev);
        {
            std::lock_guard<std::mutex> lk(mu_);
            checks_.push(c.uid, Check{c.fd, c.serial, c.pid, c.uid, job, {}});
        }
        cv_.notify_one();
        return;
    }
    case STORM_COSCHED_UNREGISTER:
        if (!c.job || job != c.job)
            return bad("unregistering job " + std::to_string(job) + " without being registered for it");
        drop(c.fd, "", false);
        return;
    case STORM_COSCHED_SCHEDULE:
        if (!c.job)
            return bad("a schedule request before registering");
        if (job != c.job)
            return bad("a schedule request for job " + std::to_string(job) + " from a task of job " +
                       std::to_string(c.job));
        if (status > STORM_COSCHED_UNKNOWN || count == 0)
            return bad("a schedule request with status " + std::to_string(status) + ", count " +
                       std::to_string(count));
        handler_.on_schedule(c.fd, job, rank, static_cast<Sender>(status), count);
        return;
    default:
        return bad("unknown type " + std::to_string(type));
    }
}

void Channel::finish_register(Client &c, Verdict &v)
{
    uint32_t job = c.want_job, rank = c.want_rank;
    c.serial = 0;
    if (!v.error.empty())
        return refuse(c, "cannot register for job " + std::to_string(job) + ": " + v.error);
    if (event_add(c.ev, nullptr) != 0)
        return drop(c.fd, "cannot watch the connection again", true);
    c.job = job;
    bool scheduled = handler_.on_register(c.fd, c.pid, job, rank, v.procs);
    unsigned char ok[STORM_COSCHED_MSG_SIZE] = {STORM_COSCHED_VERSION, STORM_COSCHED_OK,
                                                static_cast<unsigned char>(scheduled ? 1 : 0)};
    put32(ok + 4, job);
    put32(ok + 8, rank);
    send_packet(c.fd, ok, sizeof ok);
    log_.verbose("pid %d (uid %u) registered as rank %u of job %u", c.pid, c.uid, rank, job);
}

void Channel::send_status(int conn, bool scheduled)
{
    auto it = clients_.find(conn);
    if (it == clients_.end() || !it->second->job)
        return;
    unsigned char m[STORM_COSCHED_MSG_SIZE] = {STORM_COSCHED_VERSION, STORM_COSCHED_STATUS,
                                               static_cast<unsigned char>(scheduled ? 1 : 0)};
    put32(m + 4, it->second->job);
    send_packet(conn, m, sizeof m); // a full buffer: the task reads the next one
}

} // namespace storm::cosched
