#include "lib/net/unix_server.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/un.h>
#include <system_error>
#include <unistd.h>

#include <event2/event.h>

namespace storm::net {

UnixServer::UnixServer(event_base *base, std::string path, Logger log, std::string prefix, std::string what,
                       OnClient on_client)
    : base_(base), path_(std::move(path)), log_(log.child(prefix)), prefix_(std::move(prefix)),
      what_(std::move(what)), on_client_(std::move(on_client))
{
}

UnixServer::~UnixServer()
{
    close_socket();
    for (auto &[fd, p] : pending_)
        event_free(p->ev);
}

void UnixServer::admit_only(std::vector<uid_t> uids)
{
    only_ = true;
    admitted_ = std::move(uids);
}

void UnixServer::limit_per_uid(size_t n, std::vector<uid_t> exempt)
{
    only_ = false;
    per_uid_ = n;
    admitted_ = std::move(exempt);
}

void UnixServer::first_request_within(std::chrono::milliseconds wait, OnExpired on_expired)
{
    first_wait_ = wait;
    on_expired_ = std::move(on_expired);
}

void UnixServer::warn(Counted &c, const char *fmt, ...)
{
    ++c.count;
    auto now = std::chrono::steady_clock::now();
    if (c.logged != 0 && now - c.last < std::chrono::seconds(10))
        return; // counted: the next line says how many
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    uint64_t more = c.count - c.logged - 1;
    if (more)
        log_.warning("%s (and %llu more %s since the last such line)", line,
                     static_cast<unsigned long long>(more), c.noun);
    else
        log_.warning("%s (further %s are counted, logged every 10 s)", line, c.noun);
    c.logged = c.count;
    c.last = now;
}

bool UnixServer::admit(int fd, const ucred &cred)
{
    bool privileged =
        cred.uid == 0 || std::find(admitted_.begin(), admitted_.end(), cred.uid) != admitted_.end();
    if (only_) {
        if (!privileged)
            warn(refusals_,
                 "closed a connection of uid %u (pid %d) to the %s %s: only root and SlurmdUser may use it",
                 static_cast<unsigned>(cred.uid), static_cast<int>(cred.pid), what_.c_str(), path_.c_str());
        return privileged;
    }
    if (per_uid_ == 0 || privileged)
        return true;
    auto &open = open_by_uid_[cred.uid];
    open.erase(std::remove_if(open.begin(), open.end(),
                              [](const std::pair<int, ino_t> &c) {
                                  struct stat st;
                                  return fstat(c.first, &st) != 0 || !S_ISSOCK(st.st_mode) ||
                                         st.st_ino != c.second;
                              }),
               open.end());
    if (open.size() >= per_uid_) {
        warn(refusals_,
             "closed a connection of uid %u (pid %d) to the %s %s: the uid holds %zu connections to it "
             "already (the limit)",
             static_cast<unsigned>(cred.uid), static_cast<int>(cred.pid), what_.c_str(), path_.c_str(),
             open.size());
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) == 0)
        open.emplace_back(fd, st.st_ino);
    return true;
}

void UnixServer::watch_deadline(int fd, const ucred &cred)
{
    if (first_wait_.count() <= 0)
        return;
    settled(fd); // a descriptor the owner closed without saying so
    struct stat st;
    if (fstat(fd, &st) != 0)
        return;
    auto p = std::make_unique<Pending>(Pending{this, fd, st.st_ino, cred, nullptr});
    p->ev = event_new(base_, -1, 0, on_deadline, p.get());
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(first_wait_).count();
    timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
    if (!p->ev || event_add(p->ev, &tv) != 0) {
        // Without a timer the connection is served as before the deadline.
        if (p->ev)
            event_free(p->ev);
        log_.error("cannot watch a connection's first request on the %s %s", what_.c_str(), path_.c_str());
        return;
    }
    pending_[fd] = std::move(p);
}

void UnixServer::settled(int fd) noexcept
{
    auto it = pending_.find(fd);
    if (it == pending_.end())
        return;
    event_free(it->second->ev);
    pending_.erase(it);
}

void UnixServer::on_deadline(int, short, void *arg)
{
    auto *p = static_cast<Pending *>(arg);
    UnixServer *self = p->self;
    int fd = p->fd;
    ino_t ino = p->ino;
    ucred cred = p->cred;
    self->settled(fd); // frees *p
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_ino != ino)
        return; // the owner closed it already
    self->warn(self->expiries_,
               "closed a connection of uid %u (pid %d) to the %s %s: no request within %lld ms of its accept",
               static_cast<unsigned>(cred.uid), static_cast<int>(cred.pid), self->what_.c_str(),
               self->path_.c_str(), static_cast<long long>(self->first_wait_.count()));
    self->on_expired_(fd);
}

void UnixServer::close_socket() noexcept
{
    if (ev_) {
        event_free(ev_);
        ev_ = nullptr;
    }
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
        unlink(path_.c_str());
    }
}

void UnixServer::start()
{
    if (fd_ >= 0)
        throw std::logic_error(prefix_ + ": the " + what_ + " " + path_ + " is bound already");
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path_.size() >= sizeof sa.sun_path)
        throw std::runtime_error(prefix_ + ": " + what_ + " path too long: " + path_);
    std::memcpy(sa.sun_path, path_.c_str(), path_.size() + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        throw std::system_error(errno, std::generic_category(), prefix_ + ": socket");
    unlink(path_.c_str()); // a stale socket of an earlier slurmd
    if (bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
        int e = errno;
        ::close(fd);
        throw std::system_error(e, std::generic_category(), prefix_ + ": bind " + path_);
    }
    fd_ = fd; // from here on a failure removes the file again
    // Tasks run as their users; each peer is checked with SO_PEERCRED.
    if (chmod(path_.c_str(), 0666) != 0 || listen(fd_, 128) != 0) {
        int e = errno;
        close_socket();
        throw std::system_error(e, std::generic_category(), prefix_ + ": listen " + path_);
    }
    ev_ = event_new(base_, fd_, EV_READ | EV_PERSIST, on_accept, this);
    if (!ev_ || event_add(ev_, nullptr) != 0) {
        close_socket();
        throw std::runtime_error(prefix_ + ": cannot register the " + what_ + "'s events");
    }
}

void UnixServer::on_accept(int fd, short, void *arg)
{
    auto *self = static_cast<UnixServer *>(arg);
    for (;;) {
        int c = accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                self->log_.error("accept on %s: %s", self->path_.c_str(), std::strerror(errno));
            return;
        }
        ucred cred{};
        socklen_t len = sizeof cred;
        if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
            self->log_.error("cannot read a client's credentials: %s", std::strerror(errno));
            ::close(c);
            continue;
        }
        if (!self->admit(c, cred)) {
            ::close(c);
            continue;
        }
        self->watch_deadline(c, cred);
        self->on_client_(c, cred);
    }
}

event *watch_readable(event_base *base, int fd, void (*cb)(int, short, void *), void *arg) noexcept
{
    event *ev = event_new(base, fd, EV_READ | EV_PERSIST, cb, arg);
    if (ev && event_add(ev, nullptr) != 0) {
        event_free(ev);
        ev = nullptr;
    }
    return ev;
}

} // namespace storm::net
