/* The hooks' per-run scratch (AlgoScratch): arrays taken in order from the start of a hook's view. */
#include "algo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *algo_scratch_take(AlgoScratch *s, size_t n, size_t size, const char *what)
{
    const size_t bytes = algo_scratch_bytes(n, size);
    if (bytes > s->bytes) {
        fprintf(stderr, "fedhet: %s needs %zu bytes of scratch, %zu are left (the method's sizes ask for too little)\n",
                what, bytes, s->bytes);
        abort();
    }
    void *p = s->base;
    if (bytes == 0) return p; /* nothing taken (base may be NULL) */
    memset(p, 0, bytes);
    s->base = (char *)s->base + bytes;
    s->bytes -= bytes;
    return p;
}
