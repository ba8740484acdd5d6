/* The protocol wrapper of esimpl (docs/PROTOCOL.md): frames on stdin/stdout, logs on stderr.
 * One request at a time; a handler error (fail) becomes an ok:false reply, never a crash. */
#include "esimpl.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-request arena and errors ---- */
static void **blocks;
static size_t nblocks, capblocks;
static jmp_buf on_fail;
static char fail_msg[1024];

void *xalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) fail("out of memory (%zu bytes)", n);
    if (nblocks == capblocks) {
        size_t cap = capblocks ? 2 * capblocks : 256;
        void **nb = realloc(blocks, cap * sizeof *nb);
        if (!nb) { free(p); fail("out of memory"); }
        blocks = nb;
        capblocks = cap;
    }
    blocks[nblocks++] = p;
    return p;
}

static void arena_reset(void) {
    for (size_t k = 0; k < nblocks; k++) free(blocks[k]);
    nblocks = 0;
}

_Noreturn void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fail_msg, sizeof fail_msg, fmt, ap);
    va_end(ap);
    longjmp(on_fail, 1);
}

/* ---- little-endian helpers (the wire is little-endian whatever the host) ---- */
static uint64_t le_load(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int k = bytes - 1; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

static void le_store(unsigned char *p, uint64_t v, int bytes) {
    for (int k = 0; k < bytes; k++) { p[k] = (unsigned char)(v & 0xff); v >>= 8; }
}

double f64_of_bits(uint64_t b) { double d; memcpy(&d, &b, 8); return d; }
static uint64_t bits_of_f64(double d) { uint64_t b; memcpy(&b, &d, 8); return b; }

uint64_t hex64(const jval *v, const char *what) {
    if (!v || v->t != J_STR || strlen(v->s) != 18 || v->s[0] != '0' || v->s[1] != 'x')
        fail("%s must be '0x' plus 16 hex digits", what);
    uint64_t x = 0;
    for (int k = 2; k < 18; k++) {
        char h = v->s[k];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
        if (d < 0) fail("%s must be '0x' plus 16 lowercase hex digits", what);
        x = (x << 4) | (uint64_t)d;
    }
    return x;
}

static long long jint(const jval *v, const char *what) {
    if (!v || v->t != J_NUM || !v->is_int) fail("%s must be an integer", what);
    return v->i;
}

static const char *jstr(const jval *v, const char *what) {
    if (!v || v->t != J_STR) fail("%s must be a string", what);
    return v->s;
}

static int jbool(const jval *v, const char *what) {
    if (!v || v->t != J_BOOL) fail("%s must be true or false", what);
    return v->b;
}

/* ---- tensors ---- */
static const unsigned char *payload;
static uint64_t payload_len;

static int dtype_size(const char *d) {
    if (!strcmp(d, "f64") || !strcmp(d, "u64")) return 8;
    if (!strcmp(d, "f32") || !strcmp(d, "u32")) return 4;
    if (!strcmp(d, "f16") || !strcmp(d, "bf16")) return 2;
    return 0;
}

tensor get_tensor(const jval *desc, const char *what) {
    tensor t;
    memset(&t, 0, sizeof t);
    if (!desc || desc->t != J_OBJ) fail("%s must be a tensor descriptor", what);
    const char *d = jstr(jget(desc, "dtype"), "tensor dtype");
    if (!dtype_size(d) || strlen(d) >= sizeof t.dtype) fail("%s: unknown dtype '%s'", what, d);
    strcpy(t.dtype, d);
    jval *shape = jget(desc, "shape");
    if (!shape || shape->t != J_ARR || shape->n > 8) fail("%s: shape must be a list of at most 8 sizes", what);
    t.ndim = (int)shape->n;
    t.n = 1;
    for (size_t k = 0; k < shape->n; k++) {
        long long s = jint(shape->items[k], "shape entry");
        if (s < 0) fail("%s: negative shape", what);
        t.shape[k] = s;
        t.n *= (size_t)s;
    }
    long long off = jint(jget(desc, "offset"), "tensor offset");
    uint64_t end = (uint64_t)off + (uint64_t)t.n * (uint64_t)dtype_size(d);
    if (off < 0 || end > payload_len) fail("%s: bytes %lld..%llu are outside the payload", what, off,
                                           (unsigned long long)end);
    t.data = payload + off;
    return t;
}

uint64_t tensor_u64(const tensor *t, size_t k) { return le_load(t->data + 8 * k, 8); }

static tensor get_typed(const jval *desc, const char *what, const char *dtype) {
    tensor t = get_tensor(desc, what);
    if (strcmp(t.dtype, dtype)) fail("%s must be a %s tensor, got %s", what, dtype, t.dtype);
    return t;
}

/* ---- the reply under construction ---- */
static sbuf head, body;

static void put_tensor_desc(const char *dtype, const long long *shape, int ndim) {
    size_t pad = (8 - body.len % 8) % 8;
    static const unsigned char zeros[8];
    sb_put(&body, zeros, pad);
    sb_printf(&head, "{\"dtype\":\"%s\",\"shape\":[", dtype);
    for (int k = 0; k < ndim; k++) sb_printf(&head, k ? ",%lld" : "%lld", shape[k]);
    sb_printf(&head, "],\"offset\":%zu}", body.len);
}

static void put_u64s(const uint64_t *v, size_t n) {
    long long shape[1] = {(long long)n};
    put_tensor_desc("u64", shape, 1);
    unsigned char b[8];
    for (size_t k = 0; k < n; k++) { le_store(b, v[k], 8); sb_put(&body, b, 8); }
}

static void put_f64s(const double *v, size_t n) {
    long long shape[1] = {(long long)n};
    put_tensor_desc("f64", shape, 1);
    unsigned char b[8];
    for (size_t k = 0; k < n; k++) { le_store(b, bits_of_f64(v[k]), 8); sb_put(&body, b, 8); }
}

/* a scalar is a 0-dim tensor, shape [] (docs/PROTOCOL.md §2): a [1] is a mismatch */
static void put_f64_scalar(double v) {
    put_tensor_desc("f64", NULL, 0);
    unsigned char b[8];
    le_store(b, bits_of_f64(v), 8);
    sb_put(&body, b, 8);
}

/* ---- ES requests ---- */
static const char *dtype_names[] = {"f32", "f16", "bf16"};

static es_config get_config(const jval *args) {
    const jval *c = jreq(args, "config");
    es_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (strcmp(jstr(jreq(c, "profile"), "profile"), "es-at-scale"))
        fail("profile '%s' is not implemented (es-at-scale only)", jget(c, "profile")->s);
    const char *decay = jstr(jreq(c, "anchor_decay"), "anchor_decay");
    cfg.decay = !strcmp(decay, "none") ? DECAY_NONE : !strcmp(decay, "l1") ? DECAY_L1
                : !strcmp(decay, "l2") ? DECAY_L2 : -1;
    if (cfg.decay < 0) fail("unknown anchor_decay '%s'", decay);
    cfg.lambda = f64_of_bits(hex64(jreq(c, "anchor_lambda"), "anchor_lambda"));
    if (!(cfg.lambda >= 0.0)) fail("anchor_lambda must be >= 0");
    cfg.mapping = mapping_of(jstr(jreq(c, "mapping"), "mapping"));
    const char *scheme = jstr(jreq(c, "scheme"), "scheme");
    if (strcmp(scheme, "iid") && strcmp(scheme, "correlated")) fail("unknown scheme '%s'", scheme);
    cfg.iid = !strcmp(scheme, "iid");
    cfg.seed = hex64(jreq(c, "seed"), "seed");
    long long pop = jint(jreq(c, "population"), "population");
    if (pop < 1 || pop > 1 << 20) fail("population %lld is outside 1 .. 2^20", pop);
    cfg.population = (int)pop;
    cfg.sigma = f64_of_bits(hex64(jreq(c, "sigma"), "sigma"));
    cfg.alpha = f64_of_bits(hex64(jreq(c, "alpha"), "alpha"));
    cfg.antithetic = jbool(jreq(c, "antithetic"), "antithetic");
    if (cfg.antithetic && cfg.population % 2) fail("population must be even with antithetic pairs");
    const char *restore = jstr(jreq(c, "restore"), "restore");
    if (strcmp(restore, "regenerate") && strcmp(restore, "snapshot")) fail("unknown restore '%s'", restore);
    cfg.snapshot = !strcmp(restore, "snapshot");
    cfg.shaping = shaping_of(jstr(jreq(c, "shaping"), "shaping"));
    return cfg;
}

static slot *get_params(const jval *args, const char *key, int *nslots) {
    const jval *list = jreq(args, key);
    if (list->t != J_ARR) fail("%s must be a list of tensors", key);
    slot *s = xalloc((list->n + 1) * sizeof *s);
    for (size_t k = 0; k < list->n; k++) {
        tensor t = get_tensor(list->items[k], key);
        int dt = !strcmp(t.dtype, "f32") ? DT_F32 : !strcmp(t.dtype, "f16") ? DT_F16
                 : !strcmp(t.dtype, "bf16") ? DT_BF16 : -1;
        if (dt < 0) fail("%s[%zu]: dtype %s is not a parameter dtype", key, k, t.dtype);
        s[k].dtype = dt;
        s[k].n = t.n;
        s[k].v = xalloc(t.n * sizeof(float) + 1);
        int size = dtype_size(t.dtype);
        for (size_t i = 0; i < t.n; i++) s[k].v[i] = dt_from_bits((uint32_t)le_load(t.data + size * i, size), dt);
    }
    *nslots = (int)list->n;
    return s;
}

static void put_params(const jval *args, const slot *s, int nslots) {
    const jval *list = jreq(args, "params");
    sb_printf(&head, "\"params\":[");
    for (int k = 0; k < nslots; k++) {
        tensor t = get_tensor(list->items[k], "params");
        if (k) sb_printf(&head, ",");
        put_tensor_desc(dtype_names[s[k].dtype], t.shape, t.ndim);
        int size = s[k].dtype == DT_F32 ? 4 : 2;
        unsigned char b[4];
        for (size_t i = 0; i < s[k].n; i++) {
            le_store(b, dt_bits(s[k].v[i], s[k].dtype), size);
            sb_put(&body, b, (size_t)size);
        }
    }
    sb_printf(&head, "]");
}

static void op_perturb(const jval *args, int restore) {
    es_config cfg = get_config(args);
    int nslots;
    slot *params = get_params(args, "params", &nslots);
    long long member = jint(jreq(args, "member"), "member");
    if (restore && cfg.snapshot) {                 /* snapshot restore copies the saved bytes back */
        int nsnap;
        slot *snap = get_params(args, "snapshot", &nsnap);
        if (nsnap != nslots) fail("snapshot has %d tensors, params %d", nsnap, nslots);
        params = snap;
    } else {
        es_perturb(&cfg, params, nslots, hex64(jreq(args, "iteration"), "iteration"), (int)member, restore);
    }
    put_params(args, params, nslots);
}

static void op_update(const jval *args) {
    es_config cfg = get_config(args);
    int nslots;
    slot *params = get_params(args, "params", &nslots);
    tensor r = get_typed(jreq(args, "rewards"), "rewards", "f64");
    if ((long long)r.n != cfg.population) fail("rewards has %zu entries, the population is %d", r.n, cfg.population);
    double *rewards = xalloc(r.n * sizeof *rewards + 1), *coeffs = xalloc(r.n * sizeof *coeffs + 1);
    for (size_t k = 0; k < r.n; k++) rewards[k] = f64_of_bits(le_load(r.data + 8 * k, 8));
    es_update(&cfg, params, nslots, hex64(jreq(args, "iteration"), "iteration"), rewards, coeffs);
    if (cfg.decay != DECAY_NONE && cfg.lambda != 0.0) {      /* decay towards the anchor, after the update */
        int nanchor;
        slot *anchor = get_params(args, "anchor", &nanchor);
        if (nanchor != nslots) fail("anchor has %d tensors, params %d", nanchor, nslots);
        es_decay(&cfg, params, anchor, nslots);
    }
    put_params(args, params, nslots);
    sb_printf(&head, ",\"coefficients\":");
    put_f64s(coeffs, r.n);
}

static void op_decay(const jval *args) {
    es_config cfg = get_config(args);
    int nslots, nanchor;
    slot *params = get_params(args, "params", &nslots);
    slot *anchor = get_params(args, "anchor", &nanchor);
    if (nanchor != nslots) fail("anchor has %d tensors, params %d", nanchor, nslots);
    es_decay(&cfg, params, anchor, nslots);
    put_params(args, params, nslots);
}

static void op_shaping(const jval *args) {
    tensor r = get_typed(jreq(args, "rewards"), "rewards", "f64");
    double *rewards = xalloc(r.n * sizeof *rewards + 1), *coeffs = xalloc(r.n * sizeof *coeffs + 1);
    for (size_t k = 0; k < r.n; k++) rewards[k] = f64_of_bits(le_load(r.data + 8 * k, 8));
    int shaping = shaping_of(jstr(jreq(args, "shaping"), "shaping"));
    double mean = 0, std = 0;
    es_shape(rewards, (int)r.n, shaping, coeffs, &mean, &std);
    sb_printf(&head, "\"coefficients\":");
    put_f64s(coeffs, r.n);
    if (shaping == SH_ZSCORE) {   /* the shaping goldens pin numpy's mean and std too */
        sb_printf(&head, ",\"mean\":");
#ifdef FAULT_SCALAR_AS_1
        /* a planted fault (tests/test_goldens_mutants.py): the scalars sent with shape [1] */
        put_f64s(&mean, 1);
        sb_printf(&head, ",\"std\":");
        put_f64s(&std, 1);
#else
        put_f64_scalar(mean);
        sb_printf(&head, ",\"std\":");
        put_f64_scalar(std);
#endif
    }
}

/* ---- RNG requests ---- */
static void op_at(const jval *args) {
    uint64_t seed = hex64(jreq(args, "seed"), "seed");
    tensor idx = get_typed(jreq(args, "indices"), "indices", "u64");
    uint64_t *out = xalloc(idx.n * 8 + 1);
    for (size_t k = 0; k < idx.n; k++) out[k] = sm_at(seed, tensor_u64(&idx, k));
    sb_printf(&head, "\"outputs\":");
    put_u64s(out, idx.n);
}

static void op_member_seed(const jval *args) {
    uint64_t seed = hex64(jreq(args, "seed"), "seed"), it = hex64(jreq(args, "iteration"), "iteration");
    uint64_t pop = hex64(jreq(args, "population"), "population");
    int anti = jbool(jreq(args, "antithetic"), "antithetic");
    tensor m = get_typed(jreq(args, "members"), "members", "u64");
    uint64_t *out = xalloc(m.n * 8 + 1);
    for (size_t k = 0; k < m.n; k++) {
        uint64_t member = tensor_u64(&m, k);
        out[k] = member_seed(seed, it, pop, anti ? member - member % 2 : member);
    }
    sb_printf(&head, "\"member_seeds\":");
    put_u64s(out, m.n);
}

static void op_stream_seed(const jval *args) {
    uint64_t ms = hex64(jreq(args, "member_seed"), "member_seed");
    const char *scheme = jstr(jreq(args, "scheme"), "scheme");
    if (strcmp(scheme, "iid") && strcmp(scheme, "correlated")) fail("unknown scheme '%s'", scheme);
    tensor s = get_typed(jreq(args, "slots"), "slots", "u64");
    uint64_t *out = xalloc(s.n * 8 + 1);
    for (size_t k = 0; k < s.n; k++) out[k] = stream_seed(ms, tensor_u64(&s, k), !strcmp(scheme, "iid"));
    sb_printf(&head, "\"stream_seeds\":");
    put_u64s(out, s.n);
}

static void op_gaussian(const jval *args) {
    int mapping = mapping_of(jstr(jreq(args, "mapping"), "mapping"));
    uint64_t seed = hex64(jreq(args, "seed"), "seed"), first = hex64(jreq(args, "first"), "first");
    uint64_t n = hex64(jreq(args, "n"), "n");
    if (n > (1ull << 32)) fail("n = %llu is too large for one request", (unsigned long long)n);
    if (n && first + (n - 1) < first) fail("first + n exceeds 2^64");   /* first + n == 2^64 is allowed */
    float *v = xalloc((size_t)n * 4 + 1);
    gaussian(seed, first, n, mapping, v);
    long long shape[1] = {(long long)n};
    sb_printf(&head, "\"values\":");
    put_tensor_desc("f32", shape, 1);
    unsigned char *dst = xalloc((size_t)n * 4 + 1);
    for (uint64_t k = 0; k < n; k++) { uint32_t b; memcpy(&b, &v[k], 4); le_store(dst + 4 * k, b, 4); }
    sb_put(&body, dst, (size_t)n * 4);
}

/* the bulk request: ranges (seeds[k], firsts[k], counts[k]), values concatenated in range order */
static void op_gaussian_ranges(const jval *args) {
    int mapping = mapping_of(jstr(jreq(args, "mapping"), "mapping"));
    tensor seeds = get_typed(jreq(args, "seeds"), "seeds", "u64");
    tensor firsts = get_typed(jreq(args, "firsts"), "firsts", "u64");
    tensor counts = get_typed(jreq(args, "counts"), "counts", "u64");
    if (seeds.n != firsts.n || seeds.n != counts.n) fail("seeds, firsts and counts must have one entry per range");
    uint64_t total = 0;
    for (size_t k = 0; k < counts.n; k++) {
        uint64_t n = tensor_u64(&counts, k), first = tensor_u64(&firsts, k);
        if (n && first + (n - 1) < first) fail("range %zu: first + n exceeds 2^64", k);
        total += n;
        if (total > (1ull << 32) || total < n) fail("the ranges hold too many values for one request");
    }
    float *v = xalloc((size_t)total * 4 + 1);
    uint64_t at = 0;
    for (size_t k = 0; k < counts.n; k++) {
        uint64_t n = tensor_u64(&counts, k);
        gaussian(tensor_u64(&seeds, k), tensor_u64(&firsts, k), n, mapping, v + at);
        at += n;
    }
    long long shape[1] = {(long long)total};
    sb_printf(&head, "\"values\":");
    put_tensor_desc("f32", shape, 1);
    unsigned char *dst = xalloc((size_t)total * 4 + 1);
    for (uint64_t k = 0; k < total; k++) { uint32_t b; memcpy(&b, &v[k], 4); le_store(dst + 4 * k, b, 4); }
    sb_put(&body, dst, (size_t)total * 4);
}

static const char *CAPABILITIES =
    "{\"protocol\":1,"
    "\"implementation\":{\"name\":\"esimpl-c\",\"version\":\"0.1.0\",\"language\":\"C11\"},"
    "\"contract_version\":1,\"profiles\":{\"es-at-scale\":1},"
    "\"operations\":[\"at\",\"member_seed\",\"stream_seed\",\"gaussian\",\"gaussian_ranges\",\"perturb\",\"restore\",\"update\","
    "\"shaping\",\"decay\"],"
    "\"mappings\":[\"poly32\",\"libm64\"],\"dtypes\":[\"f32\",\"f16\",\"bf16\"],\"schemes\":[\"iid\",\"correlated\"],"
    "\"shapings\":[\"zscore\",\"centered_ranks\",\"none\"],\"decays\":[\"l1\",\"l2\"],\"restores\":[\"regenerate\",\"snapshot\"],"
    "\"antithetic\":true,\"noise\":\"contract\"}";

static void dispatch(const char *op, const jval *args) {
    if (!strcmp(op, "capabilities")) { sb_printf(&head, "%s", CAPABILITIES); return; }
    if (!args || args->t != J_OBJ) fail("args must be an object");
    if (!strcmp(op, "at")) op_at(args);
    else if (!strcmp(op, "member_seed")) op_member_seed(args);
    else if (!strcmp(op, "stream_seed")) op_stream_seed(args);
    else if (!strcmp(op, "gaussian")) op_gaussian(args);
    else if (!strcmp(op, "gaussian_ranges")) op_gaussian_ranges(args);
    else if (!strcmp(op, "perturb")) op_perturb(args, 0);
    else if (!strcmp(op, "restore")) op_perturb(args, 1);
    else if (!strcmp(op, "update")) op_update(args);
    else if (!strcmp(op, "shaping")) op_shaping(args);
    else if (!strcmp(op, "decay")) op_decay(args);
    else fail("unsupported operation '%s'", op);
}

/* ---- frames ---- */
static int read_exact(void *dst, size_t n) {
    return fread(dst, 1, n, stdin) == n;
}

static void write_frame(const sbuf *h, const sbuf *b) {
    unsigned char prefix[16] = {'E', 'S', 'V', 'F'};
    le_store(prefix + 4, h->len, 4);
    le_store(prefix + 8, b->len, 8);
    fwrite(prefix, 1, 16, stdout);
    fwrite(h->p, 1, h->len, stdout);
    if (b->len) fwrite(b->p, 1, b->len, stdout);
    fflush(stdout);
}

/* One request: parse, dispatch, and build the reply in head/body (an ok:false reply on fail). */
static void handle(const char *htext, size_t hlen) {
    volatile long long id = -1;                  /* volatile: read after longjmp */
    volatile int is_caps = 0;
    head.len = body.len = 0;
    if (setjmp(on_fail) == 0) {
        jval *req = json_parse(htext, hlen);
        id = jint(jreq(req, "id"), "id");
        const char *op = jstr(jreq(req, "op"), "op");
        is_caps = !strcmp(op, "capabilities");
        /* capabilities: the result is the capabilities object itself */
        sb_printf(&head, is_caps ? "{\"id\":%lld,\"ok\":true,\"result\":" : "{\"id\":%lld,\"ok\":true,\"result\":{",
                  (long long)id);
        dispatch(op, jget(req, "args"));
        sb_printf(&head, is_caps ? "}" : "}}");
    } else {
        head.len = body.len = 0;
        sb_printf(&head, "{\"id\":%lld,\"ok\":false,\"error\":", (long long)id);
        sb_json_string(&head, fail_msg);
        sb_printf(&head, "}");
    }
}

int main(void) {
    unsigned char prefix[16];
    for (;;) {
        if (!read_exact(prefix, 16)) return 0;                  /* stdin closed: done */
        if (memcmp(prefix, "ESVF", 4)) { fprintf(stderr, "esimpl: bad frame magic\n"); return 1; }
        uint64_t hlen = le_load(prefix + 4, 4), blen = le_load(prefix + 8, 8);
        char *htext = malloc(hlen + 1);
        unsigned char *pl = malloc(blen + 1);
        if (!htext || !pl || !read_exact(htext, hlen) || (blen && !read_exact(pl, blen))) {
            fprintf(stderr, "esimpl: truncated or oversized request frame\n");
            return 1;
        }
        payload = pl;
        payload_len = blen;
        handle(htext, hlen);
        write_frame(&head, &body);
        arena_reset();
        free(htext);
        free(pl);
    }
}
