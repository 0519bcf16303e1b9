// STORM's primitives between node agents (seed 000, section 2.4):
//
//   XFER-AND-SIGNAL(set, data, remote event, local event)
//   TEST-EVENT(event, block)
//   COMPARE-AND-WRITE(set, variable, relation, value [, write variable, value])
//
// One Engine runs in each node agent, on the agent's libevent loop, and in
// any initiator (slurmctld, srun, a tool), which need not be a node.  Nodes
// are indices into a node table that every party holds in the same order
// (Slurm's node table); a set of nodes travels as a RangeSet.  An operation
// goes to the first member of its set, which applies it, forwards it to the
// roots of up to `fanout` slices of the rest (split_children), collects
// their replies and answers upwards: O(fanout) work per hop, depth about
// log_fanout(N).  Connections between agents are persistent and
// authenticated once (Connection).
//
// The initiator chooses the fanout of each operation and it travels in the
// frames: small operations use a wide tree (few hops), transfers of many
// chunks a narrow one (each node's link carries few copies) -- fanout 1 is
// a pipeline through every node.
//
// XFER-AND-SIGNAL cuts data into chunks that stream down the tree, at most
// `window` chunks in flight per transfer (global flow control: a chunk
// leaves the initiator only when an earlier one was acknowledged by the
// whole set), so every link of the tree is busy at once on large transfers.
// A node signals the remote event when it holds every byte.
//
// Where the network carries multicast (EngineConfig::mcast), the node that
// heads the set (of at least half of the node table) of a transfer of at
// least mcast.min_chunk bytes (or of one streamed chunk by chunk, of total
// 0: the broadcasts) sends each
// chunk once to the group, sealed with a per-chunk key, and sends down the
// tree only the chunk's announcement (xfer_mc: offset, key and tag).  Each
// node takes the bytes from multicast if they match the seal, else asks its
// parent for them (xfer_nack) after mcast.wait; the answers, the
// all-or-none reporting and the routing around dead nodes are the tree's,
// as without multicast.  Chunks of one transfer are applied in the order
// their announcements arrive.
// The local event (the completion callback) reports success only if every
// node of the set got every byte; otherwise it names the nodes that did not
// (a node that was unreachable, died or timed out, with the subtree it
// served if it died after forwarding).  A node that cannot be connected to
// is routed around: its slice is re-split among its own children.  It is
// tried again 0.25 s later if its daemon refused or closed the connection
// (down or restarting: the pause doubles while that goes on, up to the
// timeout), one timeout later after any other failure.
//
// COMPARE-AND-WRITE runs in two phases from the set's first member, which
// serialises the calls on that set: compare everywhere (the answers are
// and-ed up the tree); then, if the relation held on every node and a write
// was asked for, write everywhere.  Concurrent calls on the same set
// therefore leave every node with the same value.
//
// Threading: everything runs on the event_base's thread; callbacks are
// called from it.  Not thread safe.  That thread must block or ignore
// SIGPIPE (the node agent's thread blocks it), so that a write to a peer
// that died fails with EPIPE instead of killing the daemon.
//
// Sources, one concern each: engine.cpp (construction, listening,
// connections to peers, frame dispatch), tree.cpp (forwarding down the
// tree, answers up it, routing around dead agents), xfer.cpp
// (XFER-AND-SIGNAL and TEST-EVENT), xfer_mc.cpp (XFER-AND-SIGNAL by
// multicast), caw.cpp (COMPARE-AND-WRITE and the variables);
// engine_internal.hpp holds what several of them share.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <netinet/in.h>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/common/log.hpp"
#include "lib/net/authenticator.hpp"
#include "lib/net/connection.hpp"
#include "lib/net/mcast.hpp"
#include "lib/net/rangeset.hpp"

struct event_base;
struct evconnlistener;
struct event;

