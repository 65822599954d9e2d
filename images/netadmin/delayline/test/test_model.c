/* The model's own tests: `make check` (argument: the folder holding netem's .dist tables).
 * No root and no netfilter. Prints "N passed, N failed" and exits non-zero on a failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "model.h"

static int passed, failed;

#define CHECK(cond, ...)                                                                                \
    do {                                                                                                \
        if (cond) {                                                                                     \
            passed++;                                                                                   \
        } else {                                                                                        \
            failed++;                                                                                   \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                      \
            printf(__VA_ARGS__);                                                                        \
            printf("\n");                                                                               \
        }                                                                                               \
    } while (0)

static dl_table table;

static void test_tabledist_rounds_like_netem(void)
{
    table.n = 1;
    /* sigma = 1.5 scale units: 4096 * t / 8192 = 0.5 t rounds half away from zero */
    table.v[0] = 1;
    CHECK(dl_tabledist(0, 12288, 0, &table) == 2, "%lld", (long long)dl_tabledist(0, 12288, 0, &table));
    table.v[0] = -1;
    CHECK(dl_tabledist(0, 12288, 0, &table) == -2, "%lld", (long long)dl_tabledist(0, 12288, 0, &table));
    table.v[0] = -1; /* (1 * -1 - 4096) / 8192 truncates to 0, then -1 */
    CHECK(dl_tabledist(100, 8193, 7, &table) == 99, "%lld", (long long)dl_tabledist(100, 8193, 7, &table));
    table.v[0] = 8192; /* one standard deviation exactly */
    CHECK(dl_tabledist(5000000, 2000000, 0, &table) == 7000000, "got %lld",
          (long long)dl_tabledist(5000000, 2000000, 0, &table));
    CHECK(dl_tabledist(42, 0, 123, &table) == 42, "sigma 0 is mu");
    /* uniform: (rnd % 2 sigma) + mu - sigma */
    CHECK(dl_tabledist(1000, 10, 0, NULL) == 990, "low end");
    CHECK(dl_tabledist(1000, 10, 19, NULL) == 1009, "high end");
    CHECK(dl_tabledist(1000, 10, 20, NULL) == 990, "wraps");
}

static void test_tables_load(const char *dir)
{
    char path[4096], err[512];
    const char *names[] = {"normal", "pareto", "paretonormal"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s.dist", dir, names[i]);
        CHECK(dl_table_load(&table, path, err, sizeof(err)) == 0, "%s", err);
        CHECK(table.n == 4096, "%s has %zu values", names[i], table.n);
    }
    snprintf(path, sizeof(path), "%s/normal.dist", dir);
    dl_table_load(&table, path, err, sizeof(err));
    CHECK(table.v[0] == -32768, "normal.dist starts at -4 sigma (%d)", table.v[0]);
    double sum = 0, sq = 0; /* the table is a standard normal in units of 1/8192 */
    for (size_t i = 0; i < table.n; i++) {
        sum += table.v[i];
        sq += (double)table.v[i] * table.v[i];
    }
    double mean = sum / table.n, sd = sqrt(sq / table.n - mean * mean) / NETEM_DIST_SCALE;
    CHECK(fabs(mean) < 50 && fabs(sd - 1) < 0.02, "mean %g sd %g", mean, sd);

    FILE *f;
    snprintf(path, sizeof(path), "/tmp/dl-test-%d.dist", (int)getpid());
    f = fopen(path, "w");
    fputs("# comment\n\n 1 -2 0x10\n3\n", f);
    fclose(f);
    CHECK(dl_table_load(&table, path, err, sizeof(err)) == 0 && table.n == 4 && table.v[2] == 16, "%s", err);
    f = fopen(path, "w");
    fputs("40000\n", f);
    fclose(f);
    CHECK(dl_table_load(&table, path, err, sizeof(err)) == -1 && strstr(err, "out of range"), "%s", err);
    f = fopen(path, "w");
    fputs("# nothing\n", f);
    fclose(f);
    CHECK(dl_table_load(&table, path, err, sizeof(err)) == -1 && strstr(err, "no values"), "%s", err);
    remove(path);
    CHECK(dl_table_load(&table, "/nonexistent.dist", err, sizeof(err)) == -1, "missing file");
}

