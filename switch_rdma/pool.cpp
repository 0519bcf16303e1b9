// The buffer pool's construction, start and end, and its accounting (which
// windows hold the pool); the rest is split by concern:
//   pool_control.cpp   the control socket: connections, requests and who
//                      may send each
//   pool_contexts.cpp  a context's life cycle: open, attach, fail, close
//   pool_switch.cpp    halt / swap / release at gang switches
//   pool_stats.cpp     the statistics file
// pool_internal.hpp holds what they share (Pool::Client, Pool::Window).
#include "switch_rdma/pool.hpp"

#include <climits>
#include <linux/futex.h>
#include <stdexcept>
#include <sys/syscall.h>
#include <unistd.h>

#include <event2/event.h>

#include "switch_rdma/pool_internal.hpp"

namespace storm::rdma {

Pool::Pool(event_base *base, PoolSetup setup, Logger log)
    : base_(base), setup_(std::move(setup)), log_(log.child("rdma")),
      server_(base, setup_.socket_path, log, "rdma", "control socket",
              [this](int fd, const ucred &cred) { on_client(fd, cred); })
{
    // Tasks of every user attach here: each user's connections are bounded.
    server_.limit_per_uid(net::UnixServer::kDefaultPerUid, setup_.trusted);
    // A connection is established by its first request from slurmstepd,
    // or by its attach as a task (which may then idle as long as its task
    // lives); anything else is closed after the deadline.
    server_.first_request_within(net::UnixServer::kDefaultFirstRequest,
                                 [this](int fd) { drop(fd, nullptr); });
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
    log_.verbose("pool of %llu bytes, packets of %u bytes, control socket %s",
                 static_cast<unsigned long long>(setup_.config.pool_size), setup_.config.packet_size,
                 setup_.socket_path.c_str());
}

// ---- accounting -------------------------------------------------------------

uint64_t Pool::used_bytes() const noexcept
{
    uint64_t used = 0;
    for (const auto &[id, w] : windows_)
        if (w->ctx.mode == PoolMode::divided || w->resident)
            used += w->bytes;
    return used;
}

int Pool::resident_context() const noexcept { return resident_; }

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

} // namespace storm::rdma
