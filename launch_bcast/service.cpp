#include "launch_bcast/service.hpp"

#include <cinttypes>
#include <stdexcept>

#include <event2/event.h>

#include "launch_bcast/receiver.hpp"
#include "lib/common/timeval.hpp"

namespace storm::bcast {

using std::chrono::milliseconds;

struct Service::Session {
    std::weak_ptr<net::Connection> conn;
    uint64_t sid = 0;
    Grant grant;
    std::string dest;
    uint64_t total = 0;
    net::RangeSet set;
    unsigned fanout = 1;
    milliseconds timeout{10000};
    enum State { opening, open, closing, finished } state = opening;
    uint64_t next_seq = 0;
    unsigned inflight = 0;
    // Bytes of chunks forwarded and not yet confirmed by every node: past
    // kHeadWindowBytes the client's connection is not read until they fall
    // to half of it, whatever window the client keeps.
    uint64_t inflight_bytes = 0;
    bool paused_once = false; // logged
    // Chunks the client sent while the nodes were opening: forwarded, in
    // order, once they all opened; dropped if one could not.
    std::vector<net::DataRef> early;
    uint64_t early_bytes = 0;
    bool close_asked = false;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    // the last answer sent to the client, and whether it was the final one
    std::chrono::steady_clock::time_point replied = start;
    bool final_sent = false;
    uint64_t answered = 0; // chunks confirmed by every node
    // the last "alive" sent to the nodes (protocol.hpp)
    std::chrono::steady_clock::time_point told = start;
};

Service::Service(event_base *base, prim::Engine &engine, Authorizer &auth, ServiceConfig cfg, Logger log)
    : engine_(engine), auth_(auth), cfg_(std::move(cfg)), log_(std::move(log))
{
    keepalive_ = event_new(
        base, -1, EV_PERSIST,
        [](evutil_socket_t, short, void *arg) { static_cast<Service *>(arg)->keepalive(); }, this);
    if (!keepalive_)
        throw std::runtime_error("cannot create the broadcast service's timer");
}

Service::~Service()
{
    *alive_ = false;
    if (keepalive_)
        event_free(keepalive_);
}

void Service::keepalive()
{
    if (sessions_.empty()) {
        event_del(keepalive_); // until the next session opens
        return;
    }
    auto now = std::chrono::steady_clock::now();
    for (auto &kv : sessions_) {
        auto &s = kv.second;
        // within max(timeout, 0.5 s) + 0.25 s of the last answer: under a
        // client's deadline of max(3 timeouts, 1 s)
        if (!s->final_sent && now - s->replied >= std::max(s->timeout, milliseconds(500)))
            send_reply(s, Reply{Reply::working, s->answered, ""});
        // Every timeout to every node, however long a wait on some of them
        // lasts: a node gives up on a silent head after three (receiver.cpp).
        if (s->state != Session::finished && now - s->told >= s->timeout) {
            s->told = now;
            try {
                engine_.xfer_unacked(s->set, event_name("alive", s->sid), "");
            } catch (const std::exception &e) {
                log_.error("broadcast %016" PRIx64 ": cannot tell the nodes it is alive: %s", s->sid,
                           e.what());
            }
        }
    }
}

std::string Service::name(uint32_t i) const
{
    return i < cfg_.names.size() ? cfg_.names[i] : "node " + std::to_string(i);
}

std::string Service::describe(const prim::XferResult &r) const
{
    // The nodes whose reason reached the head first (the tree carries the
    // first prim::kMaxReasons), then the others: a node without one failed
    // with the node serving it, or its reason was one too many (its slurmd
    // logs it).
    std::string out;
    unsigned listed = 0;
    for (const auto &[n, why] : r.reasons)
        if (r.failed.contains(n) && listed < 32) {
            out += "\n  " + name(n) + ": " + why;
            ++listed;
        }
    bool capped = r.reasons.size() >= prim::kMaxReasons;
    for (uint32_t i = 0; i < r.failed.size() && listed < 32; ++i) {
        uint32_t n = r.failed.nth(i);
        if (r.reasons.count(n))
            continue;
        out += "\n  " + name(n) + ": " +
               (capped ? "failed with the node serving it, or for a reason of its own that its slurmd logged"
                       : "failed with the node serving it");
        ++listed;
    }
    if (r.failed.size() > listed)
        out += "\n  and " + std::to_string(r.failed.size() - listed) + " more nodes" +
               (capped ? " (the head keeps the first " + std::to_string(prim::kMaxReasons) +
                             " reasons; each node's slurmd logs its own)"
                       : "");
    return std::to_string(r.failed.size()) + " of " + "the job's nodes failed:" + out;
}

void Service::send_reply(const std::shared_ptr<Session> &s, const Reply &r)
{
    s->replied = std::chrono::steady_clock::now();
    if (r.kind == Reply::committed || r.kind == Reply::failed)
        s->final_sent = true;
    auto c = s->conn.lock();
    if (c && !c->closed())
        c->send(kReplyFrame, s->sid, r.encode());
}

void Service::on_frame(net::Connection &c, const net::FrameHeader &h, std::string_view payload)
{
    if (h.type != kOpenFrame && h.type != kDataFrame && h.type != kCloseFrame)
        throw net::FrameError("not a broadcast request");
    auto it = sessions_.find(&c);
    if (h.type == kOpenFrame) {
        if (it != sessions_.end() && it->second->state != Session::finished)
            throw net::FrameError("a broadcast is already open on this connection");
        open(c, payload);
        return;
    }
    if (it == sessions_.end())
        throw net::FrameError("no broadcast open on this connection");
    auto s = it->second;
    if (s->state == Session::finished)
        return; // it failed: the client was told; chunks still in flight are dropped
    if ((s->state != Session::open && s->state != Session::opening) || s->close_asked)
        throw net::FrameError("broadcast frame out of sequence");
    if (h.type != kDataFrame)
        return close(s);
    net::DataRef ref{c.current_payload(), payload.data(), payload.size()};
    if (s->state == Session::opening) {
        s->early_bytes += payload.size();
        if (s->early_bytes > 2 * kEarlyBytes)
            throw net::FrameError("more than " + std::to_string(2 * kEarlyBytes >> 20) +
                                  " MiB of chunks before the nodes opened");
        s->early.push_back(std::move(ref));
        early_chunks_++;
    } else {
        data(s, std::move(ref));
    }
}

void Service::open(net::Connection &c, std::string_view payload)
{
    auto s = std::make_shared<Session>();
    s->conn = c.shared_from_this();
    s->sid = prim::Engine::new_origin();
    sessions_[&c] = s;
    arm_timer(keepalive_, milliseconds(250));
    auto refuse = [&](const std::string &why) {
        log_.error("broadcast request from uid %u refused: %s", static_cast<unsigned>(c.peer_uid()),
                   why.c_str());
        s->state = Session::finished;
        send_reply(s, Reply{Reply::failed, 0, why});
    };
    OpenRequest req;
    try {
        req = OpenRequest::decode(payload);
        s->grant = auth_.authorize(req.cred, net::Patience::loop);
    } catch (const net::AuthError &e) {
        return refuse(std::string("credential refused: ") + e.what());
    } catch (const std::exception &e) {
        return refuse(std::string("malformed request: ") + e.what());
    }
    if (!c.trusted() && s->grant.uid != c.peer_uid())
        return refuse("the credential is uid " + std::to_string(s->grant.uid) + "'s, not uid " +
                      std::to_string(c.peer_uid()) + "'s");
    if (!s->grant.nodes.contains(cfg_.self))
        return refuse(name(cfg_.self) + " is not a node of job " + std::to_string(s->grant.job_id));
    s->set = s->grant.nodes;
    s->dest = req.dest;
    s->total = req.total_bytes();
    s->fanout = req.fanout;
    s->timeout = milliseconds(req.timeout_ms);
    log_.info("broadcast %016" PRIx64 ": %s (%zu entries, %" PRIu64
              " bytes) for job %u of uid %u to %u nodes",
              s->sid, s->dest.c_str(), req.entries.size(), s->total, s->grant.job_id,
              static_cast<unsigned>(s->grant.uid), s->set.size());
    std::weak_ptr<bool> alive = alive_;
    net::DataRef ref{c.current_payload(), payload.data(), payload.size()};
    auto sent = std::chrono::steady_clock::now();
    engine_.send_chunk(s->set, cfg_.control_fanout, s->timeout, event_name("open", s->sid), s->sid, 0,
                       payload.size(), ref, [this, s, alive, sent](const prim::XferResult &r) {
                           if (alive.expired() || !*alive.lock() || s->state != Session::opening)
                               return;
                           if (!r.ok)
                               return fail_session(s, "cannot open " + s->dest + ": " + describe(r));
                           ready(s, kStaged, sent, "cannot open " + s->dest, [this, s] { opened(s); });
                       });
}

void Service::ready(const std::shared_ptr<Session> &s, int64_t value,
                    std::chrono::steady_clock::time_point sent, const std::string &what,
                    std::function<void()> then)
{
    // Answered within half a timeout of the request: no node answered for
    // progress alone (it waits that long after the request reached it),
    // so every node's work ended.
    if (std::chrono::steady_clock::now() - sent < s->timeout / 2)
        return then();
    std::weak_ptr<bool> alive = alive_;
    auto state = s->state;
    engine_.compare_and_write(
        s->set, var_prefix(s->sid) + "ready", prim::Relation::ge, value, std::nullopt,
        [this, s, value, what, then, alive, state](const prim::CawResult &c) {
            if (alive.expired() || !*alive.lock() || s->state != state)
                return;
            if (!c.ok) {
                prim::XferResult r;
                r.failed = c.failed;
                return fail_session(s, what + ": " + describe(r));
            }
            if (c.holds)
                return then();
            // Some node still works: ask every node again, which answers at
            // once if its work ended (or failed), else as it did.
            auto again = std::chrono::steady_clock::now();
            engine_.send_chunk(s->set, cfg_.control_fanout, s->timeout, event_name("wait", s->sid), s->sid, 0,
                               0, {},
                               [this, s, value, what, then, alive, state, again](const prim::XferResult &r) {
                                   if (alive.expired() || !*alive.lock() || s->state != state)
                                       return;
                                   if (!r.ok)
                                       return fail_session(s, what + ": " + describe(r));
                                   ready(s, value, again, what, then);
                               });
        },
        s->timeout);
}

void Service::opened(const std::shared_ptr<Session> &s)
{
    s->state = Session::open;
    send_reply(s, Reply{Reply::opened, s->sid, ""});
    auto early = std::move(s->early);
    s->early.clear();
    for (auto &ref : early)
        if (s->state == Session::open) // not failed meanwhile
            data(s, std::move(ref));
    if (s->close_asked && s->inflight == 0)
        commit(s);
}

void Service::data(const std::shared_ptr<Session> &s, net::DataRef ref)
{
    uint64_t seq = s->next_seq++;
    uint64_t len = ref.len;
    s->inflight++;
    s->inflight_bytes += len;
    if (s->inflight_bytes >= kHeadWindowBytes)
        if (auto c = s->conn.lock(); c && !c->reading_paused()) {
            c->pause_reading();
            ++paused_;
            if (!s->paused_once)
                log_.info("broadcast %016" PRIx64 ": the client is %" PRIu64
                          " MiB ahead of the nodes' confirmations: not reading it until the nodes catch up",
                          s->sid, s->inflight_bytes >> 20);
            s->paused_once = true;
        }
    std::weak_ptr<bool> alive = alive_;
    engine_.send_chunk(s->set, s->fanout, s->timeout, event_name("data", s->sid), s->sid, seq, 0, ref,
                       [this, s, seq, len, alive](const prim::XferResult &r) {
                           if (alive.expired() || !*alive.lock())
                               return;
                           s->inflight--;
                           s->inflight_bytes -= len;
                           if (s->inflight_bytes <= kHeadWindowBytes / 2)
                               if (auto c = s->conn.lock(); c && c->reading_paused())
                                   c->resume_reading();
                           if (s->state == Session::finished)
                               return;
                           if (!r.ok)
                               return fail_session(s, "transfer of " + s->dest + " failed: " + describe(r));
                           s->answered++;
                           send_reply(s, Reply{Reply::done, seq, ""});
                           if (s->close_asked && s->inflight == 0)
                               commit(s);
                       });
}

void Service::close(const std::shared_ptr<Session> &s)
{
    s->close_asked = true;
    if (s->state == Session::open && s->inflight == 0)
        commit(s); // while opening: once the nodes opened (open())
}

void Service::commit(const std::shared_ptr<Session> &s)
{
    s->state = Session::closing;
    std::weak_ptr<bool> alive = alive_;
    std::string prefix = var_prefix(s->sid);
    engine_.compare_and_write(
        s->set, prefix + "complete", prim::Relation::eq, 1, prim::Engine::Write{prefix + "commit", 1},
        [this, s, alive](const prim::CawResult &c) {
            if (alive.expired() || !*alive.lock() || s->state != Session::closing)
                return;
            if (!c.ok || !c.written) {
                prim::XferResult r;
                r.failed = c.failed;
                return fail_session(s, c.ok ? "not every node holds every byte of " + s->dest
                                            : "cannot confirm " + s->dest + ": " + describe(r));
            }
            auto sent = std::chrono::steady_clock::now();
            engine_.send_chunk(s->set, cfg_.control_fanout, s->timeout, event_name("commit", s->sid), s->sid,
                               0, 0, {}, [this, s, alive, sent](const prim::XferResult &r) {
                                   if (alive.expired() || !*alive.lock() || s->state != Session::closing)
                                       return;
                                   std::string what = "cannot put " + s->dest + " in place";
                                   if (!r.ok)
                                       return fail_session(s, what + ": " + describe(r));
                                   ready(s, kPlaced, sent, what, [this, s] { finish(s); });
                               });
        },
        s->timeout);
}

// Every node committed: each removes what the broadcast replaced, and its
// launch gate lets the step's tasks start.  A node that fails now (it died
// since it committed) is aborted like any other failure: the nodes that
// did not finish yet put back what they replaced.
void Service::finish(const std::shared_ptr<Session> &s)
{
    std::weak_ptr<bool> alive = alive_;
    engine_.send_chunk(
        s->set, cfg_.control_fanout, s->timeout, event_name("finish", s->sid), s->sid, 0, 0, {},
        [this, s, alive](const prim::XferResult &r) {
            if (alive.expired() || !*alive.lock() || s->state != Session::closing)
                return;
            if (!r.ok)
                return fail_session(s, "cannot finish " + s->dest + ": " + describe(r));
            s->state = Session::finished;
            auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - s->start).count();
            log_.info("broadcast %016" PRIx64 ": %s on all %u nodes in %.3f s", s->sid, s->dest.c_str(),
                      s->set.size(), secs);
            send_reply(s, Reply{Reply::committed, s->sid, ""});
        });
}

