#include "lib/net/unix_client.hpp"

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace storm::net {

std::string unix_request(const std::string &path, std::string_view message, int timeout_ms,
                         const std::string &who, size_t max_answer,
                         const std::function<bool(std::string_view)> &interim)
{
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path)
        throw std::runtime_error("socket path too long: " + path);
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0)
        throw UnixUnreachable("cannot reach " + who + " at " + path + ": " + std::strerror(errno));
    if (send(fd, message.data(), message.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(message.size()))
        throw std::runtime_error("cannot send to " + who + " at " + path + ": " + std::strerror(errno));
    std::string buf;
    do {
        pollfd p{fd, POLLIN, 0};
        int n;
        do
            n = poll(&p, 1, timeout_ms < 0 ? -1 : timeout_ms);
        while (n < 0 && errno == EINTR);
        if (n == 0)
            throw UnixTimeout(who + " at " + path + " did not answer within " + std::to_string(timeout_ms) +
                              " ms");
        buf.assign(max_answer, '\0');
        ssize_t got;
        do
            got = recv(fd, buf.data(), buf.size(), 0);
        while (got < 0 && errno == EINTR);
        if (got <= 0)
            throw std::runtime_error(who + " at " + path + " closed the connection without an answer");
        buf.resize(static_cast<size_t>(got));
    } while (interim && interim(buf));
    return buf;
}

} // namespace storm::net
