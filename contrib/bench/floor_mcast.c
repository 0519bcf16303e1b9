/* floor_mcast: the machine's floor for broadcasting a file to every node by
 * multicast, with nothing of Storm in it: plain C, one sender, no
 * checksums, no tree, no repairs.  Each receiver takes the datagrams
 * straight into its write buffer (one system call per 64 KiB where the
 * kernel coalesces them, UDP GRO) and writes the file in pieces of 63
 * pages (PIECE, below); the sender sends in 64 KiB batches (UDP GSO), like
 * Storm's agents.  Like them too, a receiver reads the data when it is
 * told it is there: the sender multicasts a mark (8 bytes: the stream's
 * bytes sent so far) to port PORT + 2 after every CHUNK of the stream (and
 * when its window is full with every receiver past the last mark), and a
 * receiver sleeps on the marks, reading the data socket only up to the
 * last mark (and at every tick, a second, without one), so that it wakes
 * once a chunk, not once a batch: with N
 * receivers on two cores, reading at every batch costs every receiver a
 * wakeup per 64 KiB, as it did Storm's agents until they held their reads
 * (lib/net/mcast.hpp: at 256 virtual nodes, 58,000 context switches
 * against 16,000).  bench-bcast and bench-scale run it on the same
 * virtual nodes, in turns with Storm, so that Storm's time can be read against
 * what the kernel alone costs here: the datagrams through the bridge and
 * every node's page cache.
 *
 *   floor_mcast recv GROUP PORT ADDR FILE SIZE MTU SENDER [sealed]
 *                                                  (in a node's namespace)
 *   floor_mcast send GROUP PORT ADDR SOURCE COPY MTU RECEIVERS [sealed]
 *                                                  (in another one)
 *
 * ADDR is the node's own address (the interface of the group).  The group's
 * port PORT carries the data and PORT + 2 the marks; the receivers' words
 * go to SENDER's port PORT + 1.  A receiver joins the group, prints
 * "ready", writes SIZE bytes to FILE (created or truncated) and prints
 * "done NS", CLOCK_MONOTONIC in ns.  The sender
 * prints "start NS", sends SOURCE, writing it to COPY as it goes (the
 * sender's node gets its copy too), and prints "sent NS".
 *
 * Flow control, the least there is: each receiver tells the sender (a
 * datagram to SENDER, port PORT + 1) how many bytes it holds, every STEP
 * bytes and again while it waits; the sender keeps at most WINDOW bytes
 * beyond what the slowest of the RECEIVERS holds (4 MiB; the environment's
 * FLOOR_WINDOW, in bytes, overrides it).  On the project's 2-core test
 * machine (12 MB, unshaped, 3 runs each) a window of 1 MiB left the sender
 * waiting on the slowest of 511 receivers: 4.3-5.2 s bare and 4.1-4.8 s
 * sealed, against 3.0-3.6 s and 3.5-4.6 s with 4 MiB, slower than Storm's
 * 3.4-4.3 s, whose window grows to 16 MiB; at 63 receivers 4 MiB was as fast
 * as 1 or 16 (0.21-0.26 s), and 16 MiB lost a datagram at 511.
 *
 * "sealed": the same work as Storm's sealed chunks, AES-128-GCM over every
 * byte, by the library Storm's agents choose (Intel's multi-buffer crypto
 * library where it has its VAES code for the CPU, else OpenSSL; the sender
 * prints "cipher NAME"): the sender encrypts each piece and sends
 * it with its 16-byte tag; each receiver decrypts and checks it before
 * writing it.  bench-scale reports the ratio to both floors: the plain one
 * is what the kernel costs, the sealed one what any broadcast that keeps
 * a job's bytes its own costs here, where every node decrypts on the same
 * two cores.
 *
 * A datagram lost or out of order, a piece that fails its tag, or nothing
 * for 30 s (10 minutes before the first datagram) makes the receiver exit 1
 * with the offset it stopped at, after telling the sender, which then stops
 * every receiver and exits 3 ("lost a datagram"): the floor assumes a
 * network that loses nothing, and the caller reports such a run as lost.
 * A sender that hears nothing for 30 s stops them too, and exits 1.
 * Every segment is an 8-byte offset and MTU - 36 bytes of data.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <openssl/evp.h>
#ifdef STORM_WITH_IPSEC_MB
#include <dlfcn.h>
#include <intel-ipsec-mb.h>
#endif
#include <poll.h>
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

/* PIECE: 63 pages, not 64.  On the project's 2-core test machine (Linux
 * 6.18, ext4, a VM) writes of 256 KiB at offsets aligned to 256 KiB cost
 * the kernel's copy into the page cache several times what other sizes do,
 * as Storm's agents found for their chunks (lib/net/mcast.hpp): 12 MB to
 * 256 nodes in turns, 3 runs each, took 6.3-7.3 s in 256 KiB pieces,
 * 2.7-4.9 s in pieces of 63 pages and 2.6-3.6 s in pieces of 64,000 bytes
 * (more writes), against storm-bcast's 3.5-5.6 s; pieces of 255 pages took
 * 7.5-9.9 s and of 546 segments (Storm's chunk) 3.7-5.8 s (a receiver
 * answers after each piece's write: the sender, its window full, may wait
 * on larger pieces; not measured apart). */