void Service::fail_session(const std::shared_ptr<Session> &s, const std::string &why)
{
    if (s->state == Session::finished)
        return;
    s->state = Session::finished;
    s->early.clear();
    if (auto c = s->conn.lock(); c && c->reading_paused())
        c->resume_reading(); // what the client still sends is dropped
    log_.error("broadcast %016" PRIx64 " for job %u: %s", s->sid, s->grant.job_id, why.c_str());
    // The client hears of the failure once every node removed its part
    // (or could not be reached): when the user's command returns, no node
    // holds anything of this broadcast.
    uint64_t sid = s->sid;
    std::weak_ptr<bool> alive = alive_;
    engine_.send_chunk(s->set, cfg_.control_fanout, s->timeout, event_name("abort", sid), sid, 0, 0, {},
                       [this, s, why, alive](const prim::XferResult &r) {
                           if (alive.expired() || !*alive.lock())
                               return;
                           if (!r.ok)
                               log_.error("broadcast %016" PRIx64
                                          ": abort did not reach nodes %s (they remove "
                                          "their part when it stalls, or when their slurmd restarts)",
                                          s->sid, r.failed.str().c_str());
                           send_reply(s, Reply{Reply::failed, s->sid, why});
                       });
}

void Service::on_closed(net::Connection &c)
{
    auto it = sessions_.find(&c);
    if (it == sessions_.end())
        return;
    auto s = it->second;
    sessions_.erase(it);
    if (s->state != Session::finished)
        fail_session(s, "the client went away before the broadcast was committed");
}

} // namespace storm::bcast
