// The UDP socket that carries multicast chunks (Mcast's), with its events
// on the loop and its batched send and receive path (UDP GSO and GRO).
// Private to lib/net: Mcast (mcast.cpp) cuts chunks into segments and puts
// them back together; this file's McastSocket moves the segments.
// mcast_socket.cpp also holds the group's other sockets and addresses of
// mcast.hpp (GroupSocket, local_address_towards, parse_mcast_group).
//
// Threading: everything runs on the event_base's thread.  Not thread safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <netinet/in.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "lib/common/log.hpp"
#include "lib/net/mcast.hpp"

struct event_base;
struct event;

namespace storm::net {

constexpr size_t kIpUdp = 28;            // the IPv4 and UDP headers of a datagram
constexpr size_t kMaxDatagram = 65507;   // the most data a UDP datagram carries
constexpr unsigned kMaxGsoSegments = 64; // segments per system call, at most

class McastSocket {
public:
    // Opens the socket (member of cfg.group on cfg.iface, sending from
    // there), sizes its buffers, turns on GSO and GRO where the kernel has
    // them, and watches it: `readable` is called on each wakeup while reads
    // are not held, `writable` once after each wait_writable() when there is
    // room.  Its lines go to log.child("multicast").  Throws
    // std::system_error naming the step that failed, or std::runtime_error
    // if libevent cannot watch it.
    McastSocket(event_base *base, const McastConfig &cfg, Logger log, std::function<void()> readable,
                std::function<void()> writable);
    ~McastSocket();
    McastSocket(const McastSocket &) = delete;
    McastSocket &operator=(const McastSocket &) = delete;

    // How many segments of `size` bytes (header and data) one send() may
    // carry: with GSO, up to kMaxGsoSegments within one datagram's
    // kMaxDatagram bytes; else one.
    unsigned per_send(size_t size) const noexcept;
    enum class Sent {
        done,    // the kernel took every segment
        busy,    // no room now: wait_writable(), then send them again
        unbatch, // the kernel refused GSO on this path, now off (logged):
                 // cut them again by per_send()
        failed,  // errno says why: they are lost
    };
    // Sends to the group, in one system call, the segments `iov` lays out
    // (a header and its data for each), at most per_send() of them; each
    // but the last of cfg.mtu - kIpUdp bytes, where GSO cuts them.
    // Retried when interrupted.
    Sent send(iovec *iov, size_t niov);
    // Calls `writable` once when the socket has room again.
    void wait_writable();

    // One recvmsg() into `iov`: the bytes received, or -1 with errno set
    // (EINTR: call again; else nothing more now).  Those bytes are one
    // datagram, or several of one sender's that GRO coalesced, each of
    // `seg` bytes but the last.  `truncated`: the datagram did not fit in
    // `iov` and its bytes are unusable.
    ssize_t receive(iovec *iov, size_t niov, size_t &seg, bool &truncated);

    // Mcast::hold_reads, resume_reads and reads_held (mcast.hpp).
    void hold_reads();
    void resume_reads();
    bool reads_held() const noexcept;

private:
    void arm_hold(); // hold_ev_ in hold_

    Logger log_;
    std::chrono::milliseconds hold_;
    std::function<void()> readable_, writable_;
    sockaddr_in to_{}; // the group
    int fd_ = -1;
    bool gso_ = false;
    event *rev_ = nullptr, *wev_ = nullptr;
    event *hold_ev_ = nullptr; // resume_reads() at the end of a hold
};

} // namespace storm::net
