/* The delay line on an NFQUEUE: one thread, ppoll() on the queue's netlink socket with a timeout to the
 * next release (or the next stats write), CLOCK_MONOTONIC throughout, one verdict per packet.
 *
 * Fail closed: the queue is bound without NFQA_CFG_F_FAIL_OPEN (cleared explicitly), so a full queue
 * drops, and the rule carries no --queue-bypass, so without this process the kernel drops every
 * packet the rule matches (and, when the socket closes, those still held). Orderly end (SIGTERM,
 * SIGINT): read what the socket still holds, ACCEPT every held packet at once, write the stats with
 * state "exited", exit 0. Delete the iptables rule BEFORE stopping the line: after it, the rule
 * drops. */
#define _GNU_SOURCE /* ppoll */
#include "line.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>

#include "stats.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

int64_t dl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct {
    dl_config *c;
    dl_model model;
    dl_heap held;
    dl_counters n;
    int64_t last_release, now_ns, next_stats_ns;
    uint64_t seq;
    struct nfq_handle *h;
    struct nfq_q_handle *qh;
    int fd;
    bool stats_error_told;
} dl_line;

static void verdict(dl_line *L, uint32_t id, uint32_t v)
{
    if (nfq_set_verdict(L->qh, id, v, 0, NULL) < 0)
        L->n.verdict_errors++;
}

/* When the packet reached the queue: the kernel's receive timestamp when it carries one (converted to
 * CLOCK_MONOTONIC), so time the packet waited in the socket for the line to wake up and read it counts
 * towards its delay instead of adding to it; else the moment the line read it. */
static int64_t arrival_ns(const dl_line *L, struct nfq_data *nfa)
{
    struct timeval tv;
    struct timespec real;
    if (nfq_get_timestamp(nfa, &tv) != 0 || tv.tv_sec == 0)
        return L->now_ns;
    clock_gettime(CLOCK_REALTIME, &real);
    int64_t waited = ((int64_t)real.tv_sec * 1000000000LL + real.tv_nsec) -
                     ((int64_t)tv.tv_sec * 1000000000LL + (int64_t)tv.tv_usec * 1000);
    if (waited < 0 || waited > 1000000000LL) /* a clock step, or a stamp from elsewhere: ignore it */
        return L->now_ns;
    return L->now_ns - waited;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *data)
{
    dl_line *L = data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    int64_t delay;
    (void)qh;
    (void)msg;
    if (ph == NULL)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    L->n.queued++;
    if (dl_model_next(&L->model, &delay)) {
        verdict(L, id, NF_DROP);
        L->n.dropped++;
        return 0;
    }
    int64_t release = arrival_ns(L, nfa) + delay;
    if (L->c->order == DL_ORDER_FIFO) { /* never before the packet queued before it */
        if (release < L->last_release)
            release = L->last_release;
        L->last_release = release;
    }
    dl_held e = {.release_ns = release, .seq = L->seq++, .id = id};
    if (!dl_heap_push(&L->held, e)) { /* cannot happen: the kernel queue is no longer than the heap */
        verdict(L, id, NF_DROP);
        L->n.dropped++;
        L->n.overflows++;
        return 0;
    }
    if (++L->n.in_flight > L->n.max_in_flight)
        L->n.max_in_flight = L->n.in_flight;
    return 0;
}

static void release_until(dl_line *L, int64_t now)
{
    const dl_held *top;
    while ((top = dl_heap_top(&L->held)) != NULL && top->release_ns <= now) {
        dl_held e = dl_heap_pop(&L->held);
        int64_t late = dl_now_ns() - e.release_ns; /* how far past its due time the packet left */
        L->n.late_count++;
        L->n.late_sum_ns += late;
        if (late > L->n.late_max_ns)
            L->n.late_max_ns = late;
        verdict(L, e.id, NF_ACCEPT);
        L->n.accepted++;
        L->n.in_flight--;
    }
}

