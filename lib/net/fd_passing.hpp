// One message with at most one file descriptor (SCM_RIGHTS) on a unix
// socket: the node agent's pool hands each task its context's window this
// way, and the task (libstormmsg) takes it.
//
// Contract:
//  - send_with_fd() sends `data` in one sendmsg(), with `fd` attached when
//    fd >= 0, retrying EINTR; it returns sendmsg()'s result (bytes sent, or
//    -1 with errno).  MSG_NOSIGNAL is always added to `flags`.
//  - recv_with_fd() receives one message into `buf` (its whole size) in one
//    recvmsg(), once; it returns recvmsg()'s result and sets `fd` to the
//    descriptor passed with it (close-on-exec; the caller owns it), or -1,
//    and `msg_flags` (if given) to the message's flags (MSG_TRUNC...).
//    MSG_CMSG_CLOEXEC is always added to `flags`.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace storm::net {

inline ssize_t send_with_fd(int sock, const std::string &data, int fd, int flags = 0) noexcept
{
    iovec iov{const_cast<char *>(data.data()), data.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
    if (fd >= 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof cbuf;
        cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
}

inline ssize_t recv_with_fd(int sock, std::string &buf, int &fd, int flags = 0,
                            int *msg_flags = nullptr) noexcept
{
    iovec iov{buf.data(), buf.size()};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    ssize_t n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
    int saved = errno;
    fd = -1;
    if (n >= 0)
        for (cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
                std::memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    if (msg_flags)
        *msg_flags = n >= 0 ? mh.msg_flags : 0;
    errno = saved;
    return n;
}

} // namespace storm::net
