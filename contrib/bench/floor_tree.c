/* floor_tree: the machine's floor for a small message to every node and an
 * answer back, the shape of a 64-byte XFER-AND-SIGNAL, with nothing of
 * Storm in it: plain blocking C, persistent TCP connections along a k-ary
 * tree (node i's children are i*F+1 .. i*F+F), no framing, no
 * authentication, no event library.  bench-primitives runs it on the same
 * virtual nodes as Storm's agents, in the same run, so that Storm's latency
 * can be read against what the kernel alone costs here.
 *
 *   floor_tree node I F PORT ADDR0 ADDR1 ...   (in node I's namespace)
 *   floor_tree root REPS PORT ADDR0            (anywhere that reaches ADDR0)
 *
 * A node accepts one connection (its parent's, or the root's for node 0),
 * connects to its children, then relays: a 64-byte message from above goes
 * to every child; a leaf answers at once, an inner node once every child
 * answered.  It exits when its parent closes the connection.  The root
 * sends REPS messages one after the other and prints the round trip's p50
 * and p99 in ms: "floor_tree: N reps: p50 X ms p99 Y ms".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MSG = 64, ACK = 8 };

static void die(const char *what)
{
    fprintf(stderr, "floor_tree: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static struct sockaddr_in address(const char *ip, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
        fprintf(stderr, "floor_tree: '%s' is not an IPv4 address\n", ip);
        exit(2);
    }
    return a;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Connects, retrying for up to 10 s while the peer is not listening yet. */
static int connect_to(const char *ip, int port)
{
    struct sockaddr_in a = address(ip, port);
    for (int tries = 0; tries < 1000; ++tries) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            die("socket");
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            nodelay(fd);
            return fd;
        }
        close(fd);
        usleep(10000);
    }
    die(ip);
    return -1;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write");
        p += w;
        n -= (size_t)w;
    }
}

/* Reads exactly n bytes; 0 on EOF before any. */
static int read_all(int fd, char *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            die("read");
        if (r == 0) {
            if (got == 0)
                return 0;
            errno = EPROTO;
            die("short read");
        }
        got += (size_t)r;
    }
    return 1;
}

static int node(int self, int fanout, int port, int n, char **addrs)
{
    struct sockaddr_in me = address(addrs[self], port);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, (struct sockaddr *)&me, sizeof me) < 0 || listen(ls, 4) < 0)
        die("listen");
    int up = accept(ls, NULL, NULL);
    if (up < 0)
        die("accept");
    close(ls);
    nodelay(up);
    int child[64], nc = 0;
    for (int c = self * fanout + 1; c <= self * fanout + fanout && c < n && nc < 64; ++c)
        child[nc++] = connect_to(addrs[c], port);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = {.events = EPOLLIN, .data.fd = up};
    epoll_ctl(ep, EPOLL_CTL_ADD, up, &e);
    for (int c = 0; c < nc; ++c) {
        e.data.fd = child[c];
        epoll_ctl(ep, EPOLL_CTL_ADD, child[c], &e);
    }
    int waiting = 0;
    char buf[MSG];
    for (;;) {
        struct epoll_event ev[65];
        int k = epoll_wait(ep, ev, 65, -1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            die("epoll_wait");
        for (int j = 0; j < k; ++j) {
            int fd = ev[j].data.fd;
            if (fd == up) {
                if (!read_all(up, buf, MSG))
                    return 0; /* the parent is done */
                for (int c = 0; c < nc; ++c)
                    write_all(child[c], buf, MSG);
                if (nc == 0)
                    write_all(up, buf, ACK);
                else
                    waiting = nc;
            } else {
                if (!read_all(fd, buf, ACK))
                    return 1;
                if (--waiting == 0)
                    write_all(up, buf, ACK);
            }
        }
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int root(int reps, int port, const char *addr0)
{
    int fd = connect_to(addr0, port);
    double *lat = malloc(sizeof *lat * (size_t)reps);
    char msg[MSG] = {0}, ack[ACK];
    for (int r = -10; r < reps; ++r) { /* 10 to warm up */
        double t0 = now_ms();
        write_all(fd, msg, MSG);
        if (!read_all(fd, ack, ACK)) {
            fprintf(stderr, "floor_tree: node 0 closed the connection\n");
            return 1;
        }
        if (r >= 0)
            lat[r] = now_ms() - t0;
    }
    qsort(lat, (size_t)reps, sizeof *lat, cmp);
    printf("floor_tree: %d reps: p50 %.3f ms p99 %.3f ms\n", reps, lat[reps / 2], lat[reps * 99 / 100]);
    close(fd);
    free(lat);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "node") == 0) {
        int self = atoi(argv[2]), fanout = atoi(argv[3]), port = atoi(argv[4]), n = argc - 5;
        if (self < 0 || self >= n || fanout < 1 || fanout > 64 || port < 1 || port > 65535) {
            fprintf(stderr, "floor_tree: bad node arguments\n");
            return 2;
        }
        return node(self, fanout, port, n, argv + 5);
    }
    if (argc == 5 && strcmp(argv[1], "root") == 0) {
        int reps = atoi(argv[2]), port = atoi(argv[3]);
        if (reps < 1 || port < 1 || port > 65535) {
            fprintf(stderr, "floor_tree: bad root arguments\n");
            return 2;
        }
        return root(reps, port, argv[4]);
    }
    fprintf(stderr, "usage: floor_tree node I FANOUT PORT ADDR0 ADDR1 ...\n"
                    "       floor_tree root REPS PORT ADDR0\n");
    return 2;
}
