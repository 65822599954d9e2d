/* The health/stats file: one JSON object, rewritten atomically (write a temporary file, rename). */
#ifndef DELAYLINE_STATS_H
#define DELAYLINE_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

typedef struct {
    uint64_t queued;   /* packets received from the kernel */
    uint64_t accepted; /* NF_ACCEPT issued */
    uint64_t dropped;  /* NF_DROP issued (the loss model's losses) */
    uint64_t in_flight, max_in_flight;
    uint64_t overflows;      /* recv() said ENOBUFS: the kernel lost messages for us */
    uint64_t verdict_errors; /* a verdict the kernel did not take */
    uint64_t late_count;     /* packets released after a hold, and how late after their due time */
    int64_t late_sum_ns, late_max_ns;
    int64_t start_ns;        /* CLOCK_MONOTONIC at start */
    bool bound;              /* the queue is ours (false: binding failed, nothing was delayed) */
    bool exited;             /* the last write of an orderly exit */
} dl_counters;

/* the queue's line in /proc/net/netfilter/nfnetlink_queue (this network namespace's) */
typedef struct {
    bool found;
    uint64_t queue_total, queue_dropped, user_dropped, id_sequence;
} dl_kernel_queue;

void dl_kernel_queue_read(int queue, dl_kernel_queue *k);

/* 0, or -1 with errno (the caller reports it once and carries on) */
int dl_stats_write(const char *path, const dl_config *c, const dl_counters *n, int64_t now_ns);

#endif