enum { HDR = 8, IPUDP = 28, BATCH = 65000, PIECE = 63 << 12, TAG = 16 };
/* Flow control: a receiver speaks every STEP bytes, and every TICK_MS
 * while it waits (IDLE_TICKS of them: 30 s); the sender keeps WINDOW in
 * flight.  A tick of 100 ms woke every waiting receiver ten times a second
 * and sent the sender as many words: at 1000 virtual nodes, where a run
 * takes a minute and a mark comes every few seconds, 650,000 of each. */
enum { STEP = 256 << 10, WINDOW = 4 << 20, TICK_MS = 1000, IDLE_TICKS = 30 };
/* Before its first datagram a receiver waits START_TICKS (10 min): the
 * caller starts the sender once every receiver is ready, and on the
 * project's 2-core test machine starting 511 receivers took more than 30 s,
 * so the first ones gave up before the sender began (a run at 512 nodes
 * then failed every time, those receivers holding nothing). */
enum { START_TICKS = 600 };
/* A mark every CHUNK bytes of the stream: Storm's chunk at the usual MTU
 * (546 segments of 1,440 bytes, lib/net/mcast.hpp), an announcement every
 * 0.75 MB. */
enum { CHUNK = 786240 };
static unsigned long long window = WINDOW; /* FLOOR_WINDOW overrides it (bytes) */

/* A receiver's word that it lost a datagram and gave up: the sender stops. */
#define LOST (~0ull)

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
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
            die("bind");
        if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) < 0)
            die("joining the group");
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) < 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
        setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
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

/* The stream on the wire: the file itself, or, sealed, each PIECE of it
 * encrypted and followed by its tag. */
static unsigned long long stream_size(unsigned long long size, int sealed)
{
    return sealed ? size + (size + PIECE - 1) / PIECE * TAG : size;
}

static const unsigned char key[16] = "floor_mcast key";

#ifdef STORM_WITH_IPSEC_MB
/* Intel's multi-buffer crypto library, where it has its VAES code for this
 * CPU: Storm's agents seal and open their chunks with it there
 * (lib/net/mcast_cipher_ipsec_mb.cpp), 2.7 times as fast as OpenSSL 3.0 on
 * the project's test machine, so the floor does too.  Loaded as Storm
 * loads it; NULL where it does not load or has no VAES code. */
