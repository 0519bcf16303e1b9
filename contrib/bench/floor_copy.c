/* floor_copy: the machine's floor for writing N copies of a file, one per
 * virtual node, with nothing of Storm in it and no process per copy: plain
 * blocking C, the file read once into memory, WRITERS threads each writing
 * every WRITERS-th copy (created or truncated, write()s of 63 pages:
 * contrib/bench/floor_mcast.c says why not 64, closed).
 * Every virtual node shares this machine's page cache, disk and cores, so
 * this is what writing the copies alone costs here; the benchmarks print
 * Storm's broadcast time over it.  (A shell loop of cat or dd pays a fork
 * and exec per copy, which at hundreds of nodes is a cost of its own.)
 *
 *   floor_copy SOURCE N PATTERN [WRITERS]
 *
 * PATTERN is a printf format with one %d, the node's number (1..N), e.g.
 * /var/lib/storm-vcluster/nodes/vn%d/tmp/bench.copy.  WRITERS defaults to
 * 2.  Prints the seconds from the first open to the last close, or exits 1
 * naming the copy that failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *pattern;
static char *data;
static size_t size;
static int nodes, writers;
static volatile int failed;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int write_copy(int node)
{
    char path[4096];
    if (snprintf(path, sizeof path, pattern, node) >= (int)sizeof path) {
        fprintf(stderr, "floor_copy: path for node %d too long\n", node);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "floor_copy: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (size_t done = 0; done < size;) {
        size_t n = size - done < (63u << 12) ? size - done : (63u << 12);
        ssize_t w = write(fd, data + done, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fprintf(stderr, "floor_copy: %s: %s\n", path, w < 0 ? strerror(errno) : "short write");
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0) {
        fprintf(stderr, "floor_copy: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void *writer(void *arg)
{
    int first = (int)(long)arg;
    for (int node = first; node <= nodes && !failed; node += writers)
        if (write_copy(node) != 0)
            failed = 1;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: floor_copy SOURCE N PATTERN [WRITERS]\n");
        return 2;
    }
    nodes = atoi(argv[2]);
    pattern = argv[3];
    writers = argc == 5 ? atoi(argv[4]) : 2;
    const char *pct = strchr(pattern, '%');
    if (nodes < 1 || writers < 1 || writers > 64 || !pct || strncmp(pct, "%d", 2) != 0 || strchr(pct + 2, '%')) {
        fprintf(stderr, "floor_copy: N and WRITERS (1-64) must be positive, PATTERN must hold one %%d\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "floor_copy: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    size = (size_t)st.st_size;
    data = malloc(size ? size : 1);
    for (size_t done = 0; data && done < size;) {
        ssize_t r = read(fd, data + done, size - done);
        if (r <= 0) {
            fprintf(stderr, "floor_copy: %s: %s\n", argv[1], r < 0 ? strerror(errno) : "short read");
            return 1;
        }
        done += (size_t)r;
    }
    close(fd);
    if (!data) {
        fprintf(stderr, "floor_copy: out of memory for %zu bytes\n", size);
        return 1;
    }
    pthread_t t[64];
    double t0 = now();
    for (int i = 0; i < writers; i++)
        if (pthread_create(&t[i], NULL, writer, (void *)(long)(i + 1)) != 0) {
            fprintf(stderr, "floor_copy: cannot start a writer\n");
            return 1;
        }
    for (int i = 0; i < writers; i++)
        pthread_join(t[i], NULL);
    if (failed)
        return 1;
    printf("%.2f\n", now() - t0);
    return 0;
}
