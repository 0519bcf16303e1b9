// A unix control socket of the node agent, on its libevent loop: the
// listening SOCK_SEQPACKET socket and its accept event, shared by the
// buffer pool's control socket (switch_rdma/pool.hpp), the local
// scheduler's request socket (cosched/channel.hpp) and the launch gate
// (launch_bcast/gate.hpp).
//
// Tasks run as their users, so the socket file is mode 0666: a peer is
// known by what the kernel says of it (SO_PEERCRED: pid, uid, gid), never
// by who may open the file.  Every accepted connection is handed to the
// owner with those credentials; what a peer may do is the owner's to check.
//
// Contract:
//  - start() binds `path`, replacing a stale socket file (an earlier
//    slurmd's), makes it mode 0666, listens and watches it on the loop.  It
//    throws std::system_error with errno's reason ("<prefix>: socket",
//    "<prefix>: bind <path>", "<prefix>: listen <path>") or
//    std::runtime_error ("<prefix>: <what> path too long: <path>",
//    "<prefix>: cannot register the <what>'s events"), leaving no file
//    behind; it is called at most once.
//  - Each connection is accepted non-blocking and close-on-exec, its peer's
//    credentials read, and on_client(fd, cred) owns it from then on (it
//    closes it when it does not keep it).  A connection whose credentials
//    cannot be read is closed with one error line "<prefix>: cannot read a
//    client's credentials: <reason>"; a failed accept (other than EAGAIN or
//    EINTR) is one error line "<prefix>: accept on <path>: <reason>".
//  - The destructor stops watching, closes the listening socket and
//    unlinks `path` if start() bound it.  The accepted connections are the
//    owner's: they stay open.
//  - Everything runs on the loop thread; on_client must not destroy the
//    server.
//  - Admission (set before start()), checked at accept before on_client:
//    with admit_only(uids), a peer of any other uid is closed at once (a
//    socket where only root and SlurmdUser may speak); with
//    limit_per_uid(n, exempt), a uid (other than root and `exempt`) holding
//    n connections already has the next one closed at once.  A connection
//    counts while its descriptor still refers to the socket accepted (the
//    owner's close() ends it; nothing else is asked of the owner).  Each
//    kind of refusal is one warning line, then counted and logged at most
//    every 10 s.
//  - First-request deadline (set before start()): with
//    first_request_within(wait, on_expired), every accepted connection
//    must complete its first request (or whatever identifies its peer, as
//    the owner defines it) within `wait` of its accept.  The owner calls
//    settled(fd) once it has (and may call it when it closes the
//    connection earlier; settled() of an unknown fd does nothing).  A
//    connection still unsettled at its deadline, whose descriptor still
//    refers to the socket accepted, is handed to on_expired(fd), which
//    closes it (the owner's drop: the descriptor and its events are the
//    owner's).  Each expiry is counted (expired()) and logged as the
//    refusals are: one warning line naming the uid, pid and the wait, then
//    at most every 10 s with the count.  A settled connection is never
//    cut by the server, however long it stays idle: what an established
//    peer may do, and for how long, is the owner's protocol.
//
// watch_readable() is the companion for the accepted connections: one
// persistent EV_READ event per connection; keep_watched() adds it to a
// client and keeps the client in its owner's table.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>
#include <memory>
#include <string>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "lib/common/log.hpp"

struct event_base;
struct event;

namespace storm::net {

class UnixServer {
public:
    using OnClient = std::function<void(int fd, const ucred &cred)>;

    // `prefix` starts every log line and error ("rdma", "cosched"); `what`
    // names the socket in them ("control socket").
    UnixServer(event_base *base, std::string path, Logger log, std::string prefix, std::string what,
               OnClient on_client);
    ~UnixServer();
    UnixServer(const UnixServer &) = delete;
    UnixServer &operator=(const UnixServer &) = delete;

