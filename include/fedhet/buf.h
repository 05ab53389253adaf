/* Growable arrays and text. Both double their capacity, so that n appends cost O(n) time, and fail with
 * FH_ERR_MEMORY naming what they hold (the error idiom of fedhet/core.h), leaving what was there in place. */
#ifndef FEDHET_BUF_H
#define FEDHET_BUF_H

#include <stddef.h>

#include "fedhet/core.h"

/* *items_ptr (an array of *cap elements of `size` bytes, NULL when *cap is 0) grown to hold at least `need`; the
 * new elements are zeroed. */
int fh_grow(void *items_ptr, int *cap, int need, size_t size, const char *what);

/* Text built by appending: s is NUL-terminated once anything was added (NULL before), len its length; free(s). */
typedef struct {
    char *s;
    size_t len, cap;
} FhText;

int fh_text_add(FhText *t, const char *fmt, ...) FH_PRINTF(2, 3); /* printf-style */
int fh_text_append(FhText *t, const char *s, size_t n);           /* n bytes of s */

#endif
