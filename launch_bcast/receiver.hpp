// The node side of a broadcast: the engine's sink for "bcast:" events.
//
// For each broadcast (session) it checks the credential itself (a node
// never trusts the head's word that a user may write here), then, acting
// as the job's user (AsUser), stages the files next to the destination
// under a temporary name (".NAME.storm-<sid>"), once it checked the file
// system has room (a full disk fails the open, not the transfer; a tree's
// files with bytes are created by their first record, their creation
// overlapping the transfer, and a disk filling meanwhile fails there); writes
// each chunk after checking its CRC; sets "bcast:<sid>:complete" to 1 when
// every byte is there; on commit sets mode and times (the stock rules:
// mode & 0777, times kept with --preserve) and swaps the files into place,
// keeping what they replace under the temporary name; and on finish (every
// node committed) removes what was replaced.  The open and the commit are
// answered once their work ended, or half a timeout after they came while
// it progresses, and so is the head's "wait"; "bcast:<sid>:ready" says
// which ended (protocol.hpp, "Between the head and the nodes").  Abort, a
// stalled session (no word from the head, which says "alive" every
// timeout, for three timeouts) and recover() (at start, for sessions a killed
// slurmd left behind, listed in the journal) remove the temporaries, and
// abort and a stall after the commit also put back what was replaced (or
// remove the new files where there was nothing): no node keeps a partial
// file, and a broadcast that failed on one node leaves no node changed.
// recover() finishes a session committed before the kill (what the journal
// names is then the replaced one).
//
// Every session's open and end (finish or abort) is reported to the launch
// gate (gate.hpp), which holds slurmstepd's launch of a step until its
// srun --bcast broadcasts ended here: the tasks start only once every node
// committed.  The gate is off (a warning: the rest of the agent runs) when
// its socket cannot be bound: the steps that wait for it then fail to start.
//
// A destination ending in '/' receives srun --bcast's per-node name,
// "slurm_bcast_<job>.<step>_<node>", which slurmstepd computes too.
//
// Threading: the sink, sweep() and recover() run on the agent's loop
// thread, and so does everything that touches the engine, the gate and
// the sessions' state; none of them waits on a file system.  Every file
// system access (the user's groups through NSS too) runs on a worker
// thread of the session (fs_worker.hpp), which acts as the user with its
// own AsUser: the sink queues the work and answers each chunk through
// `done` once its work ran (Engine::add_async_sink), so the head's window
// and its COMPARE-AND-WRITE see what every node really wrote, failures
// with their reasons as before.  Each step of a session's work (a lookup,
// one entry of a tree, a chunk's write, a rename) must end within the
// broadcast's hop timeout: past it the session fails on this node ("the
// file system at DIR did not answer within N s (while ...)"), its chunks
// waiting for an answer are answered with that, and its removal is queued
// behind the stuck step (the journal has it for the next start if that
// never ends); the loop goes on meanwhile.  Memory waiting for a worker is
// bounded (a chunk kept in its multicast buffer counts that buffer's
// size; one of less than half a buffer is copied out, counted at its
// own): a session with kMaxQueuedBytes of chunks queued, or a node with
// kMaxQueuedBytesAll over all sessions, fails the chunk and the session
// (the head's window normally keeps far below).  At most kMaxSessions
// sessions (stuck ones included) hold a worker; more are refused.  The
// destructor (slurmd stopping) waits for the workers at most 2 s in all,
// then leaves those stuck in the kernel to end alone.  Work that a chunk
// brings (a chunk of records packed for many small files, issue 40) is
// one job of the session's worker like a write: unpacked there, in order.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "launch_bcast/authorizer.hpp"
#include "launch_bcast/fs_worker.hpp"
#include "launch_bcast/gate.hpp"
#include "launch_bcast/protocol.hpp"
#include "lib/common/log.hpp"
#include "lib/prim/engine.hpp"

struct event;
struct event_base;

namespace storm::bcast {

struct ReceiverConfig {
    uint32_t self = 0;
    std::string node_name;
    std::string journal_dir; // where open sessions are recorded; "" for none
    // The launch gate's socket (gate.hpp), and who may ask it; "" for none.
    std::string gate_socket;
    std::vector<uid_t> gate_trusted;
    // Tests only: called on a session's worker before each job, with what
    // it does ("writing /x/.f.storm-..."): a test makes it block.
    std::function<void(const std::string &what)> fs_hook;
};

constexpr uint64_t kMaxQueuedBytes = 64u << 20;     // per session
constexpr uint64_t kMaxQueuedBytesAll = 256u << 20; // per node
constexpr size_t kMaxSessions = 64;

// "bcast:<sid>:ready" on a node: its staging ended (kStaged), then its
// commit (kPlaced).  The head waits for every node's with
// COMPARE-AND-WRITE (protocol.hpp, "The open and the commit").
constexpr int64_t kStaged = 1, kPlaced = 2;

class Receiver {
public:
    // `log`: the component's logger; the receiver's lines name the
    // broadcast ("broadcast <id>: "), the gate's add "bcast: launch gate: ".
    Receiver(event_base *base, prim::Engine &engine, Authorizer &auth, ReceiverConfig cfg, Logger log);
    ~Receiver();
    Receiver(const Receiver &) = delete;
    Receiver &operator=(const Receiver &) = delete;

