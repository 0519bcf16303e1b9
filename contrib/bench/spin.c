/* spin: a compute-bound task for the gang scheduling benchmark.
 *
 *   spin MILLIONS    runs MILLIONS million iterations of a dependent
 *                    integer recurrence (no memory traffic, no system
 *                    calls), then prints "START <ns> END <ns>" (CLOCK_REALTIME)
 *
 * The work is fixed, so a task that is stopped part of the time takes
 * longer in wall time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 2 || atol(argv[1]) <= 0) {
        fprintf(stderr, "usage: spin MILLIONS\n");
        return 2;
    }
    long n = atol(argv[1]) * 1000000L;
    long long t0 = now_ns();
    volatile unsigned long x = 1;
    unsigned long y = x;
    for (long i = 0; i < n; i++)
        y = y * 6364136223846793005UL + 1442695040888963407UL;
    x = y;
    printf("START %lld END %lld\n", t0, now_ns());
    return 0;
}
