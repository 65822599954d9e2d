#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef DL_TC_LIB_DIR
#define DL_TC_LIB_DIR "/usr/lib/tc"
#endif

static const char USAGE[] =
    "usage: testbed-delayline --queue N [--max-queue 10000] [--delay-ms D] [--jitter-ms J]\n"
    "         [--distribution uniform|normal|pareto|paretonormal] [--dist-file PATH]\n"
    "         [--order fifo|reorder] [--loss-pct X [--loss-correlation-pct C]]\n"
    "         [--ge-p P [--ge-r R [--ge-h 1-H [--ge-k 1-K]]]] [--seed S] [--stats PATH]\n"
    "         [--stats-interval-ms 200] [--rcvbuf BYTES] [--gso] [--sample N]\n"
    "Holds every packet of NFQUEUE N for a netem-like delay, then accepts it; drops the lost ones.\n"
    "The iptables rule must NOT use --queue-bypass: without this program the packets are dropped.\n";

enum {
    O_QUEUE = 1, O_MAXQ, O_DELAY, O_JITTER, O_DIST, O_DISTFILE, O_ORDER, O_LOSS, O_LCORR,
    O_GEP, O_GER, O_GEH, O_GEK, O_SEED, O_STATS, O_SIVAL, O_RCVBUF, O_GSO, O_SAMPLE, O_HELP
};

static const struct option OPTS[] = {
    {"queue", required_argument, 0, O_QUEUE}, {"max-queue", required_argument, 0, O_MAXQ},
    {"delay-ms", required_argument, 0, O_DELAY}, {"jitter-ms", required_argument, 0, O_JITTER},
    {"distribution", required_argument, 0, O_DIST}, {"dist-file", required_argument, 0, O_DISTFILE},
    {"order", required_argument, 0, O_ORDER}, {"loss-pct", required_argument, 0, O_LOSS},
    {"loss-correlation-pct", required_argument, 0, O_LCORR}, {"ge-p", required_argument, 0, O_GEP},
    {"ge-r", required_argument, 0, O_GER}, {"ge-h", required_argument, 0, O_GEH},
    {"ge-k", required_argument, 0, O_GEK}, {"seed", required_argument, 0, O_SEED},
    {"stats", required_argument, 0, O_STATS}, {"stats-interval-ms", required_argument, 0, O_SIVAL},
    {"rcvbuf", required_argument, 0, O_RCVBUF}, {"gso", no_argument, 0, O_GSO},
    {"sample", required_argument, 0, O_SAMPLE}, {"help", no_argument, 0, O_HELP}, {0, 0, 0, 0},
};

static const char *const ORDER_NAMES[] = {"fifo", "reorder"};
static const char *const DIST_NAMES[] = {"uniform", "normal", "pareto", "paretonormal"};

const char *dl_order_name(dl_order o) { return ORDER_NAMES[o]; }
const char *dl_dist_name(dl_dist d) { return DIST_NAMES[d]; }

const char *dl_loss_model_name(const dl_config *c)
{
    if (c->ge || c->loss_corr_pct > 0)
        return "gemodel";
    return c->loss_pct > 0 ? "random" : "none";
}

static int bad(const char *opt, const char *what, const char *got)
{
    fprintf(stderr, "testbed-delayline: --%s: %s (got %s)\n", opt, what, got);
    return 1;
}

/* a finite number in [lo, hi] */
static int num(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v) || v < lo || v > hi) {
        char what[96];
        snprintf(what, sizeof(what), "must be a number between %g and %g", lo, hi);
        return bad(opt, what, s);
    }
    *out = v;
    return 0;
}

static int choice(const char *opt, const char *s, const char *const *names, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    return bad(opt, n == 2 ? "must be fifo or reorder" : "must be uniform, normal, pareto or paretonormal", s);
}

static int seed_arg(const char *s, dl_config *c)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s || *end != '\0' || errno != 0 || s[0] == '-')
        return bad("seed", "must be an unsigned 64-bit integer", s);
    c->seed = v;
    c->seed_given = true;
    return 0;
}