namespace storm::prim {

using net::RangeSet;

struct EngineConfig {
    static constexpr uint32_t kNotANode = UINT32_MAX;
    uint32_t self = kNotANode;                // this agent's index, or kNotANode for a pure initiator
    std::vector<sockaddr_in> nodes;           // the node table: index -> agent address
    unsigned fanout = 8;                      // tree of control operations and small transfers
    unsigned data_fanout = 2;                 // tree of transfers of more than one chunk
    size_t chunk_size = 64u << 10;            // XFER-AND-SIGNAL chunk
    unsigned window = 64;                     // chunks in flight per transfer
    std::chrono::milliseconds timeout{10000}; // per hop: an answer must come within this
    size_t max_event_bytes = 1u << 30;        // largest transfer a node accepts
    // Accepted connections that have not authenticated yet (no valid hello):
    // each is closed if its hello has not come within hello_timeout, and a
    // new one is refused at once while max_unauthenticated of them are open,
    // or max_unauthenticated_per_address from its address.  Refusals and
    // closings are logged once per 10 s with their counts.
    std::chrono::milliseconds hello_timeout{10000};
    unsigned max_unauthenticated = 256;
    unsigned max_unauthenticated_per_address = 32;
    // Threads for the munge calls of connections' handshakes
    // (net::AuthOffload): a slow munged then holds no loop.  0: on the loop.
    unsigned auth_threads = 4;
    // Multicast data path (lib/net/mcast.hpp), on an agent whose
    // mcast.port is set; an iface of 0.0.0.0 means this node's address.
    net::McastConfig mcast;
};

// What the multicast data path did on this node, also kept in the
// variables "mcast:sent", "mcast:received" and "mcast:repaired" that
// COMPARE-AND-WRITE can test.
struct McastCounters {
    uint64_t sent = 0;     // chunks this node multicast for sets it headed
    uint64_t received = 0; // announced chunks taken from multicast
    uint64_t repaired = 0; // announced chunks fetched from the parent instead
    uint64_t repairs_served = 0;
};

enum class Relation : uint8_t { ge = 1, lt = 2, eq = 3, ne = 4 };

// Longest event or variable name, in bytes (names have at least one).
constexpr size_t kMaxName = 255;

// Why nodes failed, as they said (a sink's error), by node index; at most
// kMaxReasons travel up the tree.
using Reasons = std::map<uint32_t, std::string>;
constexpr size_t kMaxReasons = 32;
constexpr size_t kMaxReason = 512;

struct XferResult {
    bool ok = false;
    RangeSet failed; // nodes that do not hold the data
    std::string error;
    Reasons reasons; // the failed nodes' own explanations, where they gave one
};

struct CawResult {
    bool ok = false;      // every node answered
    bool holds = false;   // the relation held on every node
    bool written = false; // the write was applied on every node
    RangeSet failed;      // nodes that did not answer
    std::string error;
};

// How an operation travels, in every frame of it: the fanout of its tree
// and how long each hop waits for its children's answers.
struct Route {
    uint8_t fanout;
    uint32_t timeout_ms; // 0: an unanswered transfer (Engine::xfer_unacked)
    bool unanswered() const { return timeout_ms == 0; }
    void encode(net::Writer &w) const
    {
        w.u8(fanout);
        w.u32(timeout_ms);
    }
    // Throws FrameError for a fanout outside 1-64 or a timeout beyond 1 h.
    static Route decode(net::Reader &r);
};

class Engine {
public:
    Engine(event_base *base, EngineConfig config, net::Authenticator &auth, Logger log);
    ~Engine();
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;

    // Binds and listens on this node's address (nodes[self]).  Throws
    // std::system_error if the port cannot be bound.
    void listen();

    // `timeout` (default: the engine's) bounds each hop's wait for answers.
    using XferDone = std::function<void(const XferResult &)>;
    void xfer_and_signal(const RangeSet &set, const std::string &remote_event, std::string data,
                         XferDone done, std::chrono::milliseconds timeout = {});

    // XFER-AND-SIGNAL of one chunk whose completion nobody waits for: no
    // answers travel back up the tree (half the messages and wake-ups of
    // xfer_and_signal, for strobes every few milliseconds), so nothing
    // reports failures; a caller that needs them (fault detection) sends an
    // answered transfer now and then.  Agents that cannot be connected to
    // are routed around as usual; one that dies after it was reached loses
    // what was on its way, with its subtree.  Throws std::invalid_argument
    // for data beyond one chunk.
    void xfer_unacked(const RangeSet &set, const std::string &event, std::string data);

    // One chunk of a transfer whose data the caller streams (the broadcast
    // service): [offset, offset + data.len) of `total` bytes of the
    // transfer `origin` of `event`.  `done` reports whether every node of
    // the set got it.  When this engine heads the set, it applies the chunk
    // locally too.  The caller keeps its own window of chunks in flight.
    void send_chunk(const RangeSet &set, unsigned fanout, std::chrono::milliseconds timeout,
                    const std::string &event, uint64_t origin, uint64_t offset, uint64_t total,
                    net::DataRef data, XferDone done);
    static uint64_t new_origin();