    // Peers of other uids than these (and root) are closed at accept.
    void admit_only(std::vector<uid_t> uids);
    // At most `n` connections per uid, root and `exempt` excepted.
    void limit_per_uid(size_t n, std::vector<uid_t> exempt = {});
    // The default of limit_per_uid(): far above the tasks of one user on
    // one node, far below slurmd's descriptor limit.
    static constexpr size_t kDefaultPerUid = 512;

    using OnExpired = std::function<void(int fd)>;
    // Every connection must complete its first request within `wait` (see
    // the contract above); on_expired(fd) closes one that did not.
    void first_request_within(std::chrono::milliseconds wait, OnExpired on_expired);
    // The connection on `fd` completed its first request (or is being
    // closed by the owner): the deadline no longer applies to it.
    void settled(int fd) noexcept;
    // The agent's deadline for a first request: every peer (slurmstepd,
    // the tasks' libstormmsg) sends it right after connect().
    static constexpr std::chrono::seconds kDefaultFirstRequest{10};

    void start();
    const std::string &path() const noexcept { return path_; }
    // Connections closed at accept by admit_only() and limit_per_uid().
    uint64_t refused() const noexcept { return refusals_.count; }
    // Connections closed by the first-request deadline, and those it
    // watches now.
    uint64_t expired() const noexcept { return expiries_.count; }
    size_t unsettled() const noexcept { return pending_.size(); }
    bool listening() const noexcept { return fd_ >= 0; }

private:
    // A warning counted, and logged at most every 10 s (with the count).
    struct Counted {
        const char *noun; // "refusals"
        uint64_t count = 0, logged = 0;
        std::chrono::steady_clock::time_point last{};
    };
    // A connection under the first-request deadline.
    struct Pending {
        UnixServer *self;
        int fd;
        ino_t ino;
        ucred cred;
        event *ev;
    };
    static void on_accept(int fd, short, void *arg);
    static void on_deadline(int, short, void *arg);
    void close_socket() noexcept; // and removes the file
    // Whether a peer of `cred` may connect now (else logs why, rate-limited).
    bool admit(int fd, const ucred &cred);
    void watch_deadline(int fd, const ucred &cred);
    void warn(Counted &c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

    event_base *base_;
    std::string path_;
    Logger log_;                // log's child named `prefix`
    std::string prefix_, what_; // prefix_ starts the errors thrown
    OnClient on_client_;
    int fd_ = -1;
    event *ev_ = nullptr;
    bool only_ = false;
    std::vector<uid_t> admitted_; // admit_only()'s uids, or limit_per_uid()'s exempt ones
    size_t per_uid_ = 0;          // 0: no limit
    // The connections of each limited uid: descriptor and the inode of the
    // socket accepted on it (a descriptor the owner closed, or reused for
    // another socket, no longer counts).
    std::map<uid_t, std::vector<std::pair<int, ino_t>>> open_by_uid_;
    Counted refusals_{"refusals"}, expiries_{"closures"};
    std::chrono::milliseconds first_wait_{0}; // 0: no deadline
    OnExpired on_expired_;
    std::map<int, std::unique_ptr<Pending>> pending_; // by descriptor
};

// A persistent EV_READ event on `fd` calling cb(fd, EV_READ, arg), added to
// `base`; null (nothing registered, `fd` left open) if libevent cannot.
// The caller frees it with event_free() before closing `fd`.
event *watch_readable(event_base *base, int fd, void (*cb)(int, short, void *), void *arg) noexcept;

// An accepted client (any record with `int fd` and `event *ev`) watched
// with watch_readable() and kept in `table` under its descriptor.  If
// libevent cannot watch it, its descriptor is closed and it is dropped.
template <class Client>
void keep_watched(event_base *base, std::map<int, std::unique_ptr<Client>> &table,
                  std::unique_ptr<Client> client, void (*cb)(int, short, void *), void *arg)
{
    client->ev = watch_readable(base, client->fd, cb, arg);
    if (!client->ev) {
        ::close(client->fd);
        return;
    }
    int fd = client->fd;
    table[fd] = std::move(client);
}

} // namespace storm::net