static int one_option(dl_config *c, int opt, const char *a, int *ge_given)
{
    double v = 0;
    int i = 0, rc = 0;
    switch (opt) {
    case O_QUEUE: rc = num("queue", a, 0, 65535, &v); c->queue = (int)v;
        if (!rc && v != floor(v)) rc = bad("queue", "must be an integer", a);
        break;
    case O_MAXQ: rc = num("max-queue", a, 1, 1000000, &v); c->max_queue = (uint32_t)v; break;
    case O_DELAY: rc = num("delay-ms", a, 0, 3600000, &c->delay_ms); break;
    case O_JITTER: rc = num("jitter-ms", a, 0, INT32_MAX / 1e6, &c->jitter_ms); break;
    case O_DIST: rc = choice("distribution", a, DIST_NAMES, 4, &i); c->dist = (dl_dist)i; break;
    case O_DISTFILE: snprintf(c->dist_file, sizeof(c->dist_file), "%s", a); break;
    case O_ORDER: rc = choice("order", a, ORDER_NAMES, 2, &i); c->order = (dl_order)i; break;
    case O_LOSS: rc = num("loss-pct", a, 0, 100, &c->loss_pct); break;
    case O_LCORR: rc = num("loss-correlation-pct", a, 0, 99.99, &c->loss_corr_pct); break;
    case O_GEP: rc = num("ge-p", a, 0, 100, &c->ge_p); ge_given[0] = 1; break;
    case O_GER: rc = num("ge-r", a, 0, 100, &c->ge_r); ge_given[1] = 1; break;
    case O_GEH: rc = num("ge-h", a, 0, 100, &c->ge_h); ge_given[2] = 1; break;
    case O_GEK: rc = num("ge-k", a, 0, 100, &c->ge_k); ge_given[3] = 1; break;
    case O_SEED: rc = seed_arg(a, c); break;
    case O_STATS: c->stats_path = a; break;
    case O_SIVAL: rc = num("stats-interval-ms", a, 10, 60000, &v); c->stats_interval_ms = (uint32_t)v; break;
    case O_RCVBUF: rc = num("rcvbuf", a, 65536, 1 << 30, &v); c->rcvbuf = (int)v; break;
    case O_GSO: c->gso = true; break;
    case O_SAMPLE: rc = num("sample", a, 1, 1e9, &v); c->sample = (long)v; break;
    case O_HELP: fputs(USAGE, stdout); exit(0);
    default: fputs(USAGE, stderr); rc = 1;
    }
    return rc;
}

static int resolve_table(dl_config *c)
{
    if (c->dist == DL_DIST_UNIFORM) {
        if (c->dist_file[0]) {
            fprintf(stderr, "testbed-delayline: --dist-file: needs a table distribution, not uniform\n");
            return 1;
        }
        return 0;
    }
    if (c->dist_file[0])
        return 0;
    const char *env = getenv("TC_LIB_DIR"); /* as tc's get_tc_lib() */
    const char *dirs[] = {env && *env ? env : DL_TC_LIB_DIR, "/usr/lib/tc"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(c->dist_file, sizeof(c->dist_file), "%s/%s.dist", dirs[i], DIST_NAMES[c->dist]);
        if (access(c->dist_file, R_OK) == 0)
            return 0;
    }
    fprintf(stderr, "testbed-delayline: --distribution %s: no table %s.dist in %s or /usr/lib/tc "
            "(install iproute2 or give --dist-file)\n", DIST_NAMES[c->dist], DIST_NAMES[c->dist], dirs[0]);
    return 1;
}

static int check_loss(dl_config *c, const int *ge_given)
{
    int ge_any = ge_given[0] | ge_given[1] | ge_given[2] | ge_given[3];
    if (ge_any && !ge_given[0])
        return bad("ge-p", "is needed with --ge-r/--ge-h/--ge-k", "nothing");
    if (ge_any && (c->loss_pct > 0 || c->loss_corr_pct > 0)) {
        fprintf(stderr, "testbed-delayline: --ge-*: give either --loss-pct or the gemodel, not both\n");
        return 1;
    }
    if (c->loss_corr_pct > 0 && c->loss_pct <= 0) {
        fprintf(stderr, "testbed-delayline: --loss-correlation-pct: needs --loss-pct > 0\n");
        return 1;
    }
    c->ge = ge_any;
    if (c->ge) { /* tc's defaults for the parameters left out */
        if (!ge_given[1]) c->ge_r = 100 - c->ge_p;
        if (!ge_given[2]) c->ge_h = 100;
        if (!ge_given[3]) c->ge_k = 0;
    }
    return 0;
}

int dl_config_parse(dl_config *c, int argc, char **argv)
{
    int ge_given[4] = {0, 0, 0, 0}, errors = 0, opt;
    memset(c, 0, sizeof(*c));
    c->queue = -1;
    c->max_queue = 10000;
    c->stats_interval_ms = 200;
    opterr = 1;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", OPTS, NULL)) != -1)
        errors += one_option(c, opt, optarg, ge_given);
    if (optind < argc)
        errors += bad("", "unexpected argument", argv[optind]);
    if (c->queue < 0 && c->sample == 0)
        errors += bad("queue", "is required", "nothing");
    errors += check_loss(c, ge_given);
    errors += resolve_table(c);
    if (!c->seed_given) { /* recorded in the stats, so any run can be repeated */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        c->seed = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    }
    if (c->rcvbuf == 0) { /* room for every queued packet's message, as the kernel charges them */
        uint64_t want = (uint64_t)c->max_queue * 2048;
        c->rcvbuf = want < (8u << 20) ? 8 << 20 : want > (1u << 30) ? 1 << 30 : (int)want;
    }
    return errors ? 2 : 0;
}

void dl_config_loss(const dl_config *c, dl_loss *l)
{
    double p, r;
    if (c->ge)
        dl_loss_ge(l, c->ge_p, c->ge_r, c->ge_h, c->ge_k);
    else if (c->loss_corr_pct > 0 && dl_ge_from_correlation(c->loss_pct, c->loss_corr_pct, &p, &r) == 0)
        dl_loss_ge(l, p, r, 100, 0);
    else
        dl_loss_random(l, c->loss_pct);
}

int64_t dl_config_delay_ns(const dl_config *c)
{
    return (int64_t)llround(c->delay_ms * 1e6);
}

uint32_t dl_config_jitter_ns(const dl_config *c)
{
    return (uint32_t)llround(c->jitter_ms * 1e6);
}
