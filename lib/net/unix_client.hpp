// The client side of a node agent's unix control sockets (unix_server.hpp):
// slurmstepd, tasks and tools ask, the agent answers.  No libevent here:
// libstormmsg, which tasks load, uses it too.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace storm::net {

// unix_request() could not connect (no socket, nobody listening).
class UnixUnreachable : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// unix_request() heard nothing from the server within its timeout.
class UnixTimeout : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// One request, one answer.  Connects to the SOCK_SEQPACKET socket at
// `path`, sends `message` as one packet and returns the first packet that
// comes back (at most `max_answer` bytes).  Waits at most `timeout_ms` for
// it; a negative timeout waits until the server answers or closes.  `who`
// names the server in errors ("the node agent").  Where the server sends
// word while it works on a long request, `interim` tells such a packet
// from the answer (true: not the answer): it is dropped, and the wait for
// the next packet starts again, so `timeout_ms` then bounds the server's
// silence rather than the whole wait.  Throws UnixUnreachable when it
// cannot connect, UnixTimeout ("<who> at <path> did not answer within N
// ms") when the server was silent for timeout_ms, std::runtime_error
// otherwise ("... closed the connection without an answer").
std::string unix_request(const std::string &path, std::string_view message, int timeout_ms,
                         const std::string &who = "the node agent", size_t max_answer = 64 * 1024,
                         const std::function<bool(std::string_view)> &interim = {});

} // namespace storm::net
