// The buffer pool's control socket (control.hpp): its connections, and the
// dispatch of each request to its handler after checking who sent it.
//
// Who may send what is declared once, in routes_ (flux-core's modules list
// their handlers with their roles the same way), and checked in one place,
// handle():
//  - slurmstepd: open and close, from a trusted uid (PoolSetup::trusted:
//    root, SlurmdUser).  Another uid is refused after its request is read:
//    one error line "refused to <open|close> context <id> for pid <pid> of
//    uid <uid>: only slurmstepd may" and the error reply "only slurmstepd
//    may <open|close> a communication context"; the connection stays.
//  - user: attach, from anyone; attach() checks the task's user against the
//    context's (or root), its rank on this node, and that it attaches once.
//  - task: halted, ready, failed, on a connection attached as a task only;
//    on any other the connection is dropped as an "unexpected control
//    message" before the body is read.
// A connection must be established within the control socket's deadline
// (net::UnixServer::kDefaultFirstRequest of its accept): by a request of
// slurmstepd's, or by a task's attach.  One that did neither (idle, refused,
// or a user's refused open) is closed then; an established one is never
// cut for being idle (a task's connection lives as long as the task).
// Any other type is unexpected too; a malformed message (or a handler that
// throws) closes the connection with one error line.
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

// Who may send a request (see above).
enum class Pool::Sender { slurmstepd, user, task };

// A request's fields, as its type's reader decodes them.
struct Pool::Request {
    uint32_t id = 0;    // the context it names (open, close, attach), for a refusal
    Context ctx;        // open
    control::Ids ids{}; // close, attach
    uint64_t epoch = 0; // halted, ready
    std::string reason; // failed

    static Request of_context(Context ctx)
    {
        Request q;
        q.id = ctx.id;
        q.ctx = std::move(ctx);
        return q;
    }
    static Request of_ids(const control::Ids &ids)
    {
        Request q;
        q.id = ids.id;
        q.ids = ids;
        return q;
    }
    static Request of_epoch(uint64_t epoch)
    {
        Request q;
        q.epoch = epoch;
        return q;
    }
    static Request of_reason(std::string reason)
    {
        Request q;
        q.reason = std::move(reason);
        return q;
    }
};

struct Pool::Route {
    control::Type type;
    Sender sender;
    const char *verb; // what a refused sender asked for ("only slurmstepd may <verb> ...")
    Request (*read)(net::Reader &r);
    void (*handle)(Pool &p, Client &c, const Request &q);
};

const Pool::Route Pool::routes_[] = {
    {control::Type::open, Sender::slurmstepd, "open",
     [](net::Reader &r) { return Request::of_context(control::read_open(r)); },
     [](Pool &p, Client &c, const Request &q) { p.on_open(c, q.ctx); }},
    {control::Type::close, Sender::slurmstepd, "close",
     [](net::Reader &r) { return Request::of_ids(control::read_close(r)); },
     [](Pool &p, Client &c, const Request &q) { p.on_close(c, q.ids); }},
    {control::Type::attach, Sender::user, "attach",
     [](net::Reader &r) { return Request::of_ids(control::read_attach(r)); },
     [](Pool &p, Client &c, const Request &q) { p.attach(c, q.ids); }},
    {control::Type::halted, Sender::task, "report halted",
     [](net::Reader &r) { return Request::of_epoch(control::read_epoch(r)); },
     [](Pool &p, Client &c, const Request &q) { p.on_halted(c, q.epoch); }},
    {control::Type::ready, Sender::task, "report ready",
     [](net::Reader &r) { return Request::of_epoch(control::read_epoch(r)); },
     [](Pool &p, Client &c, const Request &q) { p.on_ready(c, q.epoch); }},
    {control::Type::failed, Sender::task, "report failure",
     [](net::Reader &r) { return Request::of_reason(control::read_reason(r)); },
     [](Pool &p, Client &c, const Request &q) { p.on_failed(c, q.reason); }},
};

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
                log_.verbose("context %u (step %s): rank %u detached: %s", c.ctx,
                             step_name(w->second->ctx).c_str(), c.rank, why);
        }
    } else if (why) {
        log_.error("closed a control connection of pid %d (uid %u): %s", c.pid, c.uid, why);
    }
    if (c.ev)
        event_free(c.ev);
    server_.settled(fd);
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
    try {
        control::Header h = control::header(r);
        auto route = std::find_if(std::begin(routes_), std::end(routes_),
                                  [&h](const Route &rt) { return rt.type == h.type; });
        if (route == std::end(routes_) || (route->sender == Sender::task && !c.task)) {
            drop(c.fd, "unexpected control message");
            return;
        }
        Request q = route->read(r);
        if (route->sender == Sender::slurmstepd &&
            std::find(setup_.trusted.begin(), setup_.trusted.end(), c.uid) == setup_.trusted.end()) {
            log_.error("refused to %s context %u for pid %d of uid %u: only slurmstepd may", route->verb,
                       q.id, c.pid, c.uid);
            reply(c, control::error(std::string("only slurmstepd may ") + route->verb +
                                    " a communication context"));
            return;
        }
        if (route->sender == Sender::slurmstepd)
            server_.settled(c.fd); // slurmstepd's request: the peer is known
        route->handle(*this, c, q);
    } catch (const std::exception &e) {
        log_.error("malformed control message from pid %d (uid %u): %s", c.pid, c.uid, e.what());
        drop(c.fd, nullptr);
    }
}

} // namespace storm::rdma
