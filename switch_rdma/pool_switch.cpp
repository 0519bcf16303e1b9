// The buffer pool's part in a gang switch (Pool's node::SwitchHook): halt /
// swap / release of the swapped contexts, as pool.hpp describes, with the
// tasks' answers (halted, ready), the halt's time limit, and the timer that
// waits for the leaving tasks' threads to stop before their queues are
// copied.  Divided contexts take no part: they stay in the pool.
#include "switch_rdma/pool.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <event2/event.h>

#include "lib/common/procs.hpp"
#include "lib/common/timeval.hpp"
#include "switch_rdma/pool_internal.hpp"
#include "switch_rdma/window.hpp"

namespace storm::rdma {

using pool_detail::micros_since;

namespace {

// A swap-out whose tasks' threads are not all stopped yet re-checks them
// on a timer: after 200 us, doubling up to 3.2 ms, for at most 100 ms.
constexpr uint32_t kStopCheckFirstUs = 200;
constexpr uint32_t kStopCheckMaxUs = 3200;
constexpr std::chrono::milliseconds kStopWait{100};

} // namespace

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
    log_.debug("switch %llu: halting%s", static_cast<unsigned long long>(seq), wait ? ", waiting" : "");
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
        log_.verbose("context %u: rank %u halted at epoch %llu, not the current %llu", c.ctx, c.rank,
                     static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(w.epoch));
        return;
    }
    w.halted_fds.insert(c.fd);
    log_.debug("context %u: rank %u halted at %llu after %u us", c.ctx, c.rank,
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
            log_.warning("context %u: cannot watch its tasks stop: the context stays in the pool", w.ctx.id);
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
        log_.warning("context %u: cannot watch its tasks stop: the context stays in the pool", w.ctx.id);
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
            log_.verbose("context %u: rank %u (pid %d) is not stopped: the context stays in the pool",
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

} // namespace storm::rdma
