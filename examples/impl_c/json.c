/* A small JSON reader and writer for the protocol headers (RFC 8259 subset: \uXXXX escapes
 * outside ASCII are refused, numbers keep an exact integer when written as one). */
#include "esimpl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *s; size_t i, n; } cursor;

static void ws(cursor *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

static jval *value(cursor *c, int depth);

static char *string(cursor *c) {
    if (c->i >= c->n || c->s[c->i] != '"') fail("json: expected a string at byte %zu", c->i);
    c->i++;
    size_t start = c->i, len = 0;
    char *out = xalloc(c->n - start + 1);
    while (c->i < c->n && c->s[c->i] != '"') {
        char ch = c->s[c->i++];
        if (ch == '\\') {
            if (c->i >= c->n) break;
            char e = c->s[c->i++];
            switch (e) {
            case '"': ch = '"'; break;
            case '\\': ch = '\\'; break;
            case '/': ch = '/'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'u': {
                if (c->i + 4 > c->n) fail("json: truncated \\u escape");
                unsigned v = 0;
                for (int k = 0; k < 4; k++) {
                    char h = c->s[c->i++];
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                            : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
                }
                if (v > 0x7f) fail("json: \\u escape beyond ASCII is not supported here");
                ch = (char)v;
                break;
            }
            default: fail("json: bad escape \\%c", e);
            }
        }
        out[len++] = ch;
    }
    if (c->i >= c->n) fail("json: unterminated string starting at byte %zu", start);
    c->i++;
    out[len] = 0;
    return out;
}

static jval *number(cursor *c) {
    size_t start = c->i;
    int is_int = 1;
    if (c->s[c->i] == '-') c->i++;
    while (c->i < c->n && strchr("0123456789.eE+-", c->s[c->i])) {
        if (strchr(".eE", c->s[c->i])) is_int = 0;
        c->i++;
    }
    char tmp[64];
    size_t len = c->i - start;
    if (len == 0 || len >= sizeof tmp) fail("json: bad number at byte %zu", start);
    memcpy(tmp, c->s + start, len);
    tmp[len] = 0;
    jval *v = xalloc(sizeof *v);
    v->t = J_NUM;
    v->is_int = is_int;
    if (is_int) v->i = strtoll(tmp, NULL, 10);
    v->num = strtod(tmp, NULL);
    return v;
}

static jval *value(cursor *c, int depth) {
    if (depth > 64) fail("json: nested too deeply");
    ws(c);
    if (c->i >= c->n) fail("json: unexpected end of header");
    char ch = c->s[c->i];
    jval *v;
    if (ch == '{' || ch == '[') {
        int obj = ch == '{';
        c->i++;
        v = xalloc(sizeof *v);
        v->t = obj ? J_OBJ : J_ARR;
        size_t cap = 8;
        v->items = xalloc(cap * sizeof *v->items);
        if (obj) v->keys = xalloc(cap * sizeof *v->keys);
        ws(c);
        if (c->i < c->n && c->s[c->i] == (obj ? '}' : ']')) { c->i++; return v; }
        for (;;) {
            if (v->n == cap) {   /* grow both arrays (old blocks stay in the request arena) */
                jval **items = xalloc(2 * cap * sizeof *items);
                memcpy(items, v->items, cap * sizeof *items);
                v->items = items;
                if (obj) {
                    char **keys = xalloc(2 * cap * sizeof *keys);
                    memcpy(keys, v->keys, cap * sizeof *keys);
                    v->keys = keys;
                }
                cap *= 2;
            }
            if (obj) {
                ws(c);
                v->keys[v->n] = string(c);
                ws(c);
                if (c->i >= c->n || c->s[c->i] != ':') fail("json: expected ':' at byte %zu", c->i);
                c->i++;
            }
            v->items[v->n++] = value(c, depth + 1);
            ws(c);
            if (c->i < c->n && c->s[c->i] == ',') { c->i++; continue; }
            if (c->i < c->n && c->s[c->i] == (obj ? '}' : ']')) { c->i++; return v; }
            fail("json: expected ',' or a closing bracket at byte %zu", c->i);
        }
    }
    if (ch == '"') {
        v = xalloc(sizeof *v);
        v->t = J_STR;
        v->s = string(c);
        return v;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) return number(c);
    static const struct { const char *word; jtype t; int b; } words[] = {
        {"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
    for (size_t k = 0; k < 3; k++) {
        size_t len = strlen(words[k].word);
        if (c->i + len <= c->n && memcmp(c->s + c->i, words[k].word, len) == 0) {
            c->i += len;
            v = xalloc(sizeof *v);
            v->t = words[k].t;
            v->b = words[k].b;
            return v;
        }
    }
    fail("json: unexpected character '%c' at byte %zu", ch, c->i);
}

jval *json_parse(const char *text, size_t len) {
    cursor c = {text, 0, len};
    jval *v = value(&c, 0);
    ws(&c);
    if (c.i != c.n) fail("json: trailing bytes after the header object");
    return v;
}

jval *jget(const jval *obj, const char *key) {
    if (!obj || obj->t != J_OBJ) return NULL;
    for (size_t k = 0; k < obj->n; k++)
        if (strcmp(obj->keys[k], key) == 0) return obj->items[k];
    return NULL;
}

jval *jreq(const jval *obj, const char *key) {
    jval *v = jget(obj, key);
    if (!v) fail("missing field '%s'", key);
    return v;
}

void sb_put(sbuf *b, const void *data, size_t n) {
    if (n == 0) return;                  /* memcpy from/to NULL is undefined even for 0 bytes */
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { fprintf(stderr, "esimpl: out of memory\n"); exit(3); }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

void sb_printf(sbuf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) { sb_put(b, small, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { fprintf(stderr, "esimpl: out of memory\n"); exit(3); }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}

void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') { sb_put(b, "\\", 1); sb_put(b, s, 1); }
        else if (ch < 0x20) sb_printf(b, "\\u%04x", ch);
        else sb_put(b, s, 1);
    }
    sb_put(b, "\"", 1);
}
