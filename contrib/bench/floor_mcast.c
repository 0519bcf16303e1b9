/* floor_mcast: the machine's floor for broadcasting a file to every node by
 * multicast, with nothing of Storm in it: plain blocking C, one sender, no
 * encryption, no checksums, no announcements, no repairs, no flow control
 * beyond the sender's socket buffer.  Each receiver takes the datagrams
 * straight into its write buffer (one system call per 64 KiB where the
 * kernel coalesces them, UDP GRO) and writes the file in 256 KiB pieces;
 * the sender sends in 64 KiB batches (UDP GSO), like Storm's agents.
 * bench-bcast runs it on the same virtual nodes, in turns with Storm, so
 * that Storm's time can be read against what the kernel alone costs here:
 * the datagrams through the bridge and every node's page cache.
 *
 *   floor_mcast recv GROUP PORT ADDR FILE SIZE MTU   (in a node's namespace)
 *   floor_mcast send GROUP PORT ADDR SOURCE COPY MTU (in another one)
 *
 * ADDR is the node's own address (the interface of the group).  A receiver
 * joins the group, prints "ready", writes SIZE bytes to FILE (created or
 * truncated) and prints "done NS", CLOCK_MONOTONIC in ns.  The sender
 * prints "start NS", sends SOURCE, writing it to COPY as it goes (the
 * sender's node gets its copy too), and prints "sent NS".  A datagram lost
 * or out of order, or none for 30 s, makes the receiver exit 1 with the
 * offset it stopped at: the floor assumes a network that loses nothing,
 * and the caller reports such a run as failed.  Every segment is an 8-byte
 * offset and MTU - 36 bytes of data.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum { HDR = 8, IPUDP = 28, BATCH = 65000, PIECE = 256 << 10 };

static void die(const char *what)
{
    fprintf(stderr, "floor_mcast: %s: %s\n", what, strerror(errno));
    exit(1);
}

static unsigned long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static unsigned long number(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || end == s) {
        fprintf(stderr, "floor_mcast: bad %s '%s'\n", what, s);
        exit(2);
    }
    return v;
}

static struct in_addr address(const char *s, const char *what)
{
    struct in_addr a;
    if (inet_pton(AF_INET, s, &a) != 1) {
        fprintf(stderr, "floor_mcast: bad %s '%s'\n", what, s);
        exit(2);
    }
    return a;
}

static void write_all(int fd, const char *p, size_t n, off_t off)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write");
        p += w;
        n -= (size_t)w;
        off += w;
    }
}

static int group_socket(struct in_addr group, unsigned port, struct in_addr iface, int receive)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0)
        die("socket");
    if (receive) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = group};
        struct ip_mreq m = {.imr_multiaddr = group, .imr_interface = iface};
        int rcv = 32 << 20;
        struct timeval idle = {.tv_sec = 30};
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
            die("bind");
        if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) < 0)
            die("joining the group");
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) < 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
        setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);
    } else {
        unsigned char zero = 0;
        int snd = 256 << 10;
        if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &iface, sizeof iface) < 0)
            die("IP_MULTICAST_IF");
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &zero, sizeof zero);
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof snd) < 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd);
    }
    return fd;
}

/* Segments of one file: SEG bytes each on the wire, SEG - HDR of data. */
static int receive(struct in_addr group, unsigned port, struct in_addr iface, const char *file,
                   unsigned long long size, size_t seg)
{
    size_t data = seg - HDR, per = BATCH / seg;
    int fd = group_socket(group, port, iface, 1);
    int out = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0)
        die(file);
    /* a piece and one batch beyond it: a batch never wraps */
    char *buf = malloc(PIECE + per * data);
    uint64_t *hdr = calloc(per, sizeof *hdr);
    struct iovec *iov = calloc(2 * per, sizeof *iov);
    if (!buf || !hdr || !iov)
        die("memory");
    printf("ready\n");
    fflush(stdout);
    unsigned long long got = 0, written = 0;
    size_t fill = 0;
    while (got < size) {
        for (size_t i = 0; i < per; i++) {
            iov[2 * i] = (struct iovec){&hdr[i], HDR};
            iov[2 * i + 1] = (struct iovec){buf + fill + i * data, data};
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2 * per};
        ssize_t n = recvmsg(fd, &m, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, "floor_mcast: stopped at %llu of %llu bytes: %s\n", got, size,
                    errno == EAGAIN ? "nothing for 30 s" : strerror(errno));
            return 1;
        }
        if (m.msg_flags & MSG_TRUNC) {
            fprintf(stderr, "floor_mcast: a datagram larger than %zu bytes at %llu\n", per * seg, got);
            return 1;
        }
        size_t segs = ((size_t)n + seg - 1) / seg, bytes = (size_t)n - segs * HDR;
        for (size_t i = 0; i < segs; i++)
            if (hdr[i] != got + i * data) {
                fprintf(stderr, "floor_mcast: lost or reordered datagram at %llu (got %llu)\n",
                        got + i * data, (unsigned long long)hdr[i]);
                return 1;
            }
        got += bytes;
        fill += bytes;
        if (fill >= PIECE || got >= size) {
            write_all(out, buf, fill, (off_t)written);
            written += fill;
            fill = 0;
        }
    }
    if (close(out) < 0)
        die("close");
    printf("done %llu\n", now_ns());
    return 0;
}

