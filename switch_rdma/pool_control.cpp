// The buffer pool's control socket (control.hpp): its connections, and the
// dispatch of each request to its handler.  slurmstepd's uids (PoolSetup::
// trusted) open and close contexts; any peer may attach (attach() checks
// it); halted, ready and failed come from attached tasks only.  Anything
// else, and any malformed message, closes the connection.
#include "switch_rdma/pool.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/net/fd_passing.hpp"
#include "switch_rdma/pool_internal.hpp"

namespace storm::rdma {

using pool_detail::step_name;

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

} // namespace storm::rdma