static IMB_MGR *imb_mgr(void)
{
    static int tried;
    static IMB_MGR *m;
    if (tried)
        return m;
    tried = 1;
    void *h = dlopen("libIPSec_MB.so.1", RTLD_NOW | RTLD_LOCAL);
    IMB_MGR *(*alloc)(uint64_t) = h ? (IMB_MGR * (*)(uint64_t)) dlsym(h, "alloc_mb_mgr") : NULL;
    void (*init)(IMB_MGR *, IMB_ARCH *) =
        h ? (void (*)(IMB_MGR *, IMB_ARCH *))dlsym(h, "init_mb_mgr_auto") : NULL;
    int (*error)(IMB_MGR *) = h ? (int (*)(IMB_MGR *))dlsym(h, "imb_get_errno") : NULL;
    if (!alloc || !init || !error || !(m = alloc(0)))
        return m = NULL;
    IMB_ARCH arch = IMB_ARCH_NONE;
    init(m, &arch);
    const uint64_t need = IMB_FEATURE_VAES | IMB_FEATURE_VPCLMULQDQ;
    if (arch != IMB_ARCH_AVX512 || (m->features & need) != need || error(m) != 0)
        m = NULL; /* the manager is the process's, freed at its exit */
    return m;
}
#endif

/* Who computes AES-128-GCM here, as Storm's agents choose it. */
static const char *cipher_name(void)
{
#ifdef STORM_WITH_IPSEC_MB
    if (imb_mgr())
        return "intel-ipsec-mb (VAES, AVX-512)";
#endif
    return "OpenSSL";
}

/* AES-128-GCM of one piece (IV: its index); the key is fixed, the floor
 * keeps nothing secret, it only does the work. */
static int gcm(EVP_CIPHER_CTX *c, int enc, unsigned long long piece, const unsigned char *in, size_t n,
               unsigned char *out, unsigned char *tag)
{
    unsigned char iv[12] = {0};
    int len = 0, fin = 0;
    memcpy(iv, &piece, sizeof piece);
#ifdef STORM_WITH_IPSEC_MB
    IMB_MGR *m = imb_mgr();
    if (m) {
        static DECLARE_ALIGNED(struct gcm_key_data keys, 64);
        static int keyed;
        DECLARE_ALIGNED(struct gcm_context_data ctx, 64);
        unsigned char got[TAG], diff = 0;
        if (!keyed) {
            IMB_AES128_GCM_PRE(m, key, &keys);
            keyed = 1;
        }
        if (enc)
            IMB_AES128_GCM_ENC(m, &keys, &ctx, out, in, n, iv, NULL, 0, tag, TAG);
        else
            IMB_AES128_GCM_DEC(m, &keys, &ctx, out, in, n, iv, NULL, 0, got, TAG);
        for (size_t i = 0; !enc && i < TAG; i++)
            diff |= (unsigned char)(got[i] ^ tag[i]);
        return diff == 0;
    }
#endif
    if (EVP_CipherInit_ex(c, EVP_aes_128_gcm(), NULL, key, iv, enc) != 1)
        return 0;
    if (!enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG, tag) != 1)
        return 0;
    if (EVP_CipherUpdate(c, out, &len, in, (int)n) != 1 || EVP_CipherFinal_ex(c, out + len, &fin) != 1)
        return 0;
    return !enc || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG, tag) == 1;
}

/* A receiver's word to the sender: the bytes of the stream it holds. */
static void tell(int fd, const struct sockaddr_in *to, unsigned long long got)
{
    uint64_t v = got;
    sendto(fd, &v, sizeof v, 0, (const struct sockaddr *)to, sizeof *to);
}

