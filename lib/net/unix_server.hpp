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
//
// watch_readable() is the companion for the accepted connections: one
// persistent EV_READ event per connection; keep_watched() adds it to a
// client and keeps the client in its owner's table.
#pragma once

#include <functional>
#include <map>
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

    void start();
    const std::string &path() const noexcept { return path_; }
    bool listening() const noexcept { return fd_ >= 0; }

private:
    static void on_accept(int fd, short, void *arg);
    void close_socket() noexcept; // and removes the file

    event_base *base_;
    std::string path_;
    Logger log_;                // log's child named `prefix`
    std::string prefix_, what_; // prefix_ starts the errors thrown
    OnClient on_client_;
    int fd_ = -1;
    event *ev_ = nullptr;
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
