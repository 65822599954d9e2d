/* The delay line's model: pseudo-random numbers, netem's delay distributions and loss models,
 * and the queue of held packets. No netfilter here, so test/test_model.c runs it without root.
 *
 * Delay (netem's tabledist(), net/sched/sch_netem.c): with jitter sigma and a table,
 *     t = table[rnd % size];  x = (sigma % 8192) * t, rounded half away from zero when / 8192;
 *     delay = x / 8192 + (sigma / 8192) * t + mu          (NETEM_DIST_SCALE = 8192, in ns)
 * without a table ("uniform"): delay = (rnd % (2 sigma)) + mu - sigma, i.e. [mu - sigma, mu + sigma).
 * Negative delays are clamped to 0 by the caller (netem sends them at once).
 *
 * Loss (netem's loss_event()):
 *   random:  lost when loss != 0 and rnd <= loss, loss = rint(pct / 100 * UINT32_MAX).
 *   gemodel: netem's loss_gilb_ell() with tc's `loss gemodel p r 1-h 1-k`:
 *            a1 = p, a2 = r, a3 = h = UINT32_MAX - (1-h), a4 = 1-k.
 *            Good: if rnd < a1 go Bad; then lost if rnd' < a4  (loss in Good = 1-k)
 *            Bad:  if rnd < a2 go Good; then lost if rnd' > a3 (loss in Bad  = 1-h)
 *            The loss of a packet is decided with the state it arrived in, the transition is for the
 *            next packet. Defaults as tc: r = 100 - p, 1-h = 100, 1-k = 0.
 *
 * From a profile's loss L and correlation C (fractions) to the 2-state chain (1-h = 1, 1-k = 0, so a
 * packet is lost exactly when the chain is in Bad): stationary loss pi_B = p / (p + r); the lag-1
 * autocorrelation of the loss indicator is the chain's second eigenvalue 1 - p - r. Solving
 * L = p / (p + r), C = 1 - p - r gives p = L (1 - C), r = (1 - L)(1 - C). A burst is a stay in Bad,
 * geometric with exit probability r: mean burst length 1 / r. C = 0 gives p = L, r = 1 - L: Bernoulli.
 */
#ifndef DELAYLINE_MODEL_H
#define DELAYLINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NETEM_DIST_SCALE 8192
#define DL_DIST_MAX 16384 /* iproute2's MAX_DIST: the most values a table file may hold */

/* xoshiro256** seeded through splitmix64: deterministic for a given 64-bit seed */
typedef struct {
    uint64_t s[4];
} dl_rng;

void dl_rng_seed(dl_rng *r, uint64_t seed);
uint32_t dl_rng_u32(dl_rng *r);

typedef struct {
    int16_t v[DL_DIST_MAX];
    size_t n;
} dl_table;

/* iproute2's format: '#' lines and empty lines skipped, other lines hold integers (strtol base 0).
 * Returns 0, or -1 with a message in err. */
int dl_table_load(dl_table *t, const char *path, char *err, size_t errlen);

/* netem's tabledist() in 64-bit arithmetic; mu and the result in ns; t NULL means uniform */
int64_t dl_tabledist(int64_t mu, uint32_t sigma, uint32_t rnd, const dl_table *t);

typedef enum { DL_LOSS_NONE, DL_LOSS_RANDOM, DL_LOSS_GE } dl_loss_kind;

typedef struct {
    dl_loss_kind kind;
    uint32_t random; /* DL_LOSS_RANDOM */
    uint32_t a1, a2, a3, a4; /* DL_LOSS_GE, netem's names */
    bool bad; /* DL_LOSS_GE state, starts Good like netem */
} dl_loss;

uint32_t dl_pct_u32(double pct); /* iproute2's set_percent(): rint(pct / 100 * UINT32_MAX) */
void dl_loss_random(dl_loss *l, double pct);
void dl_loss_ge(dl_loss *l, double p_pct, double r_pct, double one_minus_h_pct, double one_minus_k_pct);
bool dl_loss_event(dl_loss *l, dl_rng *r);

/* p and r (percent) of the 2-state chain with the given loss and lag-1 correlation (percent);
 * -1 when correlation is 100 % or more (a chain that never leaves its state) or out of range */
int dl_ge_from_correlation(double loss_pct, double corr_pct, double *p_pct, double *r_pct);

/* One packet's fate, as netem decides it: the loss first (no delay is drawn for a lost packet), then
 * the delay, clamped at 0. Loss and delay draw from two streams of the seed, so changing the loss
 * model does not change the delays. */
typedef struct {
    dl_rng loss_rng, delay_rng;
    dl_loss loss;
    const dl_table *table; /* NULL: uniform */
    int64_t mu;
    uint32_t sigma;
} dl_model;

void dl_model_init(dl_model *m, uint64_t seed, const dl_loss *loss, const dl_table *table, int64_t mu,
                   uint32_t sigma);
bool dl_model_next(dl_model *m, int64_t *delay_ns); /* true: lost */

/* Held packets: a binary min-heap on (release time, arrival number). With fifo order the release
 * times are non-decreasing in arrival order, so it pops in arrival order; with reorder, by due time. */
typedef struct {
    int64_t release_ns;
    uint64_t seq;
    uint32_t id; /* the kernel's packet id for the verdict */
} dl_held;

typedef struct {
    dl_held *a;
    size_t n, cap;
} dl_heap;

int dl_heap_init(dl_heap *h, size_t cap);
void dl_heap_free(dl_heap *h);
bool dl_heap_push(dl_heap *h, dl_held e); /* false when full */
const dl_held *dl_heap_top(const dl_heap *h);
dl_held dl_heap_pop(dl_heap *h);

#endif