    using CawDone = std::function<void(const CawResult &)>;
    struct Write {
        std::string variable;
        int64_t value;
    };
    void compare_and_write(const RangeSet &set, const std::string &variable, Relation rel, int64_t value,
                           std::optional<Write> write, CawDone done, std::chrono::milliseconds timeout = {});

    // TEST-EVENT on this node: how many times `event` was signalled (the
    // number of completed transfers); the data of the last one in *data.
    uint64_t test_event(const std::string &event, std::string *data = nullptr) const;
    // Blocks (runs the loop) until test_event(event) > seen or the timeout;
    // for initiators and tests, never on an agent's loop thread callback.
    bool wait_event(const std::string &event, uint64_t seen, std::chrono::milliseconds timeout);
    // Runs the loop until done() or the timeout; false on timeout.
    bool run_until(const std::function<bool()> &done, std::chrono::milliseconds timeout);

    // Called on this node each time a remote event is signalled (after
    // test_event() counts it).
    using SignalHook = std::function<void(const std::string &event, uint64_t count, const std::string &data)>;
    void on_signal(SignalHook hook) { signal_hook_ = std::move(hook); }

    // A sink takes the transfers of events whose name starts with its
    // prefix chunk by chunk, instead of the engine assembling them in
    // memory (files being broadcast).  It returns "" if it took the chunk,
    // else why not: this node then counts as failed for that chunk, and the
    // reason travels to the initiator.  Chunks of one transfer arrive in
    // order of offset.  No event is counted for sunk transfers.  `sealed`:
    // the bytes came by multicast under the AES-GCM seal of the node that
    // sent them, which this node checked, so they are that node's byte for
    // byte; and that node had given them to its own sink (unsealed) before
    // it sealed them.  A sink may then skip its own checksum of them: the
    // sender's sink checked it, and failed the transfer if it did not match.
    // False for bytes that came over a connection (TCP's checksum alone) or
    // from this node itself.
    using ChunkSink = std::function<std::string(const std::string &event, uint64_t origin, uint64_t offset,
                                                uint64_t total, std::string_view data, bool sealed)>;
    void add_sink(const std::string &prefix, ChunkSink sink);

    // A sink whose work ends later (a worker thread writing files): instead
    // of returning its answer it calls `done` once, with "" or why not, on
    // the loop thread, during the call or after it.  The chunk is still
    // forwarded at once; this node's answer up the tree (its own and its
    // children's) waits for `done`.  So whoever waits for a chunk's answer
    // (the window of a transfer) waits for the sink's work on every node,
    // and a failure found late still fails that chunk, with its reason.
    // The sink must call `done` within the route's timeout (it bounds its
    // own work), or the parent counts this node as failed.  `done` may be
    // called after the engine is gone (it then does nothing).
    //
    // The chunk's bytes are data.ptr[0, data.len).  Where data.owner is set,
    // holding it keeps those bytes alive and unchanged: the sink may keep
    // them beyond the call instead of copying them (the buffer it holds is
    // the chunk's own: a multicast chunk's, at least net::kMcastChunkSize
    // bytes).  Where it is null the bytes live only during the call (they
    // lie in a connection's input, which a kept view would pin).
    using ChunkDone = std::function<void(const std::string &why)>;
    using AsyncChunkSink =
        std::function<void(const std::string &event, uint64_t origin, uint64_t offset, uint64_t total,
                           const net::DataRef &data, bool sealed, ChunkDone done)>;
    void add_async_sink(const std::string &prefix, AsyncChunkSink sink)
    {
        sinks_.emplace_back(prefix, std::move(sink));
    }

