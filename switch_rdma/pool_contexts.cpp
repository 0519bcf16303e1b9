// A communication context's life cycle in the buffer pool: open (its window
// made, mapped and its queue headers set, or opened without one when its
// tasks cannot communicate), a task's attach (checked against the
// context's user and this node's ranks; the window pinned at the first),
// failure (its tasks' channels closed), and close (the window unmapped and
// its memfd closed; the tasks keep their own mappings until they unmap
// them).  Every window enters and leaves Pool::windows_ through
// add_window() / erase_window(), which keep its job's coscheduling
// admission.  The handlers of slurmstepd's open and close and of a task's
// failed report are here too; who may send them is pool_control.cpp's.
#include "switch_rdma/pool.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "switch_rdma/pool_internal.hpp"
#include "switch_rdma/window.hpp"

namespace storm::rdma {

using pool_detail::step_name;

void Pool::on_open(Client &c, const Context &ctx)
{
    // A step starts: the switcher finds its tasks within about
    // 50 ms rather than at its next scan (up to a second away).
    if (switcher_)
        switcher_->rescan();
    open_context(c, ctx);
}

void Pool::on_close(Client &c, const control::Ids &ids)
{
    auto w = windows_.find(ids.id);
    if (w == windows_.end() || w->second->ctx.job_id != ids.job || w->second->ctx.step_id != ids.step) {
        reply(c,
              control::error("no context " + std::to_string(ids.id) + " of step " + std::to_string(ids.job) +
                             "." + std::to_string(ids.step) + " is open on this node"));
        return;
    }
    close_context(ids.id, "its step ended");
    reply(c, control::ok());
}

void Pool::on_failed(Client &c, const std::string &why)
{
    auto w = windows_.find(c.ctx);
    if (w != windows_.end())
        fail_context(*w->second, "rank " + std::to_string(c.rank) + " reports: " + why);
}

void Pool::open_context(Client &c, const Context &ctx)
{
    std::string step = step_name(ctx);
    auto refuse = [&](const std::string &why) {
        log_.error("cannot open context %u of step %s: %s", ctx.id, step.c_str(), why.c_str());
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
        log_.info("context %u reused by step %s: closing step %s's", ctx.id, step.c_str(),
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
        log_.verbose("context %u of step %s cannot communicate: %s", ctx.id, step.c_str(),
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
    log_.info("opened context %u of step %s (uid %u): %s%s, %u local tasks of %u, %llu bytes, %u send and "
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
        setup_.admissions->open(w->ctx.job_id, w->ctx.uid);
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
    log_.verbose("closed context %u of step %s: %s", id, step_name(w.ctx).c_str(), why);
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
        log_.error("refused to attach pid %d (uid %u) to context %u as rank %u: %s", c.pid, c.uid, ids.id,
                   ids.rank, why.c_str());
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
        w.pinned = true;
        start_pinning(w);
    }
    if (!reply(c, control::attached(a), w.memfd))
        return refuse(std::string("cannot answer: ") + std::strerror(errno));
    c.task = true;
    server_.settled(c.fd); // a task: long-lived, however idle
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
    log_.verbose("rank %u (pid %d) attached to context %u of step %s", ids.rank, c.pid, ids.id,
                 step_name(w.ctx).c_str());
}

// A window is locked kPinSlice at a time, each slice from a timer of its
// own on the loop, so that gang strobes, switches and other tasks' requests
// run between slices: locking faults in every page of the window, which
// one mlock() did in one pass of the loop (on a loaded 2-core machine:
// 64 MiB 218 ms, 256 MiB 0.27 to 1 s, 1 GiB, storm_pool_size's largest,
// 2.8 s; test_pool's test_pinning_in_slices: its longest pass is now 9 to
// 24 ms).  The task is answered first: it does not need its pages locked
// to start, and the pages it touches meanwhile it faults in itself.
namespace {
constexpr uint64_t kPinSlice = 4 << 20;
}

void Pool::start_pinning(Window &w)
{
    w.pool = this;
    w.pin_timer = evtimer_new(base_, on_pin_timer, &w);
    if (!w.pin_timer) {
        log_.verbose("context %u: cannot pin its window: no timer", w.ctx.id);
        return;
    }
    timeval now{0, 0};
    evtimer_add(w.pin_timer, &now);
}

void Pool::on_pin_timer(int, short, void *arg)
{
    auto &w = *static_cast<Window *>(arg);
    w.pool->pin_some(w);
}

void Pool::pin_some(Window &w)
{
    uint64_t n = std::min(kPinSlice, w.bytes - w.pinned_bytes);
    if (mlock(w.base + w.pinned_bytes, n) != 0) {
        log_.verbose("context %u: cannot pin its window: %s", w.ctx.id, std::strerror(errno));
        return; // the rest stays unpinned; the timer is freed with the window
    }
    w.pinned_bytes += n;
    if (w.pinned_bytes < w.bytes) {
        timeval now{0, 0};
        evtimer_add(w.pin_timer, &now); // the next slice after what is ready now
    }
}

void Pool::fail_context(Window &w, const std::string &why)
{
    if (w.failed)
        return;
    w.failed = true;
    ++failures_;
    stats_dirty_ = true;
    log_.error("context %u of step %s failed: %s", w.ctx.id, step_name(w.ctx).c_str(), why.c_str());
    // Its tasks see their control channel close: their calls fail with it.
    std::vector<int> fds;
    for (auto &[l, fd] : w.attached)
        fds.push_back(fd);
    w.attached.clear();
    for (int fd : fds)
        drop(fd, nullptr);
}

} // namespace storm::rdma