/* Segments of one file: SEG bytes each on the wire, SEG - HDR of data. */
static int receive(struct in_addr group, unsigned port, struct in_addr iface, const char *file,
                   unsigned long long size, size_t seg, struct in_addr sender, int sealed)
{
    size_t data = seg - HDR, per = BATCH / seg, unit = sealed ? PIECE + TAG : PIECE;
    unsigned long long total = stream_size(size, sealed), told = 0, piece = 0;
    /* a word every STEP, or every quarter of a smaller window (FLOOR_WINDOW) */
    unsigned long long step = window / 4 < STEP ? window / 4 : STEP;
    int fd = group_socket(group, port, iface, 1), marks = group_socket(group, port + 2, iface, 1),
        back = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)(port + 1)), .sin_addr = sender};
    if (back < 0)
        die("socket");
    int out = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0)
        die(file);
    /* a piece and one batch beyond it: a batch never wraps */
    char *buf = malloc(unit + per * data), *plain = malloc(PIECE);
    uint64_t *hdr = calloc(per, sizeof *hdr);
    struct iovec *iov = calloc(2 * per, sizeof *iov);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!buf || !plain || !hdr || !iov || !c)
        die("memory");
    /* the cipher's library loaded and keyed (by sealing nothing) before
     * "ready", as Storm's agents have theirs before any broadcast: loading
     * it on the first piece cost each receiver milliseconds inside the
     * measured time */
    if (sealed) {
        unsigned char z[TAG] = {0}, t[TAG] = {0};
        (void)gcm(c, 1, 0, z, 0, z, t);
    }
    printf("ready\n");
    fflush(stdout);
    unsigned long long got = 0, written = 0, marked = 0;
    size_t fill = 0;
    int idle = 0;
    while (got < total) {
        /* asleep on the marks, and on the data too while a mark announced
         * bytes that have not come yet */
        struct pollfd p[2] = {{.fd = marks, .events = POLLIN}, {.fd = fd, .events = POLLIN}};
        int ready = poll(p, got < marked ? 2 : 1, TICK_MS);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0)
            die("poll");
        for (uint64_t v; recv(marks, &v, sizeof v, MSG_DONTWAIT) == sizeof v;) {
            if (v == LOST) {
                fprintf(stderr, "floor_mcast: stopped at %llu of %llu bytes: the sender stopped\n", got, total);
                return 1;
            }
            if (v > marked)
                marked = v;
        }
        /* every datagram queued now (also after a tick without a mark: a
         * mark may be lost) */
        int heard = 0;
        for (;;) {
            for (size_t i = 0; i < per; i++) {
                iov[2 * i] = (struct iovec){&hdr[i], HDR};
                iov[2 * i + 1] = (struct iovec){buf + fill + i * data, data};
            }
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2 * per};
            ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN)
                break;
            if (n < 0) {
                fprintf(stderr, "floor_mcast: stopped at %llu of %llu bytes: %s\n", got, total, strerror(errno));
                return 1;
            }
            heard = 1;
            if (m.msg_flags & MSG_TRUNC) {
                fprintf(stderr, "floor_mcast: a datagram larger than %zu bytes at %llu\n", per * seg, got);
                return 1;
            }
            size_t segs = ((size_t)n + seg - 1) / seg, bytes = (size_t)n - segs * HDR;
            for (size_t i = 0; i < segs; i++)
                if (hdr[i] != got + i * data) {
                    fprintf(stderr, "floor_mcast: lost or reordered datagram at %llu (got %llu)\n",
                            got + i * data, (unsigned long long)hdr[i]);
                    tell(back, &to, LOST);
                    return 1;
                }
            got += bytes;
            fill += bytes;
            /* whole pieces out of the buffer, what follows them moved to its start */
            size_t at = 0;
            while (fill - at >= unit || (got >= total && at < fill)) {
                size_t n_in = fill - at < unit ? fill - at : unit, n_out = sealed ? n_in - TAG : n_in;
                const char *q = buf + at;
                if (sealed) {
                    if (n_in <= TAG || !gcm(c, 0, piece, (const unsigned char *)q, n_out, (unsigned char *)plain,
                                            (unsigned char *)q + n_out)) {
                        fprintf(stderr, "floor_mcast: piece %llu fails its tag\n", piece);
                        return 1;
                    }
                    q = plain;
                }
                write_all(out, q, n_out, (off_t)written);
                written += n_out;
                at += n_in;
                piece++;
            }
            if (at > 0) {
                memmove(buf, buf + at, fill - at);
                fill -= at;
            }
            if (got >= total)
                break;
        }
        if (heard) {
            idle = 0;
            if (got - told >= step || got >= total) {
                tell(back, &to, got);
                told = got;
            }
        } else if (ready == 0) { /* a tick of nothing */
            if (++idle >= (got ? IDLE_TICKS : START_TICKS)) {
                fprintf(stderr, "floor_mcast: stopped at %llu of %llu bytes: %s\n", got, total,
                        got ? "nothing for 30 s" : "nothing in 10 min");
                return 1;
            }
            tell(back, &to, got); /* the sender may have missed the last word */
        }
    }
    if (close(out) < 0)
        die("close");
    printf("done %llu\n", now_ns());
    EVP_CIPHER_CTX_free(c);
    return 0;
}

