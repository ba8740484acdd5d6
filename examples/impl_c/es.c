/* The es-at-scale profile (docs/CONTRACT.md §7): perturb, restore, reward shaping and the
 * update, for f32, f16 and bf16 parameters. Every line is one f32 operation, never fused. */
#pragma STDC FP_CONTRACT OFF

#include "esimpl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float f32_of_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static uint32_t bits_of_f32(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

/* f32 -> bf16, round to nearest even (NaN stays a quiet NaN). */
static uint32_t bf16_bits(float x) {
    uint32_t b = bits_of_f32(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (b >> 16) | 0x40u;
#ifdef PLANTED_FAULT
    return b >> 16;                                 /* the planted fault: truncation (round toward zero) */
#else
    return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
#endif
}

/* f32 -> f16, round to nearest even, subnormals and overflow to infinity included. */
static uint32_t f16_bits(float x) {
    uint32_t b = bits_of_f32(x), sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;                  /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;                 /* >= 65520 rounds to infinity */
    if (a < 0x38800000u) {                                       /* below 2^-14: a subnormal f16 or 0 */
        if (a < 0x33000000u) return sign;                        /* below 2^-25: rounds to zero (2^-25 ties to 0) */
        uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;                                /* 14..24: value = mant * 2^(e-150) */
        uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return sign | q;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;    /* rebias 127 -> 15 and round 13 bits */
    return sign | (r >> 13);
}

static float f16_value(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return f32_of_bits(sign | 0x7f800000u | (m << 13));
    if (e == 0) {                                                /* subnormal: m * 2^-24, exact in f32 */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return f32_of_bits(sign | ((e + 112) << 23) | (m << 13));
}

uint32_t dt_bits(float x, int dtype) {
    if (dtype == DT_BF16) return bf16_bits(x);
    if (dtype == DT_F16) return f16_bits(x);
    return bits_of_f32(x);
}

float dt_from_bits(uint32_t b, int dtype) {
    if (dtype == DT_BF16) return f32_of_bits(b << 16);
    if (dtype == DT_F16) return f16_value(b);
    return f32_of_bits(b);
}

float rd_dt(float x, int dtype) { return dtype == DT_F32 ? x : dt_from_bits(dt_bits(x, dtype), dtype); }

#ifdef FAULT_UPDATE_F64
/* f64 -> dtype rounded once (to nearest even): round to odd in f32 first (f32 has more than two bits
 * beyond f16 and bf16, so the second rounding is then exact), then to the dtype */
static float rd_dt_from_f64(double x, int dtype) {
    float f = (float)x;
    if ((double)f != x && dtype != DT_F32) {
        uint32_t b = bits_of_f32(f);
        if (fabs((double)f) > fabs(x)) b -= 1;     /* toward zero: the truncation */
        f = f32_of_bits(b | 1u);                   /* sticky bit: odd */
    }
    return rd_dt(f, dtype);
}
#endif

int shaping_of(const char *name) {
    if (strcmp(name, "zscore") == 0) return SH_ZSCORE;
    if (strcmp(name, "centered_ranks") == 0) return SH_RANKS;
    if (strcmp(name, "none") == 0) return SH_NONE;
    fail("unknown shaping '%s'", name);
}

/* ---- noise ---- */
static uint64_t noise_member(const es_config *c, int member) {
    return (uint64_t)(c->antithetic ? member - member % 2 : member);
}

static float *noise(const es_config *c, uint64_t iteration, int member, int slot_index, size_t n) {
    float *eps = xalloc(n * sizeof *eps + 1);
    uint64_t ms = member_seed(c->seed, iteration, (uint64_t)c->population, noise_member(c, member));
    gaussian(stream_seed(ms, (uint64_t)slot_index, c->iid), 0, n, c->mapping, eps);
    return eps;
}

/* perturb: t = rd_dt(rd32(f32(q(eps)) * rd32(s))); theta = rd_dt(f32(theta) + f32(t)).
 * s = +sigma, or -sigma for the odd member of an antithetic pair; restore negates s. */
void es_perturb(const es_config *c, slot *params, int nslots, uint64_t iteration, int member, int restore) {
    if (member < 0 || member >= c->population) fail("member %d is outside the population [0, %d)", member,
                                                     c->population);
    double s = (c->antithetic && member % 2) ? -c->sigma : c->sigma;
    if (restore) s = -s;
    float s32 = (float)s;
    for (int k = 0; k < nslots; k++) {
        slot *p = &params[k];
        float *eps = noise(c, iteration, member, k, p->n);
        for (size_t i = 0; i < p->n; i++) {
            float q = rd_dt(eps[i], p->dtype);
            float t = rd_dt(q * s32, p->dtype);
            p->v[i] = rd_dt(p->v[i] + t, p->dtype);
        }
    }
}

/* numpy's float64 add.reduce of a contiguous array (its pairwise summation, blocks of 8;
 * numpy starts the reduction from 0.0, so a sum of -0.0 values is +0.0): see CONTRACT.md. */
static double pairwise(const double *a, int n) {
    if (n < 8) {
        double res = 0.0;
        for (int i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(a, n2) + pairwise(a + n2, n - n2);
}

static double np_sum(const double *a, int n) { return 0.0 + pairwise(a, n); }

static const double *rank_keys;
static int by_reward_then_index(const void *x, const void *y) {
    int i = *(const int *)x, j = *(const int *)y;
    if (rank_keys[i] < rank_keys[j]) return -1;
    if (rank_keys[i] > rank_keys[j]) return 1;
    return (i > j) - (i < j);
}

void es_shape(const double *r, int n, int shaping, double *coeffs, double *mean_out, double *std_out) {
    if (n < 1) fail("rewards is empty: a population has at least one member");
    for (int k = 0; k < n; k++)
        if (!isfinite(r[k])) fail("reward of member %d is not finite", k);
    if (shaping == SH_NONE) {
        memcpy(coeffs, r, (size_t)n * sizeof *r);
    } else if (shaping == SH_ZSCORE) {
        double mean = np_sum(r, n) / n;                       /* numpy.mean */
        double *sq = xalloc((size_t)n * sizeof *sq);
        for (int k = 0; k < n; k++) { double d = r[k] - mean; sq[k] = d * d; }
        double std = sqrt(np_sum(sq, n) / n);                  /* numpy.std, ddof 0 */
        for (int k = 0; k < n; k++) coeffs[k] = (r[k] - mean) / (std + 1e-8);
        if (mean_out) *mean_out = mean;
        if (std_out) *std_out = std;
    } else {
        if (n < 2) fail("centered_ranks shaping needs a population of at least 2");
        int *order = xalloc((size_t)n * sizeof *order);
        for (int k = 0; k < n; k++) order[k] = k;
        rank_keys = r;
        qsort(order, (size_t)n, sizeof *order, by_reward_then_index);
        for (int rank = 0; rank < n; rank++) {
            float c = (float)((double)rank / (double)(n - 1));   /* correctly rounded f32 quotient */
            coeffs[order[rank]] = (double)(c - 0.5f);
        }
    }
}

/* update: acc = sum over members (f32, in member order) of rd32(f32(q(eps_n)) * rd32(C_n));
 * acc = rd32(acc * rd32(alpha / N)); theta = rd_dt(f32(theta) + f32(rd_dt(acc))).
 * Antithetic: pairs k use D_k = C_2k - C_2k+1 (f64) with member 2k's noise; divisor N. */
void es_update(const es_config *c, slot *params, int nslots, uint64_t iteration, const double *rewards,
               double *coeffs) {
    int n = c->population;
    es_shape(rewards, n, c->shaping, coeffs, NULL, NULL);
    int terms = c->antithetic ? n / 2 : n;
    double *term = xalloc((size_t)terms * sizeof *term);
    for (int k = 0; k < terms; k++) {
        term[k] = c->antithetic ? coeffs[2 * k] - coeffs[2 * k + 1] : coeffs[k];
        if (!isfinite(term[k])) fail("the coefficient of member %d is not finite", c->antithetic ? 2 * k : k);
    }
    float scale = (float)(c->alpha / (double)n);
    for (int s = 0; s < nslots; s++) {
        slot *p = &params[s];
        float *acc = xalloc(p->n * sizeof *acc + 1);
        for (int k = 0; k < terms; k++) {
            int member = c->antithetic ? 2 * k : k;
            float *eps = noise(c, iteration, member, s, p->n);
            float ck = (float)term[k];
            for (size_t i = 0; i < p->n; i++) {
                float prod = rd_dt(eps[i], p->dtype) * ck;
                acc[i] = acc[i] + prod;
            }
        }
        for (size_t i = 0; i < p->n; i++) {
            float a = acc[i] * scale;
#ifdef FAULT_UPDATE_F64
            /* a planted fault (tests/test_goldens_mutants.py): the step acc x scale rounded once from f64
             * to the dtype instead of to f32 first; they differ where the f32 value lands on a midpoint of
             * the dtype (about one f16 step in 14,000) */
            p->v[i] = rd_dt(p->v[i] + rd_dt_from_f64((double)acc[i] * (double)scale, p->dtype), p->dtype);
#else
            p->v[i] = rd_dt(p->v[i] + rd_dt(a, p->dtype), p->dtype);
#endif
        }
    }
}

/* Anchored weight decay (docs/numerics.md §5, docs/CONTRACT.md §7), with a = alpha * lambda (f64):
 * d = rd_dt(f32(theta) - f32(theta0)); l2: d = rd_dt(f32(d) * rd32(1 - a));
 * l1: u = rd_dt(|f32(d)| - b), b = rd32(a) (f32) or f32(rd_dt(rd32(a))); v = u if u >= 0 else +0;
 *     d = sign(d) * v, sign(+-0) = +0; theta = rd_dt(f32(d) + f32(theta0)). */
void es_decay(const es_config *c, slot *params, const slot *anchor, int nslots) {
    if (c->decay == DECAY_NONE || c->lambda == 0.0) return;
    double a = c->alpha * c->lambda;
    if (c->decay == DECAY_L2 && !(a < 1.0)) fail("l2 decay needs alpha * lambda < 1");
    for (int k = 0; k < nslots; k++) {
        slot *p = &params[k];
        const slot *an = &anchor[k];
        if (an->n != p->n || an->dtype != p->dtype) fail("anchor[%d] does not match params[%d]", k, k);
        float scale = (float)(1.0 - a);
        float b = p->dtype == DT_F32 ? (float)a : rd_dt((float)a, p->dtype);
        for (size_t i = 0; i < p->n; i++) {
            float d = rd_dt(p->v[i] - an->v[i], p->dtype);
            if (c->decay == DECAY_L2) {
                d = rd_dt(d * scale, p->dtype);
            } else {
                float u = rd_dt(fabsf(d) - b, p->dtype);
                float v = u >= 0.0f ? u : 0.0f;              /* u = -0 compares >= 0: it stays -0 */
                float s = d > 0.0f ? 1.0f : d < 0.0f ? -1.0f : 0.0f;
                d = rd_dt(s * v, p->dtype);
            }
            p->v[i] = rd_dt(d + an->v[i], p->dtype);
        }
    }
}
