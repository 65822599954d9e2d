/* Command line of testbed-delayline (see README.md): parsed and checked here, before any socket. */
#ifndef DELAYLINE_CONFIG_H
#define DELAYLINE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

typedef enum { DL_ORDER_FIFO, DL_ORDER_REORDER } dl_order;
typedef enum { DL_DIST_UNIFORM, DL_DIST_NORMAL, DL_DIST_PARETO, DL_DIST_PARETONORMAL } dl_dist;

typedef struct {
    int queue; /* -1 until --queue */
    uint32_t max_queue;
    double delay_ms, jitter_ms;
    dl_dist dist;
    char dist_file[4096]; /* resolved path of the table, "" for uniform */
    dl_order order;
    /* loss: none, --loss-pct [--loss-correlation-pct], or --ge-p [--ge-r --ge-h --ge-k] */
    double loss_pct, loss_corr_pct;
    bool ge;
    double ge_p, ge_r, ge_h, ge_k; /* percent; ge_h, ge_k are tc's `1-h`, `1-k` */
    uint64_t seed;
    bool seed_given;
    const char *stats_path;
    uint32_t stats_interval_ms;
    int rcvbuf;
    bool gso;
    long sample; /* --sample N: print N draws and exit, no netfilter */
} dl_config;

/* 0 on success; otherwise prints one line per mistake to stderr and returns 2 (usage error) */
int dl_config_parse(dl_config *c, int argc, char **argv);

const char *dl_order_name(dl_order o);
const char *dl_dist_name(dl_dist d);
const char *dl_loss_model_name(const dl_config *c);

/* the loss model the options describe (netem's numbers), and the delay in ns */
void dl_config_loss(const dl_config *c, dl_loss *l);
int64_t dl_config_delay_ns(const dl_config *c);
uint32_t dl_config_jitter_ns(const dl_config *c);

#endif
