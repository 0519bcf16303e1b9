// libstormmsg's connection to the node's local scheduler (cosched.hpp).
#include "switch_rdma/msg/cosched.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/node/cosched_protocol.h"

namespace storm::rdma::msg {

namespace {

// A decimal u32 from the environment; false if unset or not one.
bool env_u32(const char *name, uint32_t &out)
{
    const char *v = std::getenv(name);
    if (!v || !*v)
        return false;
    char *end = nullptr;
    errno = 0;
    unsigned long x = std::strtoul(v, &end, 10);
    if (*end || errno || x > UINT32_MAX || *v == '-')
        return false;
    out = static_cast<uint32_t>(x);
    return true;
}

std::chrono::microseconds interval_from_env()
{
    uint32_t us = STORM_COSCHED_INTERVAL_US_DEFAULT;
    env_u32(STORM_COSCHED_INTERVAL_ENV, us);
    return std::chrono::microseconds(us);
}

ssize_t send_packet(int fd, const unsigned char *m, size_t n)
{
    ssize_t w;
    do
        w = ::send(fd, m, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    return w;
}

} // namespace

Cosched::Cosched(uint32_t rank, int timeout_s) : rank_(rank), requests_(interval_from_env(), Clock::now())
{
    const char *path = std::getenv(STORM_COSCHED_SOCKET_ENV);
    if (!path || !*path)
        return; // not asked for: no change at all
    if (!env_u32("SLURM_JOB_ID", job_) || job_ == 0) {
        say(std::string("implicit coscheduling off for rank ") + std::to_string(rank_) +
            ": SLURM_JOB_ID is not a job id");
        return;
    }
    enroll(path, timeout_s);
}

void Cosched::enroll(const char *path, int timeout_s)
{
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (std::strlen(path) >= sizeof sa.sun_path)
        return off(std::string(STORM_COSCHED_SOCKET_ENV) + " is too long: " + path);
    std::strcpy(sa.sun_path, path);
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd_ < 0)
        return off(std::string("socket: ") + std::strerror(errno));
    if (connect(fd_, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0)
        return off(std::string("cannot reach the node agent at ") + path + ": " + std::strerror(errno));
    unsigned char m[STORM_COSCHED_MAX_MSG + 1];
    storm_cosched_encode(m, STORM_COSCHED_REGISTER, 0, job_, rank_, 0);
    if (send_packet(fd_, m, STORM_COSCHED_MSG_SIZE) != STORM_COSCHED_MSG_SIZE)
        return off(std::string("cannot register with the node agent at ") + path + ": " +
                   std::strerror(errno));
    // The agent checks the registration (it may ask slurmstepd) before
    // answering: wait for it, as for the attach.
    auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    ssize_t n = -1;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        pollfd p{fd_, POLLIN, 0};
        int r = poll(&p, 1, left < 0 ? 0 : static_cast<int>(left));
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 1)
            do
                n = ::recv(fd_, m, sizeof m - 1, 0);
            while (n < 0 && errno == EINTR);
        break;
    }
    if (n < 0)
        return off("the node agent at " + std::string(path) + " did not answer the registration within " +
                   std::to_string(timeout_s) + " s");
    if (n > STORM_COSCHED_MSG_SIZE && m[0] == STORM_COSCHED_VERSION && m[1] == STORM_COSCHED_ERROR) {
        m[n] = 0;
        std::string why(reinterpret_cast<const char *>(m) + STORM_COSCHED_MSG_SIZE);
        say("implicit coscheduling refused for rank " + std::to_string(rank_) + " of job " +
            std::to_string(job_) + ": " + why + " (messaging continues without it)");
        ::close(fd_);
        fd_ = -1;
        return;
    }
    if (n == 0)
        return off("the node agent closed the connection without answering the registration");
    if (n != STORM_COSCHED_MSG_SIZE || m[0] != STORM_COSCHED_VERSION || m[1] != STORM_COSCHED_OK ||
        m[2] > STORM_COSCHED_SCHEDULED)
        return off("unexpected answer to the registration from the node agent (" + std::to_string(n) +
                   " bytes, type " + std::to_string(m[1]) + ")");
    set_status(m[2] == STORM_COSCHED_SCHEDULED);
}

Cosched::~Cosched()
{
    if (fd_ >= 0)
        ::close(fd_);
}

