/* Every named method: the rows of all families (docs/architecture.md; docs/adding-a-method.md). */
#include "algo_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"

typedef struct {
    const char *name; /* the family file's name: src/algo/<name>.c holds its rows (wmsam: fedwmsam.c) */
    const AlgoMethod *rows;
    const int *count;
} Family;

static const Family families[] = {
    { "basic", algo_family_basic, &algo_family_basic_count },
    { "server", algo_family_server, &algo_family_server_count },
    { "fair", algo_family_fair, &algo_family_fair_count },
    { "repr", algo_family_repr, &algo_family_repr_count },
    { "flood", algo_family_flood, &algo_family_flood_count },
    { "sam", algo_family_sam, &algo_family_sam_count },
    { "fedism", algo_family_fedism, &algo_family_fedism_count },
    { "wmsam", algo_family_wmsam, &algo_family_wmsam_count },
    { "fedscam", algo_family_fedscam, &algo_family_fedscam_count },
};
enum { N_FAMILIES = sizeof families / sizeof families[0] };

int algo_count(void)
{
    int n = 0;
    for (int f = 0; f < N_FAMILIES; f++) n += *families[f].count;
    return n;
}

const AlgoMethod *algo_at(int i)
{
    if (i < 0) return NULL;
    for (int f = 0; f < N_FAMILIES; f++) {
        if (i < *families[f].count) return &families[f].rows[i];
        i -= *families[f].count;
    }
    return NULL;
}

const char *algo_family_of(const AlgoMethod *m)
{
    for (int f = 0; f < N_FAMILIES; f++)
        if (m >= families[f].rows && m < families[f].rows + *families[f].count) return families[f].name;
    return "-";
}

const AlgoMethod *algo_find(const char *name)
{
    for (int i = 0; i < algo_count(); i++)
        if (!strcmp(algo_at(i)->name, name)) return algo_at(i);
    return NULL;
}

const char *algo_choices(void)
{
    static char text[2048];
    if (!text[0]) {
        size_t used = 0;
        for (int i = 0; i < algo_count() && used < sizeof text; i++)
            used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", i ? "|" : "", algo_at(i)->name);
    }
    return text;
}

const char *algo_plugin_choices(void)
{
    static char text[512];
    if (!text[0]) {
        size_t used = (size_t)snprintf(text, sizeof text, "none");
        for (int i = 0; i < algo_count() && used < sizeof text; i++)
            if (algo_at(i)->plugin) used += (size_t)snprintf(text + used, sizeof text - used, "|%s", algo_at(i)->name);
    }
    return text;
}

void algo_sizes(const AlgoMethod *m, const AlgoSetup *setup, AlgoSizes *z)
{
    *z = (AlgoSizes){ .client_vectors = m->n_client_vectors, .server_vectors = m->n_server_vectors,
                      .server_private = m->n_server_private, .server_scalars = m->n_server_scalars,
                      .upload_vectors = m->n_upload_vectors, .upload_scalars = m->n_upload_scalars,
                      .eval_private = -1, .shown_server_scalar = -1 };
    if (m->sizes) m->sizes(setup, z);
}

void algo_upload_named(AlgoSizes *z, int at, const char *name, int show)
{
    if (z->n_named == ALGO_MAX_NAMED || algo_upload_index(z, name) >= 0 || at < 0 || at >= z->upload_scalars) {
        fprintf(stderr, "fedhet: upload scalar %d named %s: a name given twice, more than %d names, or no such scalar "
                "(%d)\n", at, name, ALGO_MAX_NAMED, z->upload_scalars);
        abort();
    }
    z->named[z->n_named++] = (AlgoNamedScalar){ name, at, show };
}

int algo_upload_add(AlgoSizes *z, const char *name, int show)
{
    const int at = z->upload_scalars++;
    algo_upload_named(z, at, name, show);
    return at;
}

int algo_upload_index(const AlgoSizes *z, const char *name)
{
    for (int i = 0; i < z->n_named; i++)
        if (!strcmp(z->named[i].name, name)) return z->named[i].at;
    return -1;
}

int algo_refuse(const AlgoMethod *m, const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    FH_FAIL(FH_ERR_USAGE, "[algo] method = %s: %s", m->name, why);
}

int algo_refuse_nonfinite(const AlgoMethod *m, AlgoOptions o)
{
    for (int i = 0; i < algo_option_count(m); i++) {
        const AlgoOption *key = algo_option_at(m, i);
        const double v = algo_option_value(o, key);
        if (key->type == FH_CFG_FLOAT && !isfinite(v))
            return algo_refuse(m, "[algo] %s = %g must be a finite number", key->key, v);
    }
    return FH_OK;
}