    // Service frames (net::is_service_frame: the reserved range of types a
    // service above the engine names for itself, as launch_bcast/protocol.hpp
    // does) arriving on accepted connections, and the closing of accepted
    // connections once they were ready.  The engine hands every service
    // frame to `frames` without reading it; the handler throws
    // net::FrameError for one it does not take, which closes the
    // connection.  Once a handler is set, the engine accepts connections
    // from users (verified, untrusted) and takes only service frames from
    // them: any other frame from a user is refused and closes the
    // connection.  Without a handler, every service frame is refused.
    using ServiceFrameHandler =
        std::function<void(net::Connection &, const net::FrameHeader &, std::string_view payload)>;
    using ServiceCloseHandler = std::function<void(net::Connection &)>;
    void on_service_frames(ServiceFrameHandler frames, ServiceCloseHandler closed)
    {
        service_frames_ = std::move(frames);
        service_closed_ = std::move(closed);
    }

    // A variable's value (0 if never set).  Besides those set (by
    // set_variable or a COMPARE-AND-WRITE), every event this node was
    // signalled has "event:<name>", the count test_event() gives, and
    // "crc:<name>", the CRC-32C of its last data (checksum.hpp), unless a
    // variable of that name was set: an initiator checks with one
    // COMPARE-AND-WRITE that a whole set holds the data.
    int64_t variable(const std::string &name) const;
    // Forgets every variable whose name starts with `prefix`.
    void erase_variables(const std::string &prefix);
    void set_variable(const std::string &name, int64_t value) { vars_[name] = value; }

    // The fanout of control operations (COMPARE-AND-WRITE): with
    // net::split_children over a set, the tree they travel.
    unsigned fanout() const noexcept { return cfg_.fanout; }

    // Connections this engine holds (for tests and status).
    size_t connections() const noexcept { return peers_.size() + accepted_.size(); }
    uint64_t frames_rejected() const noexcept { return rejected_; }
    // Accepted connections not authenticated yet; connections refused at
    // accept (over the caps); closed for want of a hello in time.
    size_t unauthenticated() const noexcept { return unauthenticated_.size(); }
    uint64_t connections_refused() const noexcept { return refused_; }
    uint64_t hellos_expired() const noexcept { return hello_expired_; }
    // The multicast data path: null when off (not configured, or the
    // socket could not be opened, which listen() logs).
    net::Mcast *mcast() noexcept { return mcast_.get(); }
    const McastCounters &mcast_counters() const noexcept { return mc_; }
    // Multicast announcements waiting for their chunk's bytes (for tests).
    size_t waiting_announcements() const noexcept
    {
        size_t n = 0;
        for (const auto &q : mc_waits_)
            n += q.second.size();
        return n;
    }
    // Transfers being received (partial); stale ones are dropped after
    // three timeouts without a chunk.
    size_t partial_transfers() const noexcept { return incoming_.size(); }

private:
    // ---- engine.cpp: connections, frame dispatch, housekeeping ----------
    std::shared_ptr<net::Connection> peer(uint32_t index);
    void on_accept(int fd);
    // `accepted`: c is a connection this engine accepted (else one it made).
    void on_frame(net::Connection &c, const net::FrameHeader &h, std::string_view payload, bool accepted);
    void on_peer_closed(net::Connection &c, const std::string &why);
    uint64_t next_op() { return ++op_counter_; }
    void sweep();

    event_base *base_;
    EngineConfig cfg_;
    net::Authenticator &auth_;
    // The handshakes' munge calls, off the loop (cfg_.auth_threads; null:
    // on it).  Before the connections: destroyed after them.
    std::unique_ptr<net::AuthOffload> auth_offload_;
    Logger log_;
    evconnlistener *listener_ = nullptr;
    event *sweep_ = nullptr;
    uint64_t op_counter_ = 0;
    uint64_t rejected_ = 0;
    std::map<uint32_t, std::shared_ptr<net::Connection>> peers_; // outgoing, by node index
    // Agents whose connection failed: routed around without a new connect
    // attempt until `until`.  A connection refused, closed or reset by the
    // agent (its daemon is down or restarting: a new attempt fails or succeeds at
    // once) is tried again after kFirstRetry, doubling up to the timeout
    // while it keeps failing; any other failure (an unreachable host, an
    // error, a failed authentication) pauses the agent for the timeout.
    // Forgotten once a connection to the agent is ready again.
    struct Down {
        std::chrono::steady_clock::time_point until;
        std::chrono::milliseconds pause{0};
    };
    static constexpr std::chrono::milliseconds kFirstRetry{250};
    std::map<uint32_t, Down> down_;
    std::set<std::shared_ptr<net::Connection>> accepted_;
    // Accepted connections before their hello (EngineConfig::hello_timeout).
    struct Unauthenticated {
        std::chrono::steady_clock::time_point since;
        in_addr_t addr;
    };
    std::map<const net::Connection *, Unauthenticated> unauthenticated_;
    std::map<in_addr_t, unsigned> unauthenticated_by_addr_;
    event *hello_sweep_ = nullptr;
    bool closing_quietly_ = false; // the hello sweep logs its closings as one line
    uint64_t refused_ = 0, refused_logged_ = 0, hello_expired_ = 0;
    std::chrono::steady_clock::time_point refusal_log_{};
    // The connection authenticated or went: it no longer counts.
    void forget_unauthenticated(const net::Connection &c);
    void sweep_hellos();
    ServiceFrameHandler service_frames_;
    ServiceCloseHandler service_closed_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);