    // Removes what the sessions listed in the journal left (run at start):
    // lists them here, removes them on a worker.
    void recover();
    // Whether recover()'s removals are still running.
    bool recovering() const noexcept { return recovering_; }
    // The sink (Engine::add_async_sink): calls `done` with "" or why this
    // node cannot take the chunk, at once or once its work ran on the
    // session's worker.  Each data chunk carries the CRC-32C of its bytes,
    // checked unless `sealed` (Engine::ChunkSink): the seal proved them the
    // sender's, which checked it.  A data chunk whose bytes have an owner
    // (a multicast chunk's buffer) is kept by it until written, not copied.
    using Done = prim::Engine::ChunkDone;
    void on_chunk(const std::string &event, uint64_t sid, const net::DataRef &data, bool sealed, Done done);
    // Aborts the sessions that stalled or whose file system stopped
    // answering; run four times a second by a timer while a session, a
    // removal or the launch gate's record of one is here.
    void sweep();
    size_t sessions() const noexcept { return sessions_.size(); }
    // Sessions aborted whose removal waits for their worker.
    size_t draining() const noexcept { return draining_.size(); }

    // A broadcast here, and one entry of it (receiver.cpp's).
    struct File;
    struct Session;

private:
    using Ptr = std::shared_ptr<Session>;
    void open(uint64_t sid, std::string_view payload, Done done);
    // Stages `s` once no removal of a broadcast to its destination runs here.
    // The credential of `s` granted it this node: its destination named,
    // its directory looked up (on the worker), then after_removals().
    void opened(const Ptr &s, std::shared_ptr<OpenRequest> req);
    void after_removals(const Ptr &s, std::shared_ptr<OpenRequest> req);
    void stage(const Ptr &s, std::shared_ptr<OpenRequest> req);
    // The head's "wait": answered as the open and the commit are (hold()).
    void wait(uint64_t sid, Done done);
    // `done` answers once the staging or the commit at work ended (with ""
    // or why it failed), or, while it progresses, half a deadline later.
    void hold(const Ptr &s, Done done);
    void settled(const Ptr &s); // that work ended well: answers what held
    // The open failed before anything was staged: forgets `s`, answers its
    // waiting chunks with `why`.
    void fail_open(const Ptr &s, const std::string &why);
    // Keeps why `sid` failed here, for later events of it (bounded).
    void failed(uint64_t sid, const std::string &why);
    void data(uint64_t sid, const net::DataRef &payload, bool sealed, Done done);
    // The worker's job for the chunks data() queued: writes all that came
    // (in order, as the user) and answers them on the loop.
    FsWorker::Done write_chunks(const Ptr &s);
    void commit(uint64_t sid, Done done);
    void finish(uint64_t sid, Done done);
    // The open session `sid`, or null with `why` saying so.
    Ptr session(uint64_t sid, std::string &why);
    // Aborts `sid` here and answers `done` with `why`.
    void refuse(uint64_t sid, const std::string &why, Done done);
    // Aborts `sid`: answers its waiting chunks with `why`, lets the gate
    // know, and queues the removal on its worker; `removed`, if set, is
    // answered once that ran (or its deadline passed).
    void abort(uint64_t sid, const std::string &why, Done removed = {});
    // The removal has run: forget the session.
    void drained(const Ptr &s);

    prim::Engine &engine_;
    Authorizer &auth_;
    ReceiverConfig cfg_;
    Logger log_;
    std::shared_ptr<Inbox> inbox_;
    std::map<uint64_t, Ptr> sessions_;
    std::map<uint64_t, Ptr> draining_;
    std::map<uint64_t, std::string> failed_; // the last kMaxSessions failures here, by session
    std::deque<uint64_t> failed_order_;
    uint64_t queued_ = 0; // bytes of chunks waiting for workers, all sessions
    std::unique_ptr<FsWorker> recovery_;
    bool recovering_ = false;
    std::unique_ptr<LaunchGate> gate_; // told of every session's open and end
    // The sweep, every 250 ms while a session, a removal or the gate's
    // record of one is here; off on an idle node (no wakeups).
    event *timer_ = nullptr;
    unsigned ticks_ = 0;
    void want_sweeps();
};

// "bcast:<kind>:<sid as 16 hex digits>" and the variables of a session.
std::string event_name(const char *kind, uint64_t sid);
std::string var_prefix(uint64_t sid);

} // namespace storm::bcast