static void test_percent_and_random_loss(void)
{
    dl_loss l;
    dl_rng r;
    int lost = 0;
    CHECK(dl_pct_u32(0) == 0 && dl_pct_u32(100) == UINT32_MAX, "ends");
    CHECK(dl_pct_u32(50) == 2147483648u, "%u", dl_pct_u32(50));
    dl_rng_seed(&r, 7);
    dl_loss_random(&l, 100);
    for (int i = 0; i < 1000; i++)
        lost += dl_loss_event(&l, &r);
    CHECK(lost == 1000, "100 %% loses all (%d)", lost);
    dl_loss_random(&l, 0);
    lost = 0;
    for (int i = 0; i < 1000; i++)
        lost += dl_loss_event(&l, &r);
    CHECK(lost == 0 && l.kind == DL_LOSS_NONE, "0 %% loses none");
    dl_loss_random(&l, 5);
    lost = 0;
    for (int i = 0; i < 1000000; i++)
        lost += dl_loss_event(&l, &r);
    /* binomial sd of the count: sqrt(n p (1-p)) = 218; 5 sd */
    CHECK(abs(lost - 50000) < 1090, "5 %% of 1e6: %d", lost);
}

/* loss rate, lag-1 autocorrelation and mean burst length of n draws of the chain */
static void ge_measure(dl_loss *l, uint64_t seed, int n, double *rate, double *rho, double *burst)
{
    dl_rng r;
    long lost = 0, pairs = 0, bursts = 0;
    int prev = 0;
    dl_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        int x = dl_loss_event(l, &r);
        lost += x;
        pairs += x && prev;
        bursts += x && !prev;
        prev = x;
    }
    double m = (double)lost / n, e11 = (double)pairs / (n - 1);
    *rate = m;
    *rho = (e11 - m * m) / (m - m * m);
    *burst = bursts ? (double)lost / bursts : 0;
}

static void test_gemodel_matches_its_derivation(void)
{
    double p, r, rate, rho, burst;
    dl_loss l;
    CHECK(dl_ge_from_correlation(2, 25, &p, &r) == 0 && fabs(p - 1.5) < 1e-12 && fabs(r - 73.5) < 1e-12,
          "p %g r %g", p, r);
    CHECK(dl_ge_from_correlation(2, 100, &p, &r) == -1, "100 %% correlation refused");
    dl_loss_ge(&l, 1.5, 73.5, 100, 0);
    ge_measure(&l, 11, 4000000, &rate, &rho, &burst);
    CHECK(fabs(rate - 0.02) < 0.0007, "loss %g", rate);
    CHECK(fabs(rho - 0.25) < 0.01, "lag-1 correlation %g", rho);
    CHECK(fabs(burst - 1 / 0.735) < 0.02, "mean burst %g vs %g", burst, 1 / 0.735);
    /* C = 0 is Bernoulli: no correlation */
    dl_ge_from_correlation(10, 0, &p, &r);
    dl_loss_ge(&l, p, r, 100, 0);
    ge_measure(&l, 12, 2000000, &rate, &rho, &burst);
    CHECK(fabs(rate - 0.1) < 0.002 && fabs(rho) < 0.005, "loss %g rho %g", rate, rho);
    /* 1-k: loss in Good; p = 0 never leaves Good */
    dl_loss_ge(&l, 0, 100, 100, 3);
    ge_measure(&l, 13, 1000000, &rate, &rho, &burst);
    CHECK(fabs(rate - 0.03) < 0.001, "1-k loss %g", rate);
    /* 1-h = 0: Bad loses nothing */
    dl_loss_ge(&l, 50, 50, 0, 0);
    ge_measure(&l, 14, 100000, &rate, &rho, &burst);
    CHECK(rate == 0, "1-h 0 loses nothing: %g", rate);
}