/* The sender's view of its receivers: what each holds, by address. */
struct acks {
    uint32_t *addr;          /* open addressing, 0: free */
    unsigned long long *got; /* per slot */
    size_t slots, known, expected, lost;
};

/* The least any receiver holds (0 until every one has spoken). */
static unsigned long long slowest(const struct acks *a)
{
    if (a->known < a->expected)
        return 0;
    unsigned long long min = ~0ull;
    for (size_t i = 0; i < a->slots; i++)
        if (a->addr[i] && a->got[i] < min)
            min = a->got[i];
    return min;
}

/* Takes every word waiting on `fd`; waits up to `ms` for the first. */
static int hear(int fd, struct acks *a, int ms)
{
    int heard = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, heard ? 0 : ms) <= 0)
            return heard;
        uint64_t v;
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        if (recvfrom(fd, &v, sizeof v, MSG_DONTWAIT, (struct sockaddr *)&from, &fl) != sizeof v)
            continue;
        heard = 1;
        uint32_t k = from.sin_addr.s_addr;
        size_t i = (k * 2654435761u) % a->slots;
        while (a->addr[i] && a->addr[i] != k)
            i = (i + 1) % a->slots;
        if (!a->addr[i]) {
            if (a->known == a->expected)
                continue; /* not one of ours */
            a->addr[i] = k;
            a->known++;
        }
        if (v == LOST)
            a->lost++;
        else if (v > a->got[i])
            a->got[i] = v;
    }
}

/* A mark: the stream's bytes sent so far, to the group's port PORT + 2. */
static void mark(int fd, const struct sockaddr_in *to, unsigned long long sent)
{
    struct sockaddr_in m = *to;
    uint64_t v = sent;
    m.sin_port = htons((uint16_t)(ntohs(to->sin_port) + 2));
    sendto(fd, &v, sizeof v, 0, (const struct sockaddr *)&m, sizeof m);
}

/* A mark of LOST: every receiver gives up at once. */
static void stop_receivers(int fd, const struct sockaddr_in *to)
{
    mark(fd, to, LOST);
}

