// esimpl: a second implementation of the esverify contract, in C11 (libc + libm only),
// written from the project's docs (docs/CONTRACT.md, docs/PROTOCOL.md), and its protocol
// wrapper (main.c).
//
// Build:  cc -std=c11 -O2 examples/impl_c/*.c -lm -o esimpl
// Faulty: cc -std=c11 -O2 -DPLANTED_FAULT examples/impl_c/*.c -lm -o esimpl-faulty
//         (bf16 rounding truncates instead of rounding to nearest even: see es.c)
// Check:  esverify goldens check --impl ./esimpl
#ifndef ESIMPL_H
#define ESIMPL_H

#include <stddef.h>
#include <stdint.h>

/* ---- per-request memory and errors (main.c) ---- */
void *xalloc(size_t n);                       /* zeroed; freed after each request */
_Noreturn void fail(const char *fmt, ...);    /* abort this request: the reply is ok:false with the message */

/* ---- JSON (json.c): a small DOM, enough for the protocol's headers ---- */
typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;
typedef struct jval {
    jtype t;
    int b;                 /* J_BOOL */
    int is_int;            /* J_NUM written without fraction or exponent */
    long long i;           /* J_NUM, when is_int */
    double num;            /* J_NUM */
    char *s;               /* J_STR (NUL-terminated, escapes decoded) */
    size_t n;              /* J_ARR / J_OBJ element count */
    struct jval **items;   /* J_ARR / J_OBJ values */
    char **keys;           /* J_OBJ keys */
} jval;
jval *json_parse(const char *text, size_t len);          /* fail()s on a syntax error */
jval *jget(const jval *obj, const char *key);             /* NULL when absent */
jval *jreq(const jval *obj, const char *key);             /* fail()s when absent */

typedef struct { char *p; size_t len, cap; } sbuf;       /* growable byte buffer (malloc'd) */
void sb_put(sbuf *b, const void *data, size_t n);
void sb_printf(sbuf *b, const char *fmt, ...);
void sb_json_string(sbuf *b, const char *s);

/* ---- tensors on the wire (main.c) ---- */
typedef struct {
    char dtype[8];         /* f64 f32 f16 bf16 u64 u32 */
    int ndim;
    long long shape[8];
    size_t n;              /* element count */
    const unsigned char *data;  /* little-endian bit patterns inside the request payload */
} tensor;
tensor get_tensor(const jval *desc, const char *what);
uint64_t tensor_u64(const tensor *t, size_t k);
uint64_t hex64(const jval *v, const char *what);          /* "0x" + 16 hex digits */
double f64_of_bits(uint64_t b);

/* ---- RNG contract v1 (rng.c; docs/CONTRACT.md §2-§4) ---- */
uint64_t sm_at(uint64_t seed, uint64_t i);
uint64_t member_seed(uint64_t seed, uint64_t iteration, uint64_t population, uint64_t member);
uint64_t stream_seed(uint64_t member_seed, uint64_t slot, int iid);
enum { MAP_POLY32 = 0, MAP_LIBM64 = 1 };
int mapping_of(const char *name);                         /* fail()s on an unknown name */
void gaussian(uint64_t seed, uint64_t first, uint64_t n, int mapping, float *out);

/* ---- es-at-scale (es.c; docs/numerics.md §2-§4 as summarized in docs/CONTRACT.md §7) ---- */
enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };
typedef struct {
    int mapping, iid, population, antithetic, snapshot, shaping;   /* shaping: 0 zscore, 1 ranks, 2 none */
    int decay;                                                   /* DECAY_NONE, DECAY_L1, DECAY_L2 */
    uint64_t seed;
    double sigma, alpha, lambda;
} es_config;
typedef struct { int dtype; size_t n; float *v; } slot;  /* values widened to f32 (exact) */
enum { SH_ZSCORE = 0, SH_RANKS = 1, SH_NONE = 2 };
enum { DECAY_NONE = 0, DECAY_L1 = 1, DECAY_L2 = 2 };
int shaping_of(const char *name);
float rd_dt(float x, int dtype);                          /* round an f32 to the slot dtype (kept as f32) */
uint32_t dt_bits(float x, int dtype);                     /* bit pattern of an f32 holding a dtype value */
float dt_from_bits(uint32_t b, int dtype);
void es_perturb(const es_config *c, slot *params, int nslots, uint64_t iteration, int member, int restore);
/* mean_out/std_out (may be NULL): numpy's mean and std (ddof 0), set for zscore shaping only */
void es_shape(const double *r, int n, int shaping, double *coeffs, double *mean_out, double *std_out);
void es_update(const es_config *c, slot *params, int nslots, uint64_t iteration, const double *rewards,
               double *coeffs);
void es_decay(const es_config *c, slot *params, const slot *anchor, int nslots);   /* anchored decay */
#endif