/* every message the socket holds now, at most `max` reads; -1 on a fatal socket error */
static int read_batch(dl_line *L, int max)
{
    static char buf[65536] __attribute__((aligned));
    for (int i = 0; i < max; i++) {
        ssize_t len = recv(L->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (len < 0) {
            if (errno == ENOBUFS) { /* the kernel could not deliver: those packets were dropped */
                L->n.overflows++;
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return 0;
            fprintf(stderr, "testbed-delayline: recv: %s\n", strerror(errno));
            return -1;
        }
        L->now_ns = dl_now_ns();
        nfq_handle_packet(L->h, buf, (int)len);
    }
    return 0;
}

static void write_stats(dl_line *L, int64_t now)
{
    if (L->c->stats_path == NULL)
        return;
    if (dl_stats_write(L->c->stats_path, L->c, &L->n, now) != 0 && !L->stats_error_told) {
        fprintf(stderr, "testbed-delayline: cannot write %s: %s\n", L->c->stats_path, strerror(errno));
        L->stats_error_told = true;
    }
    L->next_stats_ns = now + (int64_t)L->c->stats_interval_ms * 1000000;
}

/* Sleeping until a packet's release time wakes the line late: a timer wake-up in a container on a busy
 * host came 0.3-0.5 ms after the hrtimer (measured: +0.4 ms on every quantile of a 5 ms line, against
 * +0.15 ms at 0 ms; a spin of 0.5 ms brought it to +0.25 ms; a longer one burns the CPU time that the
 * scheduler then takes back: 1.5 ms was worse on a loaded host). So the line sleeps until SPIN_NS before the next
 * release and spins on the clock
 * for the rest: at most 0.5 ms of one CPU per release, nothing while no packet is held. The remaining
 * lateness is in the stats (release_late_us). */
#define SPIN_NS 500000LL

static struct timespec timeout_until(const dl_line *L, int64_t now)
{
    const dl_held *top = dl_heap_top(&L->held);
    int64_t until = L->next_stats_ns;
    if (L->c->stats_path == NULL)
        until = now + 1000000000LL; /* wake once a second anyway */
    if (top && top->release_ns - SPIN_NS < until)
        until = top->release_ns - SPIN_NS;
    int64_t wait = until > now ? until - now : 0;
    struct timespec ts = {.tv_sec = wait / 1000000000LL, .tv_nsec = wait % 1000000000LL};
    return ts;
}

static int bind_queue(dl_line *L)
{
    dl_config *c = L->c;
    L->h = nfq_open();
    if (L->h == NULL) {
        fprintf(stderr, "testbed-delayline: nfq_open: %s (needs CAP_NET_ADMIN)\n", strerror(errno));
        return -1;
    }
    L->qh = nfq_create_queue(L->h, (uint16_t)c->queue, on_packet, L);
    if (L->qh == NULL) {
        fprintf(stderr, "testbed-delayline: cannot bind NFQUEUE %d: %s (is another program bound to it?)\n",
                c->queue, strerror(errno));
        return -1;
    }
    uint32_t flags = c->gso ? NFQA_CFG_F_GSO : 0;
    if (nfq_set_mode(L->qh, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(L->qh, c->max_queue) < 0 ||
        nfq_set_queue_flags(L->qh, NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO, flags) < 0) {
        fprintf(stderr, "testbed-delayline: configuring NFQUEUE %d: %s\n", c->queue, strerror(errno));
        return -1;
    }
    L->fd = nfq_fd(L->h);
    int size = c->rcvbuf;
    socklen_t sl = sizeof(size);
    if (setsockopt(L->fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0 &&
        setsockopt(L->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)) != 0)
        fprintf(stderr, "testbed-delayline: SO_RCVBUF %d: %s\n", size, strerror(errno));
    if (getsockopt(L->fd, SOL_SOCKET, SO_RCVBUF, &size, &sl) == 0)
        c->rcvbuf = size; /* what the kernel granted (it doubles the request for its bookkeeping) */
    return 0;
}

static void install_signals(sigset_t *during_wait)
{
    struct sigaction sa;
    sigset_t block;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    /* blocked except inside ppoll(): a signal can only interrupt the wait, never be missed */
    sigprocmask(SIG_BLOCK, &block, during_wait);
    sigdelset(during_wait, SIGTERM);
    sigdelset(during_wait, SIGINT);
    sigdelset(during_wait, SIGHUP);
}

static int loop(dl_line *L, const sigset_t *during_wait)
{
    struct pollfd pfd = {.fd = L->fd, .events = POLLIN};
    while (!stop_requested) {
        int64_t now = dl_now_ns();
        const dl_held *top = dl_heap_top(&L->held);
        if (top && top->release_ns > now && top->release_ns - now <= SPIN_NS) {
            int64_t due = top->release_ns;
            while ((now = dl_now_ns()) < due) {
            }
        }
        release_until(L, now);
        if (L->c->stats_path && now >= L->next_stats_ns)
            write_stats(L, now);
        struct timespec ts = timeout_until(L, now);
        int r = ppoll(&pfd, 1, &ts, during_wait);
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "testbed-delayline: ppoll: %s\n", strerror(errno));
            return 1;
        }
        if (r > 0 && (pfd.revents & POLLIN) && read_batch(L, 64) != 0)
            return 1;
    }
    return 0;
}

int dl_line_run(dl_config *c, const dl_table *table)
{
    dl_line L;
    dl_loss loss;
    sigset_t during_wait;
    memset(&L, 0, sizeof(L));
    L.c = c;
    L.n.start_ns = dl_now_ns();
    dl_config_loss(c, &loss);
    dl_model_init(&L.model, c->seed, &loss, table, dl_config_delay_ns(c), dl_config_jitter_ns(c));
    if (dl_heap_init(&L.held, c->max_queue) != 0) {
        fprintf(stderr, "testbed-delayline: out of memory for %u packets\n", c->max_queue);
        return 1;
    }
    prctl(PR_SET_TIMERSLACK, 1UL); /* wake within microseconds, not the default 50 us */
    install_signals(&during_wait);
    L.n.bound = bind_queue(&L) == 0;
    int rc = L.n.bound ? loop(&L, &during_wait) : 1;
    if (L.n.bound) {
        read_batch(&L, 1 << 20); /* what the kernel had already handed over */
        release_until(&L, INT64_MAX);
    }
    L.n.exited = true;
    write_stats(&L, dl_now_ns());
    if (L.qh)
        nfq_destroy_queue(L.qh);
    if (L.h)
        nfq_close(L.h);
    dl_heap_free(&L.held);
    return rc;
}