void Cosched::say(const std::string &what) const noexcept
{
    std::fprintf(stderr, "storm_msg: %s\n", what.c_str());
    std::fflush(stderr); // also when stderr was made a buffered file
}

void Cosched::off(const std::string &why) noexcept
{
    say("implicit coscheduling off for rank " + std::to_string(rank_) + " of job " + std::to_string(job_) +
        ": " + why);
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = -1;
    status_.store(status_unknown, std::memory_order_relaxed);
    requests_.status_changed(true); // nothing pending
    stats_.pending.store(0, std::memory_order_relaxed);
}

void Cosched::set_status(bool scheduled) noexcept
{
    status_.store(scheduled ? status_scheduled : status_not_scheduled, std::memory_order_relaxed);
    requests_.status_changed(scheduled);
    stats_.pending.store(requests_.pending(), std::memory_order_relaxed);
}

void Cosched::read_status() noexcept
{
    unsigned char m[STORM_COSCHED_MAX_MSG];
    while (fd_ >= 0) {
        ssize_t n = ::recv(fd_, m, sizeof m, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return;
            return off(std::string("the connection to the node agent failed: ") + std::strerror(errno));
        }
        if (n == 0)
            return off("the node agent closed the connection");
        if (n != STORM_COSCHED_MSG_SIZE || m[0] != STORM_COSCHED_VERSION || m[1] != STORM_COSCHED_STATUS ||
            m[2] > STORM_COSCHED_SCHEDULED || storm_cosched_get32(m + 4) != job_)
            return off("unexpected message from the node agent (" + std::to_string(n) + " bytes, type " +
                       std::to_string(m[1]) + ")");
        stats_.status_pushes.fetch_add(1, std::memory_order_relaxed);
        set_status(m[2] == STORM_COSCHED_SCHEDULED);
    }
}

void Cosched::arrived(uint32_t src, uint8_t sender) noexcept
{
    if (fd_ < 0)
        return;
    switch (requests_.arrived(src, sender, status() == status_scheduled)) {
    case CoschedRequests::Arrival::counted:
        stats_.arrivals.fetch_add(1, std::memory_order_relaxed);
        stats_.pending.store(requests_.pending(), std::memory_order_relaxed);
        break;
    case CoschedRequests::Arrival::false_arrival:
        stats_.false_arrivals.fetch_add(1, std::memory_order_relaxed);
        break;
    case CoschedRequests::Arrival::ignored:
        break;
    }
}

void Cosched::send_due(Clock::time_point now) noexcept
{
    if (fd_ < 0 || !requests_.due(now))
        return;
    const auto &r = requests_.request();
    unsigned char m[STORM_COSCHED_MSG_SIZE];
    storm_cosched_encode(m, STORM_COSCHED_SCHEDULE, r.status, job_, r.rank, r.count);
    ssize_t w = send_packet(fd_, m, sizeof m);
    if (w == static_cast<ssize_t>(sizeof m)) {
        requests_.attempted(now, true);
        stats_.requests.fetch_add(1, std::memory_order_relaxed);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        requests_.attempted(now, false); // the next request carries these too
        stats_.requests_deferred.fetch_add(1, std::memory_order_relaxed);
    } else {
        return off(std::string("cannot send to the node agent: ") +
                   (w < 0 ? std::strerror(errno) : "short send"));
    }
    stats_.pending.store(requests_.pending(), std::memory_order_relaxed);
}

int Cosched::wait_ms(Clock::time_point now, int most) const noexcept
{
    if (fd_ < 0)
        return most;
    auto w = requests_.wait(now, std::chrono::milliseconds(most));
    // Rounded up: waking before the interval ends would only spin.
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(w).count();
    return ms < most ? static_cast<int>(ms) : most;
}

void Cosched::end() noexcept
{
    if (fd_ < 0)
        return;
    unsigned char m[STORM_COSCHED_MSG_SIZE];
    storm_cosched_encode(m, STORM_COSCHED_UNREGISTER, 0, job_, rank_, 0);
    (void)send_packet(fd_, m, sizeof m); // closing unregisters as well
    ::close(fd_);
    fd_ = -1;
    status_.store(status_unknown, std::memory_order_relaxed);
    stats_.pending.store(0, std::memory_order_relaxed);
}

} // namespace storm::rdma::msg
