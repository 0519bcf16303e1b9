// The head of a broadcast: the agent a user's client talks to.
//
// It checks the client's request (the credential must be genuine, the
// job's own and name this node; a user may only broadcast a credential of
// their own), then drives the transfer over the job's nodes with the
// engine: the open request and every chunk as XFER-AND-SIGNAL (the client's
// bytes forwarded by reference, never copied; chunks that come while the
// nodes open are held here until they all did), answering the client chunk
// by chunk so that it keeps a window in flight (global flow control: a
// chunk counts as done only when every node wrote it); on close, a
// COMPARE-AND-WRITE that every node holds every byte, then the commit
// (each node swaps the files into place, keeping what they replace), then,
// once every node committed, the finish (each node drops what was
// replaced and lets the step's tasks start).  Anything failing -- a node's
// refusal, a node dying, the client going away, before the finish --
// aborts the broadcast on every node (a node that committed puts back what
// it replaced) and tells the client which nodes failed and why.  Until
// it sent its last answer it tells a client it has said nothing to for
// the hop timeout that it is still at work (Reply::working): the client's
// silence deadline is then one on the head alone, and the head's own
// per-hop deadlines, which grow with the levels of the tree, name the
// nodes that failed a broadcast.  It likewise tells every node it is
// alive each timeout, and waits for the nodes' staging and commit as long
// as each progresses (protocol.hpp, "Between the head and the nodes").
//
// Threading: the agent's loop thread only.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launch_bcast/authorizer.hpp"
#include "launch_bcast/protocol.hpp"
#include "lib/common/log.hpp"
#include "lib/prim/engine.hpp"

struct event;
struct event_base;

namespace storm::bcast {

struct ServiceConfig {
    uint32_t self = 0;
    std::vector<std::string> names; // node names, by index (for messages)
    unsigned control_fanout = 8;    // tree of open, commit, finish and abort
};

class Service {
public:
    // `base`: the engine's loop (for the keepalive timer).
    Service(event_base *base, prim::Engine &engine, Authorizer &auth, ServiceConfig cfg, Logger log);
    ~Service();
    Service(const Service &) = delete;
    Service &operator=(const Service &) = delete;

    // The engine's service-frame handlers (Engine::on_service_frames).
    // Throws net::FrameError (which closes the connection) for a frame that
    // is not a request (kOpenFrame, kDataFrame, kCloseFrame) or makes no
    // sense on this connection.
    void on_frame(net::Connection &c, const net::FrameHeader &h, std::string_view payload);
    void on_closed(net::Connection &c);

    size_t sessions() const noexcept { return sessions_.size(); }
    // Chunks that came while their broadcast's nodes were opening, held
    // until they all had (since the start).
    uint64_t early_chunks() const noexcept { return early_chunks_; }
    // Times a client's connection was paused at kHeadWindowBytes.
    uint64_t paused() const noexcept { return paused_; }

private:
    struct Session;
    void open(net::Connection &c, std::string_view payload);
    // Every node's "ready" is at least `value` (receiver.hpp): then(), else
    // the session fails with `what` and the nodes that did.  `sent`: when
    // the request whose answers just came (open, commit) left.
    void ready(const std::shared_ptr<Session> &s, int64_t value, std::chrono::steady_clock::time_point sent,
               const std::string &what, std::function<void()> then);
    void opened(const std::shared_ptr<Session> &s); // every node staged
    void data(const std::shared_ptr<Session> &s, net::DataRef chunk);
    void close(const std::shared_ptr<Session> &s);
    void commit(const std::shared_ptr<Session> &s);
    void finish(const std::shared_ptr<Session> &s);
    void fail_session(const std::shared_ptr<Session> &s, const std::string &why);
    void send_reply(const std::shared_ptr<Session> &s, const Reply &r);
    std::string describe(const prim::XferResult &r) const;
    std::string name(uint32_t i) const;
    void keepalive();

    prim::Engine &engine_;
    Authorizer &auth_;
    ServiceConfig cfg_;
    Logger log_;
    std::map<const net::Connection *, std::shared_ptr<Session>> sessions_;
    uint64_t early_chunks_ = 0;
    uint64_t paused_ = 0;
    // Every 0.25 s while a session is here (Reply::working to silent
    // sessions); off on an idle node (no wakeups).
    event *keepalive_ = nullptr;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace storm::bcast
