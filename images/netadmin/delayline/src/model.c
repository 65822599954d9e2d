/* See model.h for the semantics (netem's) that this file implements. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void dl_rng_seed(dl_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint32_t dl_rng_u32(dl_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (uint32_t)(result >> 32);
}

int dl_table_load(dl_table *t, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t len = 0;
    int rc = -1;

    t->n = 0;
    if (f == NULL) {
        snprintf(err, errlen, "cannot open distribution table %s: %s", path, strerror(errno));
        return -1;
    }
    while (getline(&line, &len, f) != -1) {
        if (line[0] == '\n' || line[0] == '#')
            continue;
        for (char *p = line, *end;; p = end) {
            errno = 0;
            long x = strtol(p, &end, 0);
            if (end == p)
                break;
            if (errno != 0 || x < INT16_MIN || x > INT16_MAX) {
                snprintf(err, errlen, "%s: value out of range for a 16-bit table entry", path);
                goto out;
            }
            if (t->n >= DL_DIST_MAX) {
                snprintf(err, errlen, "%s: more than %d values", path, DL_DIST_MAX);
                goto out;
            }
            t->v[t->n++] = (int16_t)x;
        }
    }
    if (t->n == 0)
        snprintf(err, errlen, "%s: no values", path);
    else
        rc = 0;
out:
    free(line);
    fclose(f);
    return rc;
}

int64_t dl_tabledist(int64_t mu, uint32_t sigma, uint32_t rnd, const dl_table *t)
{
    if (sigma == 0)
        return mu;
    if (t == NULL)
        return (int64_t)(rnd % (2 * (uint64_t)sigma)) + mu - (int64_t)sigma;
    int64_t v = t->v[rnd % t->n];
    int64_t x = (int64_t)(sigma % NETEM_DIST_SCALE) * v;
    x += x >= 0 ? NETEM_DIST_SCALE / 2 : -NETEM_DIST_SCALE / 2;
    return x / NETEM_DIST_SCALE + (int64_t)(sigma / NETEM_DIST_SCALE) * v + mu;
}

uint32_t dl_pct_u32(double pct)
{
    double v = rint(pct / 100.0 * (double)UINT32_MAX);
    if (v <= 0)
        return 0;
    if (v >= (double)UINT32_MAX)
        return UINT32_MAX;
    return (uint32_t)v;
}

void dl_loss_random(dl_loss *l, double pct)
{
    memset(l, 0, sizeof(*l));
    l->kind = pct > 0 ? DL_LOSS_RANDOM : DL_LOSS_NONE;
    l->random = dl_pct_u32(pct);
}

void dl_loss_ge(dl_loss *l, double p_pct, double r_pct, double one_minus_h_pct, double one_minus_k_pct)
{
    memset(l, 0, sizeof(*l));
    l->kind = DL_LOSS_GE;
    l->a1 = dl_pct_u32(p_pct);
    l->a2 = dl_pct_u32(r_pct);
    l->a3 = UINT32_MAX - dl_pct_u32(one_minus_h_pct);
    l->a4 = dl_pct_u32(one_minus_k_pct);
}

bool dl_loss_event(dl_loss *l, dl_rng *r)
{
    switch (l->kind) {
    case DL_LOSS_NONE:
        return false;
    case DL_LOSS_RANDOM:
        return l->random != 0 && l->random >= dl_rng_u32(r);
    case DL_LOSS_GE:
        if (!l->bad) {
            if (dl_rng_u32(r) < l->a1)
                l->bad = true;
            return dl_rng_u32(r) < l->a4;
        }
        if (dl_rng_u32(r) < l->a2)
            l->bad = false;
        return dl_rng_u32(r) > l->a3;
    }
    return false;
}

int dl_ge_from_correlation(double loss_pct, double corr_pct, double *p_pct, double *r_pct)
{
    if (loss_pct < 0 || loss_pct > 100 || corr_pct < 0 || corr_pct >= 100)
        return -1;
    double l = loss_pct / 100.0, c = corr_pct / 100.0;
    *p_pct = 100.0 * l * (1.0 - c);
    *r_pct = 100.0 * (1.0 - l) * (1.0 - c);
    return 0;
}

void dl_model_init(dl_model *m, uint64_t seed, const dl_loss *loss, const dl_table *table, int64_t mu,
                   uint32_t sigma)
{
    dl_rng_seed(&m->loss_rng, seed);
    dl_rng_seed(&m->delay_rng, seed ^ 0x6a09e667f3bcc908ULL);
    m->loss = *loss;
    m->table = table;
    m->mu = mu;
    m->sigma = sigma;
}

bool dl_model_next(dl_model *m, int64_t *delay_ns)
{
    if (dl_loss_event(&m->loss, &m->loss_rng))
        return true;
    uint32_t rnd = m->sigma ? dl_rng_u32(&m->delay_rng) : 0;
    int64_t d = dl_tabledist(m->mu, m->sigma, rnd, m->table);
    *delay_ns = d < 0 ? 0 : d;
    return false;
}

int dl_heap_init(dl_heap *h, size_t cap)
{
    h->a = calloc(cap, sizeof(*h->a));
    h->n = 0;
    h->cap = cap;
    return h->a == NULL ? -1 : 0;
}

void dl_heap_free(dl_heap *h)
{
    free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
}

static bool before(const dl_held *x, const dl_held *y)
{
    return x->release_ns < y->release_ns || (x->release_ns == y->release_ns && x->seq < y->seq);
}

bool dl_heap_push(dl_heap *h, dl_held e)
{
    if (h->n == h->cap)
        return false;
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&e, &h->a[parent]))
            break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = e;
    return true;
}

const dl_held *dl_heap_top(const dl_heap *h)
{
    return h->n ? &h->a[0] : NULL;
}

dl_held dl_heap_pop(dl_heap *h)
{
    dl_held top = h->a[0];
    dl_held last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(&h->a[c + 1], &h->a[c]))
            c++;
        if (!before(&h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = last;
    return top;
}
