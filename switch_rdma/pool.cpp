#include "switch_rdma/pool.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <system_error>
#include <thread>
#include <unistd.h>

#include <event2/event.h>

#include "lib/common/files.hpp"
#include "lib/common/percentile.hpp"
#include "lib/common/procs.hpp"
#include "lib/common/timeval.hpp"
#include "lib/net/fd_passing.hpp"
#include "switch_rdma/layout.hpp"
#include "switch_rdma/window.hpp"

namespace storm::rdma {

namespace {

constexpr size_t kStages = 4096;

// A swap-out whose tasks' threads are not all stopped yet re-checks them
// on a timer: after 200 us, doubling up to 3.2 ms, for at most 100 ms.
constexpr uint32_t kStopCheckFirstUs = 200;
constexpr uint32_t kStopCheckMaxUs = 3200;
constexpr std::chrono::milliseconds kStopWait{100};

uint32_t micros_since(std::chrono::steady_clock::time_point t0)
{
    auto d =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    return d < 0 ? 0 : d > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(d);
}

std::string step_name(const Context &c) { return std::to_string(c.job_id) + "." + std::to_string(c.step_id); }

} // namespace

struct Pool::Client {
    int fd = -1;
    event *ev = nullptr;
    uid_t uid = 0;
    pid_t pid = 0;
    // Set once the client attached as a task.
    bool task = false;
    uint32_t ctx = 0;
    uint32_t local = 0;
    uint32_t rank = 0;
};

struct Pool::Window {
    Context ctx;
    uint32_t local_tasks = 0;
    TaskShare share;
    int memfd = -1;
    uint8_t *base = nullptr;
    uint64_t bytes = 0;
    bool resident = false;
    bool pinned = false; // locked in memory: from its first task's attach on
    bool failed = false;
    std::string unusable; // why its tasks cannot communicate (no window)
    // Swapped contexts: where the context is in the switch protocol.
    //  out      in its backing store, halted at `epoch`
    //  halted   in the pool, halted at `epoch`, waiting for a release
    //  halting  in the pool, halt{epoch} sent, `waiting` tasks to answer
    //  running  in the pool, released (divided contexts always are)
    enum class State { out, halted, halting, running } state = State::running;
    uint64_t epoch = 0;       // of its last halt (1 before the first release)
    std::set<int> waiting;    // tasks (fds) whose halt the switch waits for
    std::set<int> halted_fds; // tasks (fds) halted at `epoch`
    std::chrono::steady_clock::time_point halt_sent{};
    std::set<int> not_ready; // tasks (fds) that have not answered release
    std::chrono::steady_clock::time_point release_sent{};
    std::vector<std::string> backing; // per share, while not resident
    std::map<uint32_t, int> attached; // local index -> client fd
    // A swap-out waiting for its tasks' threads to stop (wait_stopped()):
    // the timer, when it gives up, and its next delay (0: not waiting).
    Pool *pool = nullptr;
    event *stop_timer = nullptr;
    std::chrono::steady_clock::time_point stop_until{};
    uint32_t stop_delay_us = 0;
    QueueHeader *header(uint32_t local) const
    {
        return reinterpret_cast<QueueHeader *>(base + uint64_t{local} * share.bytes);
    }
    ~Window()
    {
        if (stop_timer)
            event_free(stop_timer);
        if (base)
            munmap(base, bytes);
        if (memfd >= 0)
            ::close(memfd);
    }
};

void Pool::Stage::add(uint32_t v)
{
    if (us.size() < kStages)
        us.push_back(v);
    else
        us[next] = v;
    next = (next + 1) % kStages;
}

Pool::Pool(event_base *base, PoolSetup setup, Logger log)
    : base_(base), setup_(std::move(setup)), log_(std::move(log)),
      server_(base, setup_.socket_path, log_, "rdma", "control socket",
              [this](int fd, const ucred &cred) { on_client(fd, cred); })
{
}

Pool::~Pool()
{
    for (auto &[fd, c] : clients_) {
        if (c->ev)
            event_free(c->ev);
        ::close(fd);
    }
    clients_.clear();
    while (!windows_.empty())
        erase_window(windows_.begin()); // their jobs' admissions end with the pool
    for (event *e : {halt_timer_, stats_timer_})
        if (e)
            event_free(e);
    // server_ closes the control socket and removes its file.
}

void Pool::start()
{
    server_.start();
    halt_timer_ = evtimer_new(base_, on_halt_timeout, this);
    stats_timer_ = event_new(base_, -1, EV_PERSIST, on_stats_timer, this);
    timeval one{1, 0};
    if (!halt_timer_ || !stats_timer_ || event_add(stats_timer_, &one) != 0)
        throw std::runtime_error("rdma: cannot register the control socket's events");
    log_.verbose("rdma: pool of %llu bytes, packets of %u bytes, control socket %s",
                 static_cast<unsigned long long>(setup_.config.pool_size), setup_.config.packet_size,
                 setup_.socket_path.c_str());
}

uint64_t Pool::used_bytes() const noexcept
{
    uint64_t used = 0;
    for (const auto &[id, w] : windows_)
        if (w->ctx.mode == PoolMode::divided || w->resident)
            used += w->bytes;
    return used;
}

int Pool::resident_context() const noexcept { return resident_; }

// ---- control socket ---------------------------------------------------------

void Pool::on_client(int fd, const ucred &cred)
{
    auto client = std::make_unique<Client>();
    client->fd = fd;
    client->uid = cred.uid;
    client->pid = cred.pid;
    net::keep_watched(base_, clients_, std::move(client), on_readable, this);
}

void Pool::on_readable(int fd, short, void *arg)
{
    auto *self = static_cast<Pool *>(arg);
    auto it = self->clients_.find(fd);
    if (it != self->clients_.end())
        self->read_client(*it->second);
}

void Pool::read_client(Client &c)
{
    // One buffer for every message, made once: a fresh one per message
    // meant zeroing and faulting in 1 MiB for each step's open and close.
    if (rx_.size() != control::max_message + 1)
        rx_.assign(control::max_message + 1, '\0');
    int passed = -1, flags = 0;
    ssize_t n = net::recv_with_fd(c.fd, rx_, passed, 0, &flags);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (passed >= 0)
        ::close(passed); // nobody passes descriptors to the agent
    if (n <= 0) {
        drop(c.fd, n == 0 ? nullptr : std::strerror(errno));
        return;
    }
    if (flags & MSG_TRUNC) {
        drop(c.fd, "message too long");
        return;
    }
    handle(c, std::string(rx_.data(), static_cast<size_t>(n)), -1);
}

bool Pool::reply(Client &c, const std::string &msg, int fd)
{
    return net::send_with_fd(c.fd, msg, fd, MSG_DONTWAIT) == static_cast<ssize_t>(msg.size());
}

void Pool::drop(int fd, const char *why)
{
    auto it = clients_.find(fd);
    if (it == clients_.end())
        return;
    Client &c = *it->second;
    if (c.task) {
        auto w = windows_.find(c.ctx);
        if (w != windows_.end()) {
            auto a = w->second->attached.find(c.local);
            if (a != w->second->attached.end() && a->second == fd)
                w->second->attached.erase(a);
            if (why)
                log_.verbose("rdma: context %u (step %s): rank %u detached: %s", c.ctx,
                             step_name(w->second->ctx).c_str(), c.rank, why);
        }
    } else if (why) {
        log_.error("rdma: closed a control connection of pid %d (uid %u): %s", c.pid, c.uid, why);
    }
    if (c.ev)
        event_free(c.ev);
    ::close(fd);
    clients_.erase(it);
    for (auto &[id, w] : windows_) {
        w->not_ready.erase(fd);
        w->halted_fds.erase(fd);
        if (halt_answered(*w, fd))
            break; // the switch may have gone on: windows_ may have changed
    }
}

void Pool::handle(Client &c, const std::string &msg, int)
{
    net::Reader r(msg);
    control::Header h{};
    try {
        h = control::header(r);
        switch (h.type) {
        case control::Type::open: {
            Context ctx = control::read_open(r);
            if (std::find(setup_.trusted.begin(), setup_.trusted.end(), c.uid) == setup_.trusted.end()) {
                log_.error("rdma: refused to open context %u for pid %d of uid %u: only slurmstepd may",
                           ctx.id, c.pid, c.uid);
                reply(c, control::error("only slurmstepd may open a communication context"));
                return;
            }
            // A step starts: the switcher finds its tasks within about
            // 50 ms rather than at its next scan (up to a second away).
            if (switcher_)
                switcher_->rescan();
            open_context(c, ctx);
            return;
        }
        case control::Type::close: {
            auto ids = control::read_close(r);
            if (std::find(setup_.trusted.begin(), setup_.trusted.end(), c.uid) == setup_.trusted.end()) {
                log_.error("rdma: refused to close context %u for pid %d of uid %u: only slurmstepd may",
                           ids.id, c.pid, c.uid);
                reply(c, control::error("only slurmstepd may close a communication context"));
                return;
            }
            auto w = windows_.find(ids.id);
            if (w == windows_.end() || w->second->ctx.job_id != ids.job ||
                w->second->ctx.step_id != ids.step) {
                reply(c, control::error("no context " + std::to_string(ids.id) + " of step " +
                                        std::to_string(ids.job) + "." + std::to_string(ids.step) +
                                        " is open on this node"));
                return;
            }
            close_context(ids.id, "its step ended");
            reply(c, control::ok());
            return;
        }
        case control::Type::attach:
            attach(c, control::read_attach(r));
            return;
        case control::Type::halted:
            if (!c.task)
                break;
            on_halted(c, control::read_epoch(r));
            return;
        case control::Type::ready:
            if (!c.task)
                break;
            on_ready(c, control::read_epoch(r));
            return;
        case control::Type::failed:
            if (!c.task)
                break;
            {
                std::string why = control::read_reason(r);
                auto w = windows_.find(c.ctx);
                if (w != windows_.end())
                    fail_context(*w->second, "rank " + std::to_string(c.rank) + " reports: " + why);
            }
            return;
        default:
            break;
        }
        drop(c.fd, "unexpected control message");
    } catch (const std::exception &e) {
        log_.error("rdma: malformed control message from pid %d (uid %u): %s", c.pid, c.uid, e.what());
        drop(c.fd, nullptr);
    }
}

// ---- contexts ---------------------------------------------------------------

void Pool::open_context(Client &c, const Context &ctx)
{
    std::string step = step_name(ctx);
    auto refuse = [&](const std::string &why) {
        log_.error("rdma: cannot open context %u of step %s: %s", ctx.id, step.c_str(), why.c_str());
        reply(c, control::error(why));
    };
    auto old = windows_.find(ctx.id);
    if (old != windows_.end()) {
        if (old->second->ctx.job_id == ctx.job_id && old->second->ctx.step_id == ctx.step_id) {
            reply(c, control::ok()); // slurmstepd asked again
            return;
        }
        // slurmctld reuses an id only after the step holding it ended; a
        // close that never came (slurmstepd killed) leaves it here.
        log_.info("rdma: context %u reused by step %s: closing step %s's", ctx.id, step.c_str(),
                  step_name(old->second->ctx).c_str());
        close_context(ctx.id, "its id was given to a new step");
    }
    const ContextNode *me = nullptr;
    for (const auto &n : ctx.nodes)
        if (n.addr == setup_.self_addr)
            me = &n;
    if (!me) {
        char a[INET_ADDRSTRLEN] = "?";
        in_addr ia{};
        ia.s_addr = setup_.self_addr;
        inet_ntop(AF_INET, &ia, a, sizeof a);
        return refuse(std::string("this node (") + a + ") is not among the context's nodes");
    }
    auto w = std::make_unique<Window>();
    w->ctx = ctx;
    w->local_tasks = static_cast<uint32_t>(me->ranks.size());
    w->share = task_share(setup_.config, ctx.mode, ctx.divisions, w->local_tasks, ctx.ntasks);
    w->unusable =
        no_credit_reason(setup_.config, ctx.mode, ctx.divisions, w->local_tasks, ctx.ntasks, w->share);
    uint64_t bytes = uint64_t{w->local_tasks} * w->share.bytes;
    if (w->unusable.empty() && ctx.mode == PoolMode::divided &&
        used_bytes() + bytes > setup_.config.pool_size)
        w->unusable = "the pool is full: " + std::to_string(used_bytes()) + " of its " +
                      std::to_string(setup_.config.pool_size) +
                      " bytes are in use by other contexts, this one needs " + std::to_string(bytes) +
                      " (the partition's OverSubscribe sets how many contexts share a node's pool)";
    if (!w->unusable.empty()) {
        // Opened without a window: the step runs, and a task that attaches
        // gets the reason.
        log_.verbose("rdma: context %u of step %s cannot communicate: %s", ctx.id, step.c_str(),
                     w->unusable.c_str());
        w->failed = true;
        add_window(std::move(w));
        reply(c, control::ok());
        return;
    }
    w->bytes = bytes;
    w->memfd = static_cast<int>(
        syscall(SYS_memfd_create, ("storm-ctx-" + std::to_string(ctx.id)).c_str(), MFD_CLOEXEC));
    if (w->memfd < 0 || ftruncate(w->memfd, static_cast<off_t>(w->bytes)) != 0)
        return refuse(std::string("cannot create its window: ") + std::strerror(errno));
    void *p = mmap(nullptr, w->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, w->memfd, 0);
    if (p == MAP_FAILED)
        return refuse(std::string("cannot map its window: ") + std::strerror(errno));
    w->base = static_cast<uint8_t *>(p);
    for (uint32_t l = 0; l < w->local_tasks; ++l)
        init_share(w->header(l), w->share.bytes, setup_.config.packet_size, w->share.send_slots,
                   w->share.recv_slots, w->share.credits, me->ranks[l], ctx.ntasks, false);
    w->backing.resize(w->local_tasks);
    Window &ref = *w;
    add_window(std::move(w));
    if (ctx.mode == PoolMode::divided) {
        set_resident(ref, true);
    } else {
        // A swapped context starts halted at epoch 1 on every node, and
        // waits in its backing store: the first switch that runs its job
        // brings it in and releases it (release{1}), on all its nodes alike.
        save_out(ref);
        ref.state = Window::State::out;
        ref.epoch = 1;
    }
    log_.info(
        "rdma: opened context %u of step %s (uid %u): %s%s, %u local tasks of %u, %llu bytes, %u send and "
        "%u receive packets and %u credits per task%s",
        ctx.id, step.c_str(), ctx.uid, mode_name(ctx.mode), ctx.cosched ? ", coscheduled" : "",
        ref.local_tasks, ctx.ntasks, static_cast<unsigned long long>(ref.bytes), ref.share.send_slots,
        ref.share.recv_slots, ref.share.credits, ref.resident ? "" : "; waits for the pool");
    stats_dirty_ = true;
    reply(c, control::ok());
}

void Pool::add_window(std::unique_ptr<Window> w)
{
    uint32_t id = w->ctx.id;
    if (windows_.count(id))
        throw std::logic_error("rdma: context " + std::to_string(id) + " is open already");
    if (w->ctx.cosched && setup_.admissions)
        setup_.admissions->open(w->ctx.job_id);
    windows_[id] = std::move(w);
}

void Pool::erase_window(std::map<uint32_t, std::unique_ptr<Window>>::iterator it)
{
    if (it->second->ctx.cosched && setup_.admissions)
        setup_.admissions->close(it->second->ctx.job_id);
    windows_.erase(it);
}

void Pool::close_context(uint32_t id, const char *why)
{
    auto it = windows_.find(id);
    if (it == windows_.end())
        return;
    Window &w = *it->second;
    std::vector<int> fds;
    for (auto &[l, fd] : w.attached)
        fds.push_back(fd);
    w.attached.clear();
    log_.verbose("rdma: closed context %u of step %s: %s", id, step_name(w.ctx).c_str(), why);
    if (resident_ == static_cast<int>(id))
        resident_ = -1;
    erase_window(it);
    for (int fd : fds)
        drop(fd, nullptr);
    stats_dirty_ = true;
}

void Pool::attach(Client &c, const control::Ids &ids)
{
    auto refuse = [&](const std::string &why) {
        log_.error("rdma: refused to attach pid %d (uid %u) to context %u as rank %u: %s", c.pid, c.uid,
                   ids.id, ids.rank, why.c_str());
        reply(c, control::error(why));
        drop(c.fd, nullptr);
    };
    if (c.task)
        return refuse("this connection is already attached");
    auto it = windows_.find(ids.id);
    if (it == windows_.end() || it->second->ctx.job_id != ids.job || it->second->ctx.step_id != ids.step)
        return refuse("no context " + std::to_string(ids.id) + " of step " + std::to_string(ids.job) + "." +
                      std::to_string(ids.step) + " is open on this node");
    Window &w = *it->second;
    if (c.uid != w.ctx.uid && c.uid != 0)
        return refuse("the context belongs to uid " + std::to_string(w.ctx.uid));
    if (!w.unusable.empty())
        return refuse(w.unusable);
    if (w.failed)
        return refuse("the context has failed");
    uint32_t local = UINT32_MAX;
    for (const auto &n : w.ctx.nodes)
        if (n.addr == setup_.self_addr)
            for (uint32_t l = 0; l < n.ranks.size(); ++l)
                if (n.ranks[l] == ids.rank)
                    local = l;
    if (local == UINT32_MAX)
        return refuse("rank " + std::to_string(ids.rank) + " has no task on this node");
    if (w.attached.count(local))
        return refuse("rank " + std::to_string(ids.rank) + " is already attached");
    control::Attached a;
    a.mode = w.ctx.mode;
    a.offset = uint64_t{local} * w.share.bytes;
    a.bytes = w.share.bytes;
    a.packet_size = setup_.config.packet_size;
    a.send_slots = w.share.send_slots;
    a.recv_slots = w.share.recv_slots;
    a.credits = w.share.credits;
    a.epoch = w.epoch;
    a.resident = w.resident;
    if (w.ctx.mode == PoolMode::swapped) {
        // Every task of a swapped context starts halted at epoch 1 (its
        // peers hold it so), whenever it attaches; one that comes after the
        // context's first halt is halted at the current epoch at once, so
        // that it sends the halt mark its peers expect.
        a.epoch = 1;
        a.resident = false;
    }
    if (!w.pinned) {
        // Pinned when a task first uses it, not at open: most steps never
        // attach, and locking a window faults in all of its pages (each
        // node's agent spent about 0.6 ms of a 64-node step's start on it).
        if (mlock(w.base, w.bytes) != 0)
            log_.verbose("rdma: context %u: cannot pin its window: %s", w.ctx.id, std::strerror(errno));
        w.pinned = true;
    }
    if (!reply(c, control::attached(a), w.memfd))
        return refuse(std::string("cannot answer: ") + std::strerror(errno));
    c.task = true;
    c.ctx = ids.id;
    c.local = local;
    c.rank = ids.rank;
    w.attached[local] = c.fd;
    if (w.ctx.mode == PoolMode::swapped) {
        if (w.epoch > 1) {
            // It starts halted at 1: the halt of the current epoch brings it
            // where its peers are (its release, if any, when it answers).
            reply(c, control::epoch_message(control::Type::halt, w.epoch));
            if (w.state == Window::State::halting)
                w.waiting.insert(c.fd);
        } else {
            w.halted_fds.insert(c.fd);
            if (w.state == Window::State::running)
                release_task(w, c.fd);
        }
    }
    log_.verbose("rdma: rank %u (pid %d) attached to context %u of step %s", ids.rank, c.pid, ids.id,
                 step_name(w.ctx).c_str());
}

void Pool::fail_context(Window &w, const std::string &why)
{
    if (w.failed)
        return;
    w.failed = true;
    ++failures_;
    stats_dirty_ = true;
    log_.error("rdma: context %u of step %s failed: %s", w.ctx.id, step_name(w.ctx).c_str(), why.c_str());
    // Its tasks see their control channel close: their calls fail with it.
    std::vector<int> fds;
    for (auto &[l, fd] : w.attached)
        fds.push_back(fd);
    w.attached.clear();
    for (int fd : fds)
        drop(fd, nullptr);
}

// ---- the switch -------------------------------------------------------------

bool Pool::halt(const std::set<uint32_t> &leaving, uint64_t seq, uint32_t quantum_us)
{
    for (uint32_t j : leaving)
        running_jobs_.erase(j);
    if (halting_)
        return true; // the switcher waits for the switch in progress
    bool wait = false;
    for (auto &[id, w] : windows_) {
        if (w->ctx.mode != PoolMode::swapped || w->failed || !leaving.count(w->ctx.job_id))
            continue;
        // Every node halts the context at every switch that stops its job,
        // whatever its state here (in the pool or not, released or not), so
        // that every task sends the same halt marks.  Every node sees the
        // same strobes, so the same epochs; they only increase (a new
        // machine manager counts its strobes from 1 again).
        w->epoch = std::max(w->epoch + 1, seq);
        w->halted_fds.clear();
        w->waiting.clear();
        w->halt_sent = std::chrono::steady_clock::now();
        for (auto &[l, fd] : w->attached) {
            auto c = clients_.find(fd);
            if (c != clients_.end() &&
                reply(*c->second, control::epoch_message(control::Type::halt, w->epoch)))
                w->waiting.insert(fd);
        }
        // Out of the pool here, nothing of the context is in flight towards
        // this node; but its tasks' halt marks are, towards the nodes where
        // it is resident.  The switch waits for them too: a task stopped
        // before it sent its marks would hold those nodes' pools (and every
        // other job's communication there) until its job runs again.
        if (w->resident)
            w->state = w->waiting.empty() ? Window::State::halted : Window::State::halting;
        wait = wait || !w->waiting.empty();
    }
    log_.debug("rdma: switch %llu: halting%s", static_cast<unsigned long long>(seq), wait ? ", waiting" : "");
    if (!wait)
        return false;
    // The switch waits for the halts, at most storm_pool_halt_wait: a halt
    // that takes longer (a peer node's tasks are stopped, starting up or
    // behind) finishes later, and the context swaps then.
    halting_ = true;
    // and at most half a quantum: the switches must keep pace with the
    // strobes, or they fall behind for good.
    uint64_t us = setup_.config.halt_wait_us;
    if (quantum_us)
        us = std::min<uint64_t>(us, quantum_us / 2);
    timeval tv = to_timeval(std::chrono::microseconds(us));
    evtimer_add(halt_timer_, &tv);
    return true;
}

void Pool::on_halted(Client &c, uint64_t epoch)
{
    auto it = windows_.find(c.ctx);
    if (it == windows_.end())
        return;
    Window &w = *it->second;
    if (epoch != w.epoch) {
        log_.verbose("rdma: context %u: rank %u halted at epoch %llu, not the current %llu", c.ctx, c.rank,
                     static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(w.epoch));
        return;
    }
    w.halted_fds.insert(c.fd);
    log_.debug("rdma: context %u: rank %u halted at %llu after %u us", c.ctx, c.rank,
               static_cast<unsigned long long>(epoch), micros_since(w.halt_sent));
    if (w.state == Window::State::running)
        release_task(w, c.fd); // it caught up with a release it could not take yet
    else
        halt_answered(w, c.fd);
}

// Task `fd` of `w` answered its halt, or left: true when that ended a wait
// (the window halted, or the switch went on).
bool Pool::halt_answered(Window &w, int fd)
{
    if (!w.waiting.erase(fd) || !w.waiting.empty())
        return false;
    if (w.state == Window::State::halting) {
        window_halted(w);
        return true;
    }
    // Out of the pool: its marks are on their way; the switch may stop its
    // job once no other halt keeps it waiting.
    if (w.state == Window::State::out && halting_ && !switch_waits()) {
        finish_halt();
        return true;
    }
    return false;
}

// Every local task of `w` answered its halt: nothing of the context is in
// flight towards this node.
void Pool::window_halted(Window &w)
{
    w.state = Window::State::halted;
    halt_us_.add(micros_since(w.halt_sent));
    stats_dirty_ = true;
    if (halting_) {
        if (!switch_waits())
            finish_halt();
        return;
    }
    // A halt that outlasted its switch.
    if (running_jobs_.count(w.ctx.job_id)) {
        release_window(w); // its job runs again already
    } else if (!running_task(w)) {
        swap_out_late(w);
    } else {
        wait_stopped(w);
    }
}

// `w` leaves the pool outside a switch (a halt that outlasted its switch, or
// tasks that stopped late): the running job's context comes in, and is
// released at once (its job runs already).
void Pool::swap_out_late(Window &w)
{
    stop_waiting(w);
    auto t0 = std::chrono::steady_clock::now();
    save_out(w);
    load_running();
    ++swaps_;
    swap_us_.add(micros_since(t0));
    stats_dirty_ = true;
    for (auto &[id, o] : windows_)
        if (o->resident && o->state == Window::State::halted && running_jobs_.count(o->ctx.job_id))
            release_window(*o);
}

void Pool::on_halt_timeout(int, short, void *arg)
{
    auto *self = static_cast<Pool *>(arg);
    if (self->halting_)
        self->finish_halt();
}

// Whether the switch in progress still waits for a halt: of a resident
// context, or the marks of one out of the pool.
bool Pool::switch_waits() const
{
    for (auto &[id, w] : windows_)
        if (w->state == Window::State::halting || (w->state == Window::State::out && !w->waiting.empty()))
            return true;
    return false;
}

void Pool::finish_halt()
{
    halting_ = false;
    for (auto &[id, w] : windows_)
        if (w->state == Window::State::out)
            w->waiting.clear(); // the switch no longer waits for their marks
    evtimer_del(halt_timer_);
    if (switcher_)
        switcher_->halted();
}

// The pool's accounting; the header's `resident` word turns 1 when the
// context first enters the pool (its tasks wait for it in their init) and
// stays 1: the window's pages are kept while the context is out.
void Pool::set_resident(Window &w, bool on)
{
    w.resident = on;
    if (on) {
        if (w.ctx.mode == PoolMode::swapped)
            resident_ = static_cast<int>(w.ctx.id);
        for (uint32_t l = 0; l < w.local_tasks; ++l) {
            auto *q = w.header(l);
            if (q->resident.exchange(1, std::memory_order_acq_rel) == 0)
                syscall(SYS_futex, &q->resident, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
        }
    } else if (resident_ == static_cast<int>(w.ctx.id)) {
        resident_ = -1;
    }
}

void Pool::save_out(Window &w)
{
    size_t packets = 0;
    for (uint32_t l = 0; l < w.local_tasks; ++l) {
        try {
            packets += save_share(w.header(l), w.share.bytes, setup_.config.packet_size, w.share.send_slots,
                                  w.share.recv_slots, !setup_.config.swap_full, w.backing[l]);
        } catch (const std::exception &e) {
            w.backing[l].clear();
            fail_context(w, std::string("cannot save its queues: ") + e.what());
        }
    }
    packets_saved_ += packets;
    // The window's pages stay: a task stopped inside its queues resumes on
    // them (the pool is accounted, not unmapped).
    set_resident(w, false);
    w.state = Window::State::out;
}

bool Pool::load_in(Window &w)
{
    if (w.failed || used_bytes() + w.bytes > setup_.config.pool_size)
        return false;
    for (uint32_t l = 0; l < w.local_tasks; ++l)
        if (!w.backing[l].empty())
            reload_share(w.header(l), w.share.bytes, w.backing[l]);
    for (auto &b : w.backing)
        std::string().swap(b);
    set_resident(w, true);
    w.state = Window::State::halted;
    return true;
}

// A resident swapped context, halted, whose job does not run: it leaves the
// pool as soon as its tasks are stopped.
bool Pool::leaves_pool(const Window &w) const
{
    return w.ctx.mode == PoolMode::swapped && w.resident && w.state == Window::State::halted &&
           !running_jobs_.count(w.ctx.job_id);
}

// The first attached task of `w` that has a thread not stopped, or null when
// every thread of every one is: then no application thread can be touching
// its queues while they are copied (the callers copy them in the same call
// of the loop, which is the thread that continues jobs).  A task the
// switcher has not found yet is not stopped: its context stays.
const Pool::Client *Pool::running_task(const Window &w) const
{
    for (const auto &[l, fd] : w.attached) {
        auto c = clients_.find(fd);
        if (c == clients_.end())
            continue;
        pid_t pid = c->second->pid;
        if (!(setup_.is_stopped ? setup_.is_stopped(pid) : threads_stopped(pid)))
            return c->second.get();
    }
    return nullptr;
}

// SIGSTOP takes effect asynchronously: `w`'s tasks are checked again on a
// timer, the loop going on meanwhile (gang strobes, other contexts), and
// `w` is swapped out from the timer once they are all stopped
// (on_stop_timer).  A wait in progress starts again (each switch waits at
// most kStopWait, as the agent did when it slept on its loop).
void Pool::wait_stopped(Window &w)
{
    if (!w.stop_timer) {
        w.pool = this;
        w.stop_timer = evtimer_new(base_, on_stop_timer, &w);
        if (!w.stop_timer) {
            log_.error("rdma: context %u: cannot watch its tasks stop: the context stays in the pool",
                       w.ctx.id);
            return;
        }
    }
    w.stop_until = std::chrono::steady_clock::now() + kStopWait;
    w.stop_delay_us = kStopCheckFirstUs;
    arm_stop_timer(w);
}

void Pool::arm_stop_timer(Window &w)
{
    // The next check, or the last one when the wait ends sooner.
    int64_t left =
        std::chrono::duration_cast<std::chrono::microseconds>(w.stop_until - std::chrono::steady_clock::now())
            .count();
    timeval tv{0, static_cast<suseconds_t>(std::clamp<int64_t>(left, 0, w.stop_delay_us))};
    if (evtimer_add(w.stop_timer, &tv) != 0) {
        w.stop_delay_us = 0;
        log_.error("rdma: context %u: cannot watch its tasks stop: the context stays in the pool", w.ctx.id);
    }
}

void Pool::stop_waiting(Window &w)
{
    if (w.stop_delay_us && w.stop_timer)
        evtimer_del(w.stop_timer);
    w.stop_delay_us = 0;
}

void Pool::on_stop_timer(int, short, void *arg)
{
    auto &w = *static_cast<Window *>(arg);
    w.pool->check_stopped(w);
}

void Pool::check_stopped(Window &w)
{
    if (!w.stop_delay_us)
        return;
    if (!leaves_pool(w)) {
        stop_waiting(w); // its job runs again, or it left the pool meanwhile
        return;
    }
    if (const Client *c = running_task(w)) {
        if (std::chrono::steady_clock::now() >= w.stop_until) {
            stop_waiting(w);
            log_.verbose("rdma: context %u: rank %u (pid %d) is not stopped: the context stays in the pool",
                         w.ctx.id, c->rank, c->pid);
            return;
        }
        w.stop_delay_us = std::min(w.stop_delay_us * 2, kStopCheckMaxUs);
        arm_stop_timer(w);
        return;
    }
    swap_out_late(w);
}

// The first waiting context of a running job comes into a free pool.
void Pool::load_running()
{
    if (resident_ >= 0)
        return;
    for (auto &[id, w] : windows_)
        if (w->ctx.mode == PoolMode::swapped && w->state == Window::State::out && !w->failed &&
            running_jobs_.count(w->ctx.job_id) && load_in(*w)) {
            w->state = Window::State::halted;
            return;
        }
}

void Pool::swap(const std::set<uint32_t> &, const std::set<uint32_t> &running, uint64_t)
{
    running_jobs_ = running;
    auto t0 = std::chrono::steady_clock::now();
    int before = resident_;
    // Out of the pool: every halted context whose job does not run now
    // (it left at this switch, or its halt finished after an earlier one).
    // Its tasks' threads not all stopped yet, it waits (wait_stopped()):
    // the switch goes on, and the context leaves the pool once they are.
    for (auto &[id, w] : windows_) {
        if (!leaves_pool(*w))
            continue;
        if (running_task(*w)) {
            wait_stopped(*w);
        } else {
            stop_waiting(*w);
            save_out(*w);
        }
    }
    load_running();
    if (resident_ != before) {
        ++swaps_;
        swap_us_.add(micros_since(t0));
        stats_dirty_ = true;
    }
    ++switches_;
}

void Pool::release_window(Window &w)
{
    w.state = Window::State::running;
    w.not_ready.clear();
    w.release_sent = std::chrono::steady_clock::now();
    // Only tasks halted at the epoch take its release; the others get it
    // when they answer their halt.
    for (int fd : std::set<int>(w.halted_fds))
        release_task(w, fd);
}

// release{e} carries the epoch of the halt it ends (1 at first).
void Pool::release_task(Window &w, int fd)
{
    auto c = clients_.find(fd);
    if (c != clients_.end() && reply(*c->second, control::epoch_message(control::Type::release, w.epoch)))
        w.not_ready.insert(fd);
}

bool Pool::follows(const std::set<uint32_t> &jobs) const
{
    return std::any_of(windows_.begin(), windows_.end(), [&jobs](const auto &w) {
        return w.second->ctx.mode == PoolMode::swapped && !w.second->failed && !w.second->attached.empty() &&
               jobs.count(w.second->ctx.job_id);
    });
}

void Pool::release(const std::set<uint32_t> &running, uint64_t)
{
    running_jobs_ = running;
    for (auto &[id, w] : windows_)
        if (w->ctx.mode == PoolMode::swapped && w->resident && w->state == Window::State::halted &&
            !w->failed && running.count(w->ctx.job_id))
            release_window(*w);
}

void Pool::on_ready(Client &c, uint64_t)
{
    auto it = windows_.find(c.ctx);
    if (it == windows_.end())
        return;
    Window &w = *it->second;
    if (w.not_ready.erase(c.fd) && w.not_ready.empty()) {
        release_us_.add(micros_since(w.release_sent));
        stats_dirty_ = true;
    }
}

// ---- statistics -------------------------------------------------------------

void Pool::on_stats_timer(int, short, void *arg)
{
    auto *self = static_cast<Pool *>(arg);
    if (self->stats_dirty_)
        self->write_stats();
}

void Pool::write_stats()
{
    stats_dirty_ = false;
    if (setup_.stats_path.empty())
        return;
    std::string s;
    auto line = [&](const char *k, uint64_t v) { s += std::string(k) + " " + std::to_string(v) + "\n"; };
    line("contexts", windows_.size());
    s += "resident " + (resident_ < 0 ? std::string("none") : std::to_string(resident_)) + "\n";
    line("used_bytes", used_bytes());
    line("pool_bytes", setup_.config.pool_size);
    line("switches", switches_);
    line("swaps", swaps_);
    line("packets_saved", packets_saved_);
    line("failures", failures_);
    for (auto [name, st] : {std::pair<const char *, Stage *>{"halt", &halt_us_},
                            {"swap", &swap_us_},
                            {"release", &release_us_}}) {
        std::vector<uint32_t> v = st->us;
        line((std::string(name) + "_count").c_str(), v.size());
        line((std::string(name) + "_p50_us").c_str(), v.empty() ? 0 : percentile(v, 0.5));
        line((std::string(name) + "_p99_us").c_str(), v.empty() ? 0 : percentile(v, 0.99));
    }
    if (!replace_file(setup_.stats_path, s, 0644, Spare::keep))
        log_.verbose("rdma: cannot write %s: %s", setup_.stats_path.c_str(), std::strerror(errno));
}

} // namespace storm::rdma
