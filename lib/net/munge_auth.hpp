// Authentication of the connections between Storm's daemons, with munge.
//
// A connecting daemon sends, once per connection, a munge credential whose
// payload binds the purpose and the peer it is meant for; the accepting
// daemon decodes it through its local munged, which rejects forged,
// expired and replayed credentials, and then applies its own policy (the
// credential's uid must be the uid the agents run as).  Frames on an
// authenticated connection carry no further credential.
//
// Contract: encode() and decode() throw AuthError whose message names the
// munge error ("Replayed credential", "Invalid credential", ...) and never
// return a credential munge did not accept.  A MungeAuth is immutable and
// safe to share between threads (each call makes its own munge context).
// munged's socket takes a bounded backlog of connections (256 in munge
// 0.5.15); past it a connection fails at once, "Resource temporarily
// unavailable" (EMUNGE_SOCKET), which a burst of decodes makes happen
// (1000 agents sharing one munged on the virtual cluster, each verifying
// a broadcast's credential at once: 300 of them refused it).  Such a call
// is tried again, as Slurm's auth/munge does (the calling thread sleeps
// meanwhile): on an event loop (Patience::loop), 8 times in all over about
// half a second; on a thread of its own (Patience::worker), for 5 s, the
// pauses growing to 250 ms (1000 agents verifying a tree's credential at
// once, 125 to a munged: 79 gave up after half a second), or as long as
// its caller can wait (Patience::worker_for: a broadcast's node waits for
// most of its hop timeout; 1000 virtual nodes on two cores at a load of
// 1,700, 8 munged each answering 125: 46 nodes' decodes timed out within
// 5 s).  A call munged did not answer in time ("Failed to receive message
// header: Timed-out") is tried again the same way.  The error then says
// how many attempts failed, and for how long.
#pragma once

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace storm::net {

class AuthError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// How long a call may wait for a munged whose socket is busy (above).
struct Patience {
    bool on_loop;                     // 8 attempts at most, pauses up to 100 ms
    std::chrono::milliseconds budget; // off a loop: attempts until this much passed, pauses up to 250 ms
    static const Patience loop, worker;
    // Off a loop, for `budget` (at least worker's 5 s).
    static Patience worker_for(std::chrono::milliseconds budget);
};
inline constexpr Patience Patience::loop{true, std::chrono::milliseconds(450)};
inline constexpr Patience Patience::worker{false, std::chrono::milliseconds(5000)};
inline Patience Patience::worker_for(std::chrono::milliseconds budget)
{
    return Patience{false, std::max(budget, worker.budget)};
}

class MungeAuth {
public:
    // socket: munged's socket path; empty means munge's compiled-in default.
    explicit MungeAuth(std::string socket = "") : socket_(std::move(socket)) {}

    // The socket named by Slurm's AuthInfo ("socket=/path,ttl=60"), or ""
    // when AuthInfo names none.
    static std::string socket_from_authinfo(const char *authinfo);

    std::string encode(std::string_view payload) const;

    struct Credential {
        uid_t uid;
        gid_t gid;
        std::string payload;
    };
    Credential decode(std::string_view cred) const;
    // The same, but a credential decoded before is accepted: for tokens
    // that several daemons sharing one munged must each verify (Slurm's
    // sbcast credential), whose use is bound to their content instead.
    Credential decode_allow_replay(std::string_view cred, const Patience &patience = Patience::loop) const;

    const std::string &socket() const noexcept { return socket_; }

private:
    Credential decode(std::string_view cred, bool replay_ok, const Patience &patience) const;
    std::string socket_;
};

} // namespace storm::net
