/* The RNG contract v1 (docs/CONTRACT.md §2-§4): splitmix64 by counter, the poly32 and libm64
 * gaussian mappings, member and stream seeds.
 *
 * poly32 must be one correctly rounded binary32 operation per step, never contracted into
 * an FMA: the pragma below says so to the compiler (gcc ignores it and does not contract
 * under -std=c11, whose default is -ffp-contract=off; clang honours it), and FLT_EVAL_METHOD
 * must be 0 (no x87 excess precision), checked at compile time. */
#pragma STDC FP_CONTRACT OFF

#include "esimpl.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "poly32 needs FLT_EVAL_METHOD == 0 (float operations evaluated in float): use SSE2, not x87"
#endif

#define GAMMA 0x9E3779B97F4A7C15ULL
#define SEED_DOMAIN 0x65735F7365656473ULL
#define NOISE_DOMAIN 0x65735F6E6F697365ULL

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t sm_at(uint64_t seed, uint64_t i) { return mix(seed + (i + 1) * GAMMA); }   /* u64 wraps */

uint64_t member_seed(uint64_t seed, uint64_t iteration, uint64_t population, uint64_t member) {
    return sm_at(seed ^ SEED_DOMAIN, iteration * population + member);
}

uint64_t stream_seed(uint64_t ms, uint64_t slot, int iid) { return iid ? sm_at(ms ^ NOISE_DOMAIN, slot) : ms; }

int mapping_of(const char *name) {
    if (strcmp(name, "poly32") == 0) return MAP_POLY32;
    if (strcmp(name, "libm64") == 0) return MAP_LIBM64;
    fail("unknown mapping '%s'", name);
}

static float f32_of_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static uint32_t bits_of_f32(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

/* The constants as bit patterns (docs/CONTRACT.md §3b table): no decimal parsing doubt. */
#define F(bits) f32_of_bits(bits##u)

/* Both halves of the Box-Muller pair of uniforms (ua in (0,1], ub in [0,1)). */
static void pair_poly32(double ua, double ub, float *cos_half, float *sin_half) {
    float ua32 = (float)ua, ub32 = (float)ub;       /* one rounding each, from the exact f64 */
    uint32_t bits = bits_of_f32(ua32);
    float e = (float)((int)(bits >> 23) - 126);
    float m = f32_of_bits((bits & 0x007FFFFFu) | 0x3F000000u);
    if (m < F(0x3f3504f3)) { e = e - 1.0f; m = m + m; }
    float f = m - 1.0f, z = f * f;
    static const uint32_t C[8] = {0xbdebd1b8u, 0x3def251au, 0xbdfe5d4fu, 0x3e11e9bfu,
                                  0xbe2aae50u, 0x3e4cceacu, 0xbe7ffffcu, 0x3eaaaaaau};
    float p = F(0x3d9021bb);
    for (int k = 0; k < 8; k++) { p = p * f; p = p + f32_of_bits(C[k]); }   /* two roundings */
    float y = (f * z) * p;
    y = y + e * F(0xb95e8083);
    y = y - 0.5f * z;
    y = f + y;
    float ln = y + e * F(0x3f318000);
    float r = sqrtf(-2.0f * ln);                    /* IEEE sqrt: correctly rounded */

    float t4 = ub32 * 4.0f;
    float q_f = floorf(t4 + 0.5f);
    float yy = t4 - q_f;
    float x = yy * F(0x3fc90fdb), zz = x * x;
    float s = F(0xb94ca1f9);
    s = s * zz + F(0x3c08839e);
    s = s * zz + F(0xbe2aaaa3);
    float sin_x = x + (x * zz) * s;
    float c = F(0x37ccf5ce);
    c = c * zz + F(0xbab6061a);
    c = c * zz + F(0x3d2aaaa5);
    float cos_x = (1.0f - 0.5f * zz) + (zz * zz) * c;
    int q = (int)q_f & 3;
    float sin_b = (q & 1) ? cos_x : sin_x, cos_b = (q & 1) ? sin_x : cos_x;
    float sin_v = (q & 2) ? -sin_b : sin_b;
    float cos_v = ((q + 1) & 2) ? -cos_b : cos_b;
    *cos_half = r * cos_v;
    *sin_half = r * sin_v;
}

static void pair_libm64(double ua, double ub, float *cos_half, float *sin_half) {
    const double pi = 3.141592653589793;            /* the f64 nearest to pi */
    double r = sqrt(-2.0 * log(ua)), t = 2.0 * pi * ub;
    *cos_half = (float)(r * cos(t));                /* the f64 product, rounded once */
    *sin_half = (float)(r * sin(t));
}

void gaussian(uint64_t seed, uint64_t first, uint64_t n, int mapping, float *out) {
    for (uint64_t k = 0; k < n;) {
        uint64_t j = first + k, pair = j - (j & 1);
        uint64_t a = sm_at(seed, pair), b = sm_at(seed, pair + 1);
        double ua = (double)((a >> 11) + 1) * 0x1p-53;   /* exact: a 53-bit integer times 2^-53 */
        double ub = (double)(b >> 11) * 0x1p-53;
        float c, s;
        if (mapping == MAP_POLY32) pair_poly32(ua, ub, &c, &s); else pair_libm64(ua, ub, &c, &s);
#ifdef FAULT_COS_EVERY
        /* a planted fault (tests/test_goldens_mutants.py): the cosine half one ulp up in about one pair of
         * FAULT_COS_EVERY, as a wrong branch for some input range would give */
        if ((a >> 11) % (FAULT_COS_EVERY) == 0) c = nextafterf(c, INFINITY);
#endif
        if ((j & 1) == 0) {
            out[k++] = c;
            if (k < n) out[k++] = s;
        } else {
            out[k++] = s;
        }
    }
}
