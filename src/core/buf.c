/* Growable arrays and text (fedhet/buf.h). */
#include "fedhet/buf.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fh_grow(void *items_ptr, int *cap, int need, size_t size, const char *what)
{
    if (need <= *cap) return FH_OK;
    int grown_cap = *cap ? *cap : 16;
    while (grown_cap < need) grown_cap = grown_cap > INT_MAX / 2 ? need : 2 * grown_cap;
    void **items = (void **)items_ptr;
    if ((size_t)grown_cap > SIZE_MAX / size)
        FH_FAIL(FH_ERR_MEMORY, "out of memory: %d elements of %zu bytes for %s overflow", grown_cap, size, what);
    char *p = realloc(*items, (size_t)grown_cap * size);
    if (!p) FH_FAIL(FH_ERR_MEMORY, "out of memory growing %s to %d elements", what, grown_cap);
    memset(p + (size_t)*cap * size, 0, (size_t)(grown_cap - *cap) * size);
    *items = p;
    *cap = grown_cap;
    return FH_OK;
}

/* room for n more bytes and the NUL */
static int text_reserve(FhText *t, size_t n)
{
    if (t->len + n + 1 <= t->cap) return FH_OK;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + n + 1) cap *= 2;
    char *s = realloc(t->s, cap);
    if (!s) FH_FAIL(FH_ERR_MEMORY, "out of memory building text (%zu bytes)", cap);
    t->s = s;
    t->cap = cap;
    return FH_OK;
}

int fh_text_add(FhText *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) FH_FAIL(FH_ERR_IO, "formatting text with '%s' failed", fmt);
    FH_CHECK(text_reserve(t, (size_t)n));
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
    return FH_OK;
}

int fh_text_append(FhText *t, const char *s, size_t n)
{
    FH_CHECK(text_reserve(t, n));
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
    return FH_OK;
}