static void test_seed_is_deterministic(void)
{
    dl_model a, b;
    dl_loss l;
    int same = 1;
    dl_loss_random(&l, 10);
    dl_model_init(&a, 99, &l, NULL, 5000000, 2000000);
    dl_model_init(&b, 99, &l, NULL, 5000000, 2000000);
    for (int i = 0; i < 10000; i++) {
        int64_t da = -1, db = -1;
        same &= dl_model_next(&a, &da) == dl_model_next(&b, &db) && da == db;
    }
    CHECK(same, "same seed, same fates");
    dl_model_init(&b, 100, &l, NULL, 5000000, 2000000);
    int differ = 0;
    for (int i = 0; i < 100; i++) {
        int64_t da = -1, db = -1;
        dl_model_next(&a, &da);
        dl_model_next(&b, &db);
        differ += da != db;
    }
    CHECK(differ > 90, "another seed, other delays (%d of 100 differ)", differ);
    dl_model_init(&a, 1, &l, NULL, 1000, 5000); /* mostly negative: clamped at 0 */
    int64_t d = -1, lowest = INT64_MAX;
    for (int i = 0; i < 1000; i++)
        if (!dl_model_next(&a, &d) && d < lowest)
            lowest = d;
    CHECK(lowest == 0, "clamped at 0 (%lld)", (long long)lowest);
}

static void test_heap_orders_by_release_then_arrival(void)
{
    dl_heap h;
    dl_rng r;
    int ok = 1;
    dl_rng_seed(&r, 3);
    dl_heap_init(&h, 1000);
    for (uint64_t i = 0; i < 1000; i++)
        dl_heap_push(&h, (dl_held){.release_ns = dl_rng_u32(&r) % 50, .seq = i, .id = (uint32_t)i});
    CHECK(!dl_heap_push(&h, (dl_held){0, 0, 0}), "full heap refuses");
    dl_held prev = dl_heap_pop(&h);
    while (h.n) {
        dl_held e = dl_heap_pop(&h);
        ok &= e.release_ns > prev.release_ns || (e.release_ns == prev.release_ns && e.seq > prev.seq);
        prev = e;
    }
    CHECK(ok, "pops in (release, seq) order");
    CHECK(dl_heap_top(&h) == NULL, "empty");
    dl_heap_free(&h);
}

static void test_config_parses_and_refuses(void)
{
    dl_config c;
    char *good[] = {"x", "--queue", "3", "--delay-ms", "5", "--jitter-ms", "2", "--order", "reorder",
                    "--loss-pct", "2", "--loss-correlation-pct", "25", "--seed", "42", NULL};
    CHECK(dl_config_parse(&c, 15, good) == 0, "parses");
    CHECK(c.queue == 3 && c.order == DL_ORDER_REORDER && c.seed == 42 && c.max_queue == 10000, "values");
    CHECK(strcmp(dl_loss_model_name(&c), "gemodel") == 0, "correlated loss is the gemodel");
    char *ge[] = {"x", "--queue", "0", "--ge-p", "1", NULL};
    CHECK(dl_config_parse(&c, 5, ge) == 0 && c.ge_r == 99 && c.ge_h == 100 && c.ge_k == 0, "tc defaults");
    char *both[] = {"x", "--queue", "0", "--ge-p", "1", "--loss-pct", "1", NULL};
    CHECK(dl_config_parse(&c, 7, both) == 2, "loss-pct and gemodel refused");
    char *noq[] = {"x", NULL};
    CHECK(dl_config_parse(&c, 1, noq) == 2, "queue required");
    char *badq[] = {"x", "--queue", "1.5", NULL};
    CHECK(dl_config_parse(&c, 3, badq) == 2, "integer queue");
}

int main(int argc, char **argv)
{
    test_tabledist_rounds_like_netem();
    test_tables_load(argc > 1 ? argv[1] : "/usr/lib/tc");
    test_percent_and_random_loss();
    test_gemodel_matches_its_derivation();
    test_seed_is_deterministic();
    test_heap_orders_by_release_then_arrival();
    test_config_parses_and_refuses();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