static int send_file(struct in_addr group, unsigned port, struct in_addr iface, const char *source,
                     const char *copy, size_t seg)
{
    size_t data = seg - HDR, per = BATCH / seg;
    int gso = (int)seg;
    int fd = group_socket(group, port, iface, 0);
    int in = open(source, O_RDONLY | O_CLOEXEC);
    int out = open(copy, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    struct stat st;
    if (in < 0 || fstat(in, &st) < 0)
        die(source);
    if (out < 0)
        die(copy);
    int gsok = setsockopt(fd, SOL_UDP, UDP_SEGMENT, &gso, sizeof gso) == 0;
    size_t size = (size_t)st.st_size;
    char *file = malloc(size + 1), *batch = malloc(per * seg);
    if (!file || !batch)
        die("memory");
    printf("start %llu\n", now_ns());
    fflush(stdout);
    /* Batches of full segments across the whole file (only the file's last
     * segment is short), the file read and copied a piece ahead of them. */
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = group};
    size_t have = 0, take = gsok ? per : 1;
    for (size_t off = 0; off < size;) {
        while (have < size && have < off + take * data) {
            ssize_t r = pread(in, file + have, size - have < PIECE ? size - have : PIECE, (off_t)have);
            if (r <= 0)
                die(source);
            write_all(out, file + have, (size_t)r, (off_t)have);
            have += (size_t)r;
        }
        size_t n = 0;
        for (size_t i = 0; i < take && off < size; i++) {
            size_t d = size - off < data ? size - off : data;
            uint64_t h = off;
            memcpy(batch + n, &h, HDR);
            memcpy(batch + n + HDR, file + off, d);
            n += HDR + d;
            off += d;
        }
        while (sendto(fd, batch, n, 0, (struct sockaddr *)&to, sizeof to) < 0)
            if (errno != EINTR && errno != ENOBUFS)
                die("send");
    }
    if (close(out) < 0)
        die("close");
    printf("sent %llu\n", now_ns());
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 8 && !strcmp(argv[1], "recv")) {
        unsigned long mtu = number(argv[7], "MTU");
        if (mtu < 576 || mtu > 9000)
            return fprintf(stderr, "floor_mcast: MTU %lu outside 576-9000\n", mtu), 2;
        return receive(address(argv[2], "group"), (unsigned)number(argv[3], "port"),
                       address(argv[4], "address"), argv[5], number(argv[6], "size"), mtu - IPUDP);
    }
    if (argc == 8 && !strcmp(argv[1], "send")) {
        unsigned long mtu = number(argv[7], "MTU");
        if (mtu < 576 || mtu > 9000)
            return fprintf(stderr, "floor_mcast: MTU %lu outside 576-9000\n", mtu), 2;
        return send_file(address(argv[2], "group"), (unsigned)number(argv[3], "port"),
                         address(argv[4], "address"), argv[5], argv[6], mtu - IPUDP);
    }
    fprintf(stderr, "usage: floor_mcast recv GROUP PORT ADDR FILE SIZE MTU\n"
                    "       floor_mcast send GROUP PORT ADDR SOURCE COPY MTU\n");
    return 2;
}
