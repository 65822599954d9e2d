/* testbed-delayline: a userspace delay line on an NFQUEUE, with netem's delay distributions and loss
 * models (model.h), for kernels without sch_netem. See ../README.md. */
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "line.h"
#include "model.h"

/* --sample N: the first N packets' fates for this configuration, one line each: "lost delay_ns"
 * (delay_ns is 0 for a lost packet); the same code path and seed as the line itself */
static int sample(const dl_config *c, const dl_table *table)
{
    dl_loss loss;
    dl_model m;
    dl_config_loss(c, &loss);
    dl_model_init(&m, c->seed, &loss, table, dl_config_delay_ns(c), dl_config_jitter_ns(c));
    for (long i = 0; i < c->sample; i++) {
        int64_t d = 0;
        int lost = dl_model_next(&m, &d);
        printf("%d %lld\n", lost, (long long)(lost ? 0 : d));
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    static dl_config c;
    static dl_table table;
    char err[4400];
    int rc = dl_config_parse(&c, argc, argv);
    if (rc != 0)
        return rc;
    if (c.dist != DL_DIST_UNIFORM && dl_table_load(&table, c.dist_file, err, sizeof(err)) != 0) {
        fprintf(stderr, "testbed-delayline: --distribution %s: %s\n", dl_dist_name(c.dist), err);
        return 2;
    }
    const dl_table *t = c.dist == DL_DIST_UNIFORM ? NULL : &table;
    return c.sample ? sample(&c, t) : dl_line_run(&c, t);
}
