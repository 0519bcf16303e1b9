// The launch gate: a step's tasks start on a node only once the broadcasts
// of its program ended there.
//
// `srun --bcast` with cli_filter/storm opens the broadcast of the program (and
// of its libraries) before it launches the step, hands the session ids to
// the step in its environment (env_name: "<sid>[,<sid>]", 16 hex digits
// each) and streams the bytes while Slurm launches.  In each node's
// slurmstepd, switch/rdma's job_init asks the node's agent to hold the step
// until every listed session ended on that node, before any task is
// forked: the answer is ok once each one was committed (every node
// confirmed every byte, and the file is in place here), or the reason one
// was not (this node's, or "aborted by the head of the broadcast" when
// another node failed: srun prints the whole story).  So the transfer and
// Slurm's launch overlap, and the tasks still start only after every node
// holds the complete file.
//
// The socket: SOCK_SEQPACKET at <SlurmdSpoolDir>/socket_name, served on the
// agent's loop; only the uids in `trusted` (root, the slurmd's user) may
// ask (others are closed at accept), and a connection that sent no request
// within net::UnixServer::kDefaultFirstRequest of its accept is closed; a
// held step is never cut (it waits by design).  One request per
// connection, net::Writer encoding:
//   hold   {u8 version, u8 'W', u32 job, u32 step, u32 count (1..max_sids),
//           u64 sid x count}
//   still  {u8 version, u8 'S'}, every `still_every` while the step is held
//   answer {u8 version, u8 'K'} (ok) | {u8 version, u8 'E', bytes reason}
// The answer comes when the sessions ended: a session's end comes from its
// commit, its abort, or the receiver's sweep of a stalled session, so a
// waiter never waits longer than the broadcast lives.  A session the node
// never saw (its agent restarted meanwhile, or it ended more than `keep`
// ago) is refused at once.  A malformed request (another version too) is
// answered with an error and logged once.  The "still" packets let
// slurmstepd tell a long broadcast from an agent whose loop is stuck: it
// gives up after `silence` without a word, so a step is never held for
// ever (it fails, with the reason, and srun reports it).
//
// Threading: the agent's loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "lib/common/log.hpp"
#include "lib/net/unix_client.hpp"
#include "lib/net/unix_server.hpp"

struct event;
struct event_base;

namespace storm::bcast {

namespace gate {

constexpr uint8_t version = 2; // 2: "still" packets
// How often the agent tells a held step it still holds it, and how long
// slurmstepd waits without a word before it fails the step.
constexpr std::chrono::seconds still_every{5};
constexpr std::chrono::seconds silence{60};
constexpr const char *socket_name = "storm-bcast.sock";
// The step's environment variable srun sets (SLURM_ prefixed: srun passes
// those on under --export=NONE too); switch/rdma removes it from the tasks'.
constexpr const char *env_name = "SLURM_STORM_BCAST";
constexpr uint32_t max_sids = 16;

// "<sid>[,<sid>]" and back; parse() throws std::invalid_argument on
// anything else (empty, more than max_sids, not 16 hex digits).
std::string format(const std::vector<uint64_t> &sids);
std::vector<uint64_t> parse(std::string_view text);

std::string hold(uint32_t job, uint32_t step, const std::vector<uint64_t> &sids);
// A hold request as the agent reads it (the inverse of hold()); throws
// net::DecodeError naming what is wrong: another version, not a hold, 0 or
// more than max_sids sessions, bytes missing or left over.
struct Hold {
    uint32_t job = 0, step = 0;
    std::vector<uint64_t> sids;
};
Hold read_hold(std::string_view packet);

// slurmstepd's side: blocks until the agent answers; throws
// net::UnixUnreachable when no agent listens at `socket_path`, and
// std::runtime_error with the agent's reason when a session failed, or
// when the agent said nothing for `quiet_limit` (neither an answer nor a
// "still").
void wait(const std::string &socket_path, uint32_t job, uint32_t step, const std::vector<uint64_t> &sids,
          std::chrono::milliseconds quiet_limit = silence);

} // namespace gate

class LaunchGate {
public:
    // `still`: how often each held step hears that it is still held.
    // `log`: the component's logger; the gate's lines add "bcast: launch
    // gate: " (its socket's, net::UnixServer's, carry "bcast: ").
    LaunchGate(event_base *base, std::string socket_path, std::vector<uid_t> trusted, Logger log,
               std::chrono::seconds keep = std::chrono::minutes(10),
               std::chrono::milliseconds still = gate::still_every);
    ~LaunchGate();
    LaunchGate(const LaunchGate &) = delete;
    LaunchGate &operator=(const LaunchGate &) = delete;

    // Binds the socket (net::UnixServer::start's errors) and starts the
    // "still" timer.
    void start();

    // The receiver's reports: a session opened on this node, and how it
    // ended ("" committed, else why not).
    void opened(uint64_t sid);
    void ended(uint64_t sid, const std::string &why);
    // Forgets sessions that ended more than `keep` ago (the receiver's
    // sweep calls it every second).
    void sweep();
    // Nothing for sweep() to forget: no session it was told of.
    bool idle() const noexcept { return outcomes_.empty(); }

    size_t waiters() const noexcept { return waiters_.size(); }

private:
    struct Outcome {
        bool ended = false;
        std::string why;
        std::chrono::steady_clock::time_point when;
    };
    struct Waiter {
        int fd = -1;
        uid_t uid = 0;
        event *ev = nullptr;
        uint32_t job = 0, step = 0;
        std::vector<uint64_t> sids;
        std::chrono::steady_clock::time_point since;
    };
    void on_client(int fd, uid_t uid);
    static void on_still(int fd, short, void *arg);
    static void on_readable(int fd, short, void *arg);
    void read_request(Waiter &w);
    // Answers `w` if every session ended, or one failed; true if answered.
    bool settle(Waiter &w);
    void answer(int fd, const std::string &error);
    void drop(int fd);

    std::vector<uid_t> trusted_;
    Logger log_;
    std::chrono::seconds keep_;
    std::chrono::milliseconds still_;
    event_base *base_;
    event *still_ev_ = nullptr;
    net::UnixServer server_;
    std::map<uint64_t, Outcome> outcomes_;
    std::map<int, std::unique_ptr<Waiter>> waiters_;
};

} // namespace storm::bcast