    // ---- tree.cpp: generic down-the-tree forwarding ---------------------
    // Sends `type` with `body` to the children of `set` (routing around
    // unreachable ones), and calls `finish` with the aggregate once every
    // child answered or timed out.
    struct Hop; // an operation this node forwarded and awaits answers for (engine_internal.hpp)
    struct Answer {
        RangeSet failed;
        bool holds = true;
        Reasons reasons;
        void merge(const Answer &a);
        // `nodes` failed; the reason is their first node's (the root of a
        // failed subtree).
        void add_failure(const RangeSet &nodes, const std::string &why);
    };
    using Finish = std::function<void(const Answer &)>;
    Route route(unsigned fanout, std::chrono::milliseconds timeout) const;
    // For xfer_mc, `data` stays here for repairs, which `repair` encodes.
    void forward(const RangeSet &set, Route route, net::MsgType type,
                 std::function<std::string(const RangeSet &)> body, Answer local, Finish finish,
                 net::DataRef data = {}, std::function<std::string(const RangeSet &)> repair = {});
    // Calls send(slice, connection) for the root of each slice of `set`
    // below this node (the whole set, to its first member, when this node
    // does not head it, or with `whole`).  A root that cannot be reached at
    // once is routed around: unreachable(root, why), then its slice is
    // split among its children.
    void
    each_child(const RangeSet &set, unsigned fanout, bool whole,
               const std::function<void(const RangeSet &, const std::shared_ptr<net::Connection> &)> &send,
               const std::function<void(uint32_t, const std::string &)> &unreachable);
    void hop_answer(uint64_t op, const Answer &a);
    void hop_child_failed(uint64_t op, uint64_t child_op, const std::string &why);
    void hop_timeout(uint64_t op);
    // The connection to agent `index` closed (`never_ready`: it never
    // answered the connection): what was sent to it fails, or is routed
    // around it to its children.
    void child_lost(uint32_t index, bool never_ready, const std::string &why);
    // An xfer_ack or caw_ack from `c`.
    void handle_answer(net::Connection &c, uint64_t op, std::string_view payload);
    void reply(const std::weak_ptr<net::Connection> &to, net::MsgType type, uint64_t op, const Answer &a);
    void reply(net::Connection &to, net::MsgType type, uint64_t op, const Answer &a);

    std::map<uint64_t, std::shared_ptr<Hop>> hops_;               // by our op id
    std::map<uint64_t, std::pair<uint64_t, RangeSet>> child_ops_; // child op -> (hop op, child's slice)

    // ---- xfer.cpp: XFER-AND-SIGNAL, TEST-EVENT ----------------------------
    struct Transfer; // an XFER-AND-SIGNAL this engine initiates
    struct Incoming; // a multi-chunk transfer being received
    void start_chunks(const std::shared_ptr<Transfer> &t);
    void handle_xfer(net::Connection &c, uint64_t op, std::string_view payload);
    // Applies a chunk here.  Its answer goes into `local`, or, from an
    // asynchronous sink that has not answered yet, comes later: the
    // returned wait, which join() adds to the hop's answer.
    struct LocalWait;
    // `data`: see AsyncChunkSink (its owner is set only for a buffer of the
    // chunk's own).
    std::shared_ptr<LocalWait> apply_chunk(const std::string &event, uint64_t origin, uint64_t offset,
                                           uint64_t total, const net::DataRef &data, Answer &local,
                                           bool sealed = false); // sealed: see ChunkSink
    // `finish`, called with the children's answer and, once it came, the
    // local one of `wait` (null: nothing to wait for).
    Finish join(std::shared_ptr<LocalWait> wait, Finish finish);
    // Sends an unanswered transfer down the tree below this node (or, with
    // `whole`, to the first member of `set`, which heads it).
    void spread(const RangeSet &set, Route route, const std::string &event, uint64_t origin,
                const net::DataRef &data, bool whole = false);
    // Unanswered transfers queued for agent `index`, whose connection
    // closed: routed around it if it never answered the connection.
    void respread(uint32_t index, bool never_ready);
    // Drops transfers without a chunk since `stale`.
    void sweep_incoming(std::chrono::steady_clock::time_point stale);

