/* testbed-delayline-floor: the delay line's own floor, as `testbed doctor` measures it.
 *
 * Sends --count UDP datagrams to 127.0.0.1:--port, one every --interval-us, each carrying its send time,
 * and receives them on a socket bound to that port with the kernel's receive stamp (SO_TIMESTAMPNS):
 * one clock, so send -> receive is exact. Run once directly and once with an NFQUEUE rule sending the
 * datagrams through a line configured to 0 ms; the difference of the two is the line's floor.
 * Prints one JSON object: label, count, received, median_us, p99_us, max_us. Exit 1 on a setup error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int open_receiver(int port) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int on = 1;
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval wait = {.tv_sec = 1};
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait) < 0 ||
        bind(fd, (struct sockaddr *)&at, sizeof at) < 0) {
        fprintf(stderr, "testbed-delayline-floor: cannot bind udp 127.0.0.1:%d: %s\n", port, strerror(errno));
        exit(1);
    }
    return fd;
}

/* One datagram's time from send to the kernel's receive stamp, in ns; -1 when none came within 1 s. */
static int64_t receive_one(int fd, int64_t *sent_ns) {
    char ctrl[256];
    struct iovec iov = {.iov_base = sent_ns, .iov_len = sizeof *sent_ns};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof ctrl};
    if (recvmsg(fd, &msg, 0) != (ssize_t)sizeof *sent_ns)
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - *sent_ns;
        }
    }
    return now_ns() - *sent_ns;
}

int main(int argc, char **argv) {
    int port = 0, count = 300;
    long interval_us = 2000;
    const char *label = "run";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--count")) count = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--interval-us")) interval_us = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--label")) label = argv[i + 1];
    }
    if (port <= 0 || port > 65535 || count <= 0 || count > 100000 || interval_us < 0) {
        fprintf(stderr, "usage: testbed-delayline-floor --port P [--count N] [--interval-us U] [--label L]\n");
        return 2;
    }
    int rx = open_receiver(port), tx = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int64_t *took = calloc((size_t)count, sizeof *took);
    int got = 0;
    for (int i = 0; i < count && tx >= 0 && took; i++) {
        int64_t sent = now_ns(), echoed = 0;
        if (sendto(tx, &sent, sizeof sent, 0, (struct sockaddr *)&to, sizeof to) < 0)
            break;
        int64_t t = receive_one(rx, &echoed);
        if (t >= 0 && echoed == sent)
            took[got++] = t;
        struct timespec gap = {.tv_sec = interval_us / 1000000, .tv_nsec = (interval_us % 1000000) * 1000};
        nanosleep(&gap, NULL);
    }
    if (!took || got == 0) {
        printf("{\"label\": \"%s\", \"count\": %d, \"received\": 0}\n", label, count);
        return 1;
    }
    qsort(took, (size_t)got, sizeof *took, cmp_i64);
    double median = got % 2 ? took[got / 2] : (took[got / 2 - 1] + took[got / 2]) / 2.0;
    int p99 = (int)((got - 1) * 0.99 + 0.5);
    printf("{\"label\": \"%s\", \"count\": %d, \"received\": %d, \"median_us\": %.3f, \"p99_us\": %.3f, "
           "\"max_us\": %.3f}\n", label, count, got, median / 1000.0, took[p99] / 1000.0, took[got - 1] / 1000.0);
    free(took);
    return 0;
}
