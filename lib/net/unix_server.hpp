// A unix control socket of the node agent, on its libevent loop: the
// listening SOCK_SEQPACKET socket and its accept event, shared by the
// buffer pool's control socket (switch_rdma/pool.hpp) and the local
// scheduler's request socket (cosched/channel.hpp).
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

    void start();
    const std::string &path() const noexcept { return path_; }
    // Connections closed at accept by admit_only() and limit_per_uid().
    uint64_t refused() const noexcept { return refused_; }
    bool listening() const noexcept { return fd_ >= 0; }

private:
    static void on_accept(int fd, short, void *arg);
    void close_socket() noexcept; // and removes the file
    // Whether a peer of `cred` may connect now (else logs why, rate-limited).
    bool admit(int fd, const ucred &cred);
    void refusal(const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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
    uint64_t refused_ = 0, refused_logged_ = 0;
    std::chrono::steady_clock::time_point refusal_log_{};
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
