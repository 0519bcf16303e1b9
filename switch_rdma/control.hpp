// The node agent's control socket for communication contexts.
//
// A SOCK_SEQPACKET unix socket at <SlurmdSpoolDir>/storm-pool.sock (mode
// 0666: tasks run as their users; the agent checks each peer's
// credentials with SO_PEERCRED).  One message per packet, encoded with
// net::Writer: u8 version, u8 type, then the type's fields.
//
// slurmstepd (root or SlurmdUser), around the step's tasks:
//   open   {context: bytes (Context::encode)}        -> ok | error
//   close  {id: u32, job: u32, step: u32}            -> ok | error
// A task (the job's uid, a rank of this node), from storm_msg_init():
//   attach {id: u32, job: u32, step: u32, rank: u32} -> attached (+ the
//          window's memfd as SCM_RIGHTS) | error
// then the connection stays open as the task's control channel:
//   agent -> task  halt    {epoch: u64}  stop injecting on a packet
//                                         boundary, send a halt mark to
//                                         every peer, collect theirs
//   task  -> agent halted  {epoch: u64}  every peer's halt mark arrived:
//                                         nothing of the context is in
//                                         flight towards this task
//   agent -> task  release {epoch: u64}  the window is back: send a ready
//                                         mark to every peer, inject again
//                                         once every peer's has arrived
//   task  -> agent ready   {epoch: u64}  every peer's ready mark arrived
//   task  -> agent failed  {reason: bytes} the context cannot go on (a peer
//                                         died, a mark never came): the
//                                         agent logs it and stops waiting
// Closing the channel detaches the task.  Any malformed message closes
// that connection with one log line.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "lib/net/unix_client.hpp"
#include "lib/net/wire.hpp"
#include "switch_rdma/context.hpp"

namespace storm::rdma::control {

constexpr uint8_t version = 1;
constexpr const char *socket_name = "storm-pool.sock";
// The task environment variable with the socket's full path (set by
// slurmstepd beside STORM_CTX, context.hpp).
constexpr const char *socket_env = "STORM_POOL_SOCKET";
constexpr size_t max_message = 1 << 20; // a context of thousands of nodes fits

enum class Type : uint8_t {
    open = 'O',
    close = 'C',
    attach = 'A',
    attached = 'T',
    ok = 'K',
    error = 'E',
    halt = 'H',
    halted = 'h',
    release = 'G',
    ready = 'r',
    failed = 'F',
};

struct Attached {
    PoolMode mode = PoolMode::divided;
    uint64_t offset = 0; // the task's share in the window (memfd)
    uint64_t bytes = 0;  // its size
    uint32_t packet_size = 0;
    uint32_t send_slots = 0;
    uint32_t recv_slots = 0;
    uint32_t credits = 0;  // per sender
    uint64_t epoch = 0;    // switch epoch the context is at
    bool resident = false; // holds the pool now (always, when divided)
};

// Encoding: each returns one message.
std::string open(const Context &c);
std::string close(uint32_t id, uint32_t job, uint32_t step);
std::string attach(uint32_t id, uint32_t job, uint32_t step, uint32_t rank);
std::string attached(const Attached &a);
std::string ok();
std::string error(std::string_view reason);
std::string epoch_message(Type t, uint64_t epoch); // halt, halted, release, ready
std::string failed(std::string_view reason);

// Decoding: the version and type, then the fields with the matching
// reader; each throws net::DecodeError on a malformed message.
struct Header {
    Type type;
};
Header header(net::Reader &r); // checks the version and a known type
Context read_open(net::Reader &r);
struct Ids {
    uint32_t id, job, step, rank;
};
Ids read_close(net::Reader &r); // rank = 0
Ids read_attach(net::Reader &r);
Attached read_attached(net::Reader &r);
std::string read_reason(net::Reader &r); // error, failed
uint64_t read_epoch(net::Reader &r);

// request() could not connect to the agent's socket (no socket, or no
// agent listening on it): the node agent is not running.  A
// std::runtime_error, so callers that catch that see it too.
using AgentUnreachable = net::UnixUnreachable;

// Client side (slurmstepd, and tests): one request, one answer, on a new
// connection to `socket_path`; throws std::runtime_error with the agent's
// reason (or why it could not be reached: AgentUnreachable when it could
// not connect) unless the answer is ok.
void request(const std::string &socket_path, const std::string &message, int timeout_ms = 10000);

} // namespace storm::rdma::control