static int send_file(struct in_addr group, unsigned port, struct in_addr iface, const char *source,
                     const char *copy, size_t seg, size_t receivers, int sealed)
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
    int back = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rcv = 4 << 20;
    struct sockaddr_in me = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)(port + 1)), .sin_addr = iface};
    if (back < 0 || bind(back, (struct sockaddr *)&me, sizeof me) < 0)
        die("binding the receivers' port");
    if (setsockopt(back, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) < 0)
        setsockopt(back, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    struct acks a = {.slots = 2 * receivers + 1, .expected = receivers};
    a.addr = calloc(a.slots, sizeof *a.addr);
    a.got = calloc(a.slots, sizeof *a.got);
    int gsok = setsockopt(fd, SOL_UDP, UDP_SEGMENT, &gso, sizeof gso) == 0;
    size_t size = (size_t)st.st_size, total = (size_t)stream_size(size, sealed);
    char *file = malloc(size + 1), *stream = sealed ? malloc(total + 1) : file, *batch = malloc(per * seg);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!file || !stream || !batch || !a.addr || !a.got || !c)
        die("memory");
    if (sealed)
        printf("cipher %s\n", cipher_name());
    printf("start %llu\n", now_ns());
    fflush(stdout);
    /* Batches of full segments across the whole stream (only its last
     * segment is short), the file read, copied and sealed a piece ahead of
     * them, never more than WINDOW beyond the slowest receiver. */
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = group};
    size_t have = 0, ready = 0, take = gsok ? per : 1;
    unsigned long long low = 0, marked = 0;
    int waited = 0;
    for (size_t off = 0; off < total;) {
        while (ready < total && ready < off + take * data) {
            ssize_t r = pread(in, file + have, size - have < PIECE ? size - have : PIECE, (off_t)have);
            if (r <= 0)
                die(source);
            write_all(out, file + have, (size_t)r, (off_t)have);
            if (sealed && !gcm(c, 1, have / PIECE, (unsigned char *)file + have, (size_t)r,
                               (unsigned char *)stream + ready, (unsigned char *)stream + ready + r))
                die("sealing");
            have += (size_t)r;
            ready += (size_t)r + (sealed ? TAG : 0);
        }
        hear(back, &a, 0);
        /* a window smaller than a chunk (FLOOR_WINDOW) fills before a mark:
         * the receivers must read what came before it opens */
        if (!a.lost && off >= (low = slowest(&a)) + window && low >= marked && off > marked)
            mark(fd, &to, marked = off);
        while (!a.lost && off >= (low = slowest(&a)) + window) {
            if (hear(back, &a, TICK_MS))
                waited = 0;
            else if (++waited > IDLE_TICKS) {
                fprintf(stderr,
                        "floor_mcast: %zu of %zu receivers spoke, the slowest holds %llu of %zu bytes: "
                        "nothing more for 30 s\n",
                        a.known, a.expected, low, total);
                stop_receivers(fd, &to);
                return 1;
            }
        }
        if (a.lost) {
            fprintf(stderr, "floor_mcast: %zu receivers lost a datagram\n", a.lost);
            stop_receivers(fd, &to);
            return 3;
        }
        size_t n = 0;
        for (size_t i = 0; i < take && off < total; i++) {
            size_t d = total - off < data ? total - off : data;
            uint64_t h = off;
            memcpy(batch + n, &h, HDR);
            memcpy(batch + n + HDR, stream + off, d);
            n += HDR + d;
            off += d;
        }
        while (sendto(fd, batch, n, 0, (struct sockaddr *)&to, sizeof to) < 0)
            if (errno != EINTR && errno != ENOBUFS)
                die("send");
        if (off - marked >= CHUNK || off >= total)
            mark(fd, &to, marked = off);
    }
    mark(fd, &to, total); /* the last one twice: a receiver that missed it waits a tick */
    if (close(out) < 0)
        die("close");
    printf("sent %llu\n", now_ns());
    EVP_CIPHER_CTX_free(c);
    return 0;
}

static int mtu_of(const char *s)
{
    unsigned long mtu = number(s, "MTU");
    if (mtu < 576 || mtu > 9000) {
        fprintf(stderr, "floor_mcast: MTU %lu outside 576-9000\n", mtu);
        exit(2);
    }
    return (int)mtu;
}

int main(int argc, char **argv)
{
    const char *w = getenv("FLOOR_WINDOW");
    if (w && (window = number(w, "FLOOR_WINDOW")) < BATCH) {
        /* the sender could not send its first batch: it would wait 30 s */
        fprintf(stderr, "floor_mcast: FLOOR_WINDOW %llu below one batch (%d bytes)\n", window, BATCH);
        return 2;
    }
    int sealed = argc == 10 && !strcmp(argv[9], "sealed");
    if ((argc == 9 || sealed) && !strcmp(argv[1], "recv"))
        return receive(address(argv[2], "group"), (unsigned)number(argv[3], "port"),
                       address(argv[4], "address"), argv[5], number(argv[6], "size"),
                       (size_t)mtu_of(argv[7]) - IPUDP, address(argv[8], "sender"), sealed);
    if ((argc == 9 || sealed) && !strcmp(argv[1], "send")) {
        unsigned long receivers = number(argv[8], "receivers");
        if (receivers < 1 || receivers > 65536)
            return fprintf(stderr, "floor_mcast: receivers %lu outside 1-65536\n", receivers), 2;
        return send_file(address(argv[2], "group"), (unsigned)number(argv[3], "port"),
                         address(argv[4], "address"), argv[5], argv[6], (size_t)mtu_of(argv[7]) - IPUDP,
                         receivers, sealed);
    }
    fprintf(stderr, "usage: floor_mcast recv GROUP PORT ADDR FILE SIZE MTU SENDER [sealed]\n"
                    "       floor_mcast send GROUP PORT ADDR SOURCE COPY MTU RECEIVERS [sealed]\n");
    return 2;
}
