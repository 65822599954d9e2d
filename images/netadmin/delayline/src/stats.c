#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void dl_kernel_queue_read(int queue, dl_kernel_queue *k)
{
    char line[256];
    FILE *f = fopen("/proc/net/netfilter/nfnetlink_queue", "r");
    memset(k, 0, sizeof(*k));
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f)) {
        unsigned q, portid, mode, range;
        unsigned long long total, qdrop, udrop, idseq;
        if (sscanf(line, "%u %u %llu %u %u %llu %llu %llu", &q, &portid, &total, &mode, &range, &qdrop,
                   &udrop, &idseq) == 8 && (int)q == queue) {
            k->found = true;
            k->queue_total = total;
            k->queue_dropped = qdrop;
            k->user_dropped = udrop;
            k->id_sequence = idseq;
        }
    }
    fclose(f);
}

/* JSON string of a path: escape what JSON needs, drop control characters */
static void json_str(char *out, size_t len, const char *s)
{
    size_t j = 0;
    if (len < 3)
        return;
    out[j++] = '"';
    for (; *s && j + 3 < len; s++) {
        if (*s == '"' || *s == '\\')
            out[j++] = '\\';
        if ((unsigned char)*s >= 0x20)
            out[j++] = *s;
    }
    out[j++] = '"';
    out[j] = '\0';
}

static int loss_json(char *b, size_t len, const dl_config *c)
{
    double p = c->ge_p, r = c->ge_r, h = c->ge_h, k = c->ge_k;
    const char *model = dl_loss_model_name(c);
    if (strcmp(model, "gemodel") != 0)
        return snprintf(b, len, "{\"model\": \"%s\", \"loss_pct\": %.6g}", model, c->loss_pct);
    if (!c->ge) { /* from --loss-pct and --loss-correlation-pct, see model.h */
        dl_ge_from_correlation(c->loss_pct, c->loss_corr_pct, &p, &r);
        h = 100;
        k = 0;
    }
    /* the chain's stationary loss: pi_Bad (1-h) + pi_Good (1-k), pi_Bad = p / (p + r) */
    double bad = p + r > 0 ? p / (p + r) : 0;
    int n = snprintf(b, len, "{\"model\": \"gemodel\", \"p_pct\": %.9g, \"r_pct\": %.9g, "
                     "\"one_minus_h_pct\": %.9g, \"one_minus_k_pct\": %.9g, \"expected_loss_pct\": %.9g",
                     p, r, h, k, bad * h + (1 - bad) * k);
    if (!c->ge)
        n += snprintf(b + n, len - (size_t)n, ", \"loss_pct\": %.6g, \"loss_correlation_pct\": %.6g",
                      c->loss_pct, c->loss_corr_pct);
    return n + snprintf(b + n, len - (size_t)n, "}");
}

static int render(char *b, size_t len, const dl_config *c, const dl_counters *n, int64_t now_ns)
{
    char loss[512], dist_file[4200], kq[256];
    dl_kernel_queue k;
    struct timespec wall;
    dl_kernel_queue_read(c->queue, &k);
    clock_gettime(CLOCK_REALTIME, &wall);
    loss_json(loss, sizeof(loss), c);
    json_str(dist_file, sizeof(dist_file), c->dist_file);
    if (k.found)
        snprintf(kq, sizeof(kq), "{\"queue_total\": %llu, \"queue_dropped\": %llu, \"user_dropped\": %llu, "
                 "\"id_sequence\": %llu}", (unsigned long long)k.queue_total,
                 (unsigned long long)k.queue_dropped, (unsigned long long)k.user_dropped,
                 (unsigned long long)k.id_sequence);
    else
        snprintf(kq, sizeof(kq), "null");
    bool healthy = n->bound && n->overflows == 0 && n->verdict_errors == 0 && k.queue_dropped == 0 &&
                   k.user_dropped == 0;
    return snprintf(b, len,
        "{\"schema_version\": 1, \"program\": \"testbed-delayline\", \"pid\": %ld, \"state\": \"%s\", "
        "\"bound\": %s, \"healthy\": %s, \"uptime_s\": %.3f, \"time_unix\": %lld.%06ld, \"queue\": %d,\n"
        " \"queued\": %llu, \"accepted\": %llu, \"dropped\": %llu, \"in_flight\": %llu, "
        "\"max_in_flight\": %llu, \"overflows\": %llu, \"verdict_errors\": %llu,\n"
        " \"release_late_us\": {\"mean\": %.3f, \"max\": %.3f},\n"
        " \"kernel\": %s,\n \"order\": \"%s\", \"distribution\": \"%s\",\n"
        " \"params\": {\"delay_ms\": %.6g, \"jitter_ms\": %.6g, \"dist_file\": %s, \"loss\": %s, "
        "\"seed\": %llu, \"max_queue\": %u, \"rcvbuf_bytes\": %d, \"gso\": %s, \"fail_open\": false}}\n",
        (long)getpid(), n->exited ? "exited" : "running", n->bound ? "true" : "false",
        healthy ? "true" : "false",
        (double)(now_ns - n->start_ns) / 1e9, (long long)wall.tv_sec, wall.tv_nsec / 1000, c->queue,
        (unsigned long long)n->queued, (unsigned long long)n->accepted, (unsigned long long)n->dropped,
        (unsigned long long)n->in_flight, (unsigned long long)n->max_in_flight,
        (unsigned long long)n->overflows, (unsigned long long)n->verdict_errors,
        n->late_count ? (double)n->late_sum_ns / (double)n->late_count / 1e3 : 0.0, (double)n->late_max_ns / 1e3,
        kq,
        dl_order_name(c->order), dl_dist_name(c->dist), c->delay_ms, c->jitter_ms, dist_file, loss,
        (unsigned long long)c->seed, c->max_queue, c->rcvbuf, c->gso ? "true" : "false");
}

int dl_stats_write(const char *path, const dl_config *c, const dl_counters *n, int64_t now_ns)
{
    char buf[8192], tmp[4200];
    int len = render(buf, sizeof(buf), c, n, now_ns);
    if (len < 0 || (size_t)len >= sizeof(buf)) {
        errno = EOVERFLOW;
        return -1;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, buf, (size_t)len);
    int saved = errno;
    if (close(fd) != 0 || w != len) {
        unlink(tmp);
        errno = w != len ? (w < 0 ? saved : EIO) : errno;
        return -1;
    }
    return rename(tmp, path);
}
