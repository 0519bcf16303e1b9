// The node side of a broadcast: the engine's sink for "bcast:" events.
//
// For each broadcast (session) it checks the credential itself (a node
// never trusts the head's word that a user may write here), then, acting
// as the job's user (AsUser), stages the files next to the destination
// under a temporary name (".NAME.storm-<sid>"), once it checked the file
// system has room (a full disk fails the open, not the transfer); writes
// each chunk after checking its CRC; sets "bcast:<sid>:complete" to 1 when
// every byte is there; on commit sets mode and times (the stock rules:
// mode & 0777, times kept with --preserve) and swaps the files into place,
// keeping what they replace under the temporary name; and on finish (every
// node committed) removes what was replaced.  Abort, a stalled session (no
// chunk for three timeouts) and recover() (at start, for sessions a killed
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
// Threading: the agent's loop thread only (the engine calls the sink).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "launch_bcast/authorizer.hpp"
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
};

class Receiver {
public:
    // `log`: the component's logger; the receiver's lines name the
    // broadcast ("broadcast <id>: "), the gate's add "bcast: launch gate: ".
    Receiver(event_base *base, prim::Engine &engine, Authorizer &auth, ReceiverConfig cfg, Logger log);
    ~Receiver();
    Receiver(const Receiver &) = delete;
    Receiver &operator=(const Receiver &) = delete;

    // Removes what the sessions listed in the journal left (run at start).
    void recover();
    // The sink: returns "" or why this node cannot take the chunk.  Each data
    // chunk carries the CRC-32C of its bytes, checked here unless `sealed`
    // (Engine::ChunkSink): the seal proved them the sender's, which checked it.
    std::string on_chunk(const std::string &event, uint64_t sid, std::string_view data, bool sealed = false);
    // Aborts the sessions that stalled; run every second by a timer.
    void sweep();
    size_t sessions() const noexcept { return sessions_.size(); }

private:
    struct File;
    struct Session;
    std::string open(uint64_t sid, std::string_view payload);
    std::string data(uint64_t sid, std::string_view payload, bool sealed);
    std::string commit(uint64_t sid);
    std::string finish(uint64_t sid);
    // The open session `sid`, or nullptr with `why` saying so.
    Session *session(uint64_t sid, std::string &why);
    // Aborts `sid` here and returns `why`.
    std::string refuse(uint64_t sid, std::string why);
    void abort(uint64_t sid, const char *why);
    void discard(Session &s);
    void journal_add(uint64_t sid, const Session &s);
    void journal_remove(uint64_t sid);

    prim::Engine &engine_;
    Authorizer &auth_;
    ReceiverConfig cfg_;
    Logger log_;
    std::map<uint64_t, std::unique_ptr<Session>> sessions_;
    std::unique_ptr<LaunchGate> gate_; // told of every session's open and end
    event *timer_ = nullptr;
};

// "bcast:<kind>:<sid as 16 hex digits>" and the variables of a session.
std::string event_name(const char *kind, uint64_t sid);
std::string var_prefix(uint64_t sid);

} // namespace storm::bcast