    struct UnreadySend {
        RangeSet slice;
        Route route;
        std::string event;
        uint64_t origin;
        net::DataRef data;
    };
    // Unanswered transfers sent on connections not ready yet, by agent: if
    // the connection fails, they are routed around that agent.
    std::map<uint32_t, std::vector<UnreadySend>> unready_sends_;
    std::map<std::string, std::pair<uint64_t, std::string>> events_;
    std::map<std::pair<std::string, uint64_t>, std::shared_ptr<Incoming>> incoming_;
    SignalHook signal_hook_;
    std::vector<std::pair<std::string, AsyncChunkSink>> sinks_;

    // ---- xfer_mc.cpp: XFER-AND-SIGNAL by multicast ------------------------
    // Opens the multicast data path (listen()), if configured, on the
    // interface of this node's address `addr` unless mcast.iface names
    // one; logs it off if it cannot.
    void mc_start(const sockaddr_in &addr);
    // This node heads `set` and holds the chunk: multicasts it and forwards
    // its announcement where that applies, else forwards the chunk.
    void forward_chunk(const RangeSet &set, Route route, uint64_t origin, const std::string &event,
                       uint64_t offset, uint64_t total, net::DataRef chunk, Answer local, Finish finish);
    // A chunk announced by multicast: what its xfer_mc frames carry.
    struct McChunk {
        RangeSet set;
        Route route;
        uint64_t origin, offset, total;
        uint32_t len;
        std::string event;
        net::ChunkSeal seal;
    };
    // Sends the announcement of `c` to the children of c.set; `data`, the
    // chunk's bytes, stays with the hop for the children that ask.
    void forward_mc(const McChunk &c, Answer local, Finish finish, net::DataRef data);
    // Multicast announcements waiting for their data, by transfer, in
    // order of arrival.
    struct McWait {
        McChunk chunk;
        std::weak_ptr<net::Connection> up;
        uint64_t op;
        net::DataRef data; // set when it came with the announcement (a repair)
        std::chrono::steady_clock::time_point arrived;
        bool nacked = false;
    };
    void handle_xfer_mc(net::Connection &c, uint64_t op, std::string_view payload);
    void handle_xfer_nack(net::Connection &c, uint64_t op, std::string_view payload);
    void mc_pump(uint64_t origin);
    void mc_check();
    void mc_arm(); // mc_check() after mcast.wait, unless already due
    // The multicast socket is read while an announcement waits for its
    // bytes, and otherwise held (Mcast::hold_reads) until the next
    // announcement drains it: one wakeup per chunk on a node in the
    // transfer.  Nodes that hold no announcement never hold.
    void mc_reads();
    void mc_count(uint64_t McastCounters::*field);
    // Drops announcements waiting since `stale` for bytes that never came.
    void sweep_mc(std::chrono::steady_clock::time_point stale);

    std::map<uint64_t, std::deque<McWait>> mc_waits_;
    bool mc_pumping_ = false;
    std::set<uint64_t> mc_repump_;
    event *mc_timer_ = nullptr;
    std::unique_ptr<net::Mcast> mcast_;
    McastCounters mc_;
    Logger mc_log_; // log_.child("multicast")

    // ---- caw.cpp: COMPARE-AND-WRITE and the variables ---------------------
    struct CawCall; // a COMPARE-AND-WRITE queued at the set's root
    void handle_caw(net::Connection &c, uint64_t op, std::string_view payload);
    void caw_next();
    bool caw_local(uint8_t phase, const std::string &var, Relation rel, int64_t value,
                   const std::string &wvar, int64_t wval);

    std::map<std::string, int64_t> vars_;
    std::vector<std::shared_ptr<CawCall>> caw_queue_;
    bool caw_busy_ = false;
};

} // namespace storm::prim
