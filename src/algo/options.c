/* Named method options (include/fedhet/algo.h "named options"): a row's parts laid out in one block, and the
 * lookups by part and by key over them. */
#include "fedhet/algo.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"

/* parts start at multiples of this, so that every field of a part's struct is aligned */
#define PART_ALIGN _Alignof(max_align_t)

static size_t align_up(size_t n) { return (n + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN; }

static int part_count(const AlgoMethod *m)
{
    int n = 0;
    while (n < ALGO_MAX_PARTS && m->parts[n]) n++;
    return n;
}

/* offset of the row's part `index` in its block */
static size_t part_offset(const AlgoMethod *m, int index)
{
    size_t at = 0;
    for (int p = 0; p < index; p++) at = align_up(at + m->parts[p]->size);
    return at;
}

size_t algo_options_size(const AlgoMethod *m)
{
    const int n = part_count(m);
    return n ? part_offset(m, n - 1) + m->parts[n - 1]->size : 0;
}

const void *algo_options_find(AlgoOptions o, const AlgoOptionPart *part)
{
    const int n = part_count(o.row);
    for (int p = 0; p < n; p++)
        if (o.row->parts[p] == part) return o.block->bytes + part_offset(o.row, p);
    return NULL;
}

const void *algo_options(AlgoOptions o, const AlgoOptionPart *part)
{
    const void *found = algo_options_find(o, part);
    if (!found) {
        fprintf(stderr, "fedhet: method %s has no option part %s (its row must list the parts its hooks read)\n",
                o.row->name, part->name);
        abort();
    }
    return found;
}

int algo_option_count(const AlgoMethod *m)
{
    int n = 0;
    for (int p = 0; p < part_count(m); p++) n += m->parts[p]->n;
    return n;
}

/* key i of m, with its part's index */
static const AlgoOption *option_at(const AlgoMethod *m, int i, int *part)
{
    for (int p = 0; i >= 0 && p < part_count(m); p++) {
        if (i < m->parts[p]->n) {
            *part = p;
            return &m->parts[p]->keys[i];
        }
        i -= m->parts[p]->n;
    }
    return NULL;
}

const AlgoOption *algo_option_at(const AlgoMethod *m, int i)
{
    int part = 0;
    return option_at(m, i, &part);
}

/* key `key` of m and its part's index */
static const AlgoOption *option_named(const AlgoMethod *m, const char *key, int *part)
{
    for (int i = 0; i < algo_option_count(m); i++) {
        const AlgoOption *o = option_at(m, i, part);
        if (!strcmp(o->key, key)) return o;
    }
    return NULL;
}

const AlgoOption *algo_option_find(const AlgoMethod *m, const char *key)
{
    int part = 0;
    return option_named(m, key, &part);
}

static const AlgoOptionTune *tune_of(const AlgoMethod *m, const AlgoOption *o)
{
    for (int t = 0; t < ALGO_MAX_TUNES && m->tunes[t].key; t++)
        if (!strcmp(m->tunes[t].key, o->key)) return &m->tunes[t];
    return NULL;
}

double algo_option_default(const AlgoMethod *m, const AlgoOption *o)
{
    const AlgoOptionTune *t = tune_of(m, o);
    if (o->type == FH_CFG_CHOICE) return algo_option_choice_index(o, o->def.s);
    if (t && !isnan(t->default_value)) return t->default_value;
    return o->type == FH_CFG_INT ? (double)o->def.i : o->type == FH_CFG_BOOL ? (double)o->def.b : o->def.f;
}

const char *algo_option_help(const AlgoMethod *m, const AlgoOption *o)
{
    const AlgoOptionTune *t = tune_of(m, o);
    return t && t->help ? t->help : o->help;
}

FhConfigKey algo_option_config_key(const AlgoMethod *m, const AlgoOption *o)
{
    FhConfigKey k = *o;
    k.help = algo_option_help(m, o);
    const double def = algo_option_default(m, o);
    if (o->type == FH_CFG_FLOAT) k.def.f = def;
    else if (o->type == FH_CFG_INT) k.def.i = (int64_t)def;
    else if (o->type == FH_CFG_BOOL) k.def.b = def != 0.0;
    k.land = FH_LAND_NONE;
    k.at = 0;
    return k;
}

const char *algo_option_choice(const AlgoOption *o, int index, int *len)
{
    const char *c = o->choices;
    for (int i = 0; c && i < index; i++) {
        c = strchr(c, '|');
        if (c) c++;
    }
    if (!c || index < 0) return NULL;
    *len = strchr(c, '|') ? (int)(strchr(c, '|') - c) : (int)strlen(c);
    return c;
}

int algo_option_choice_index(const AlgoOption *o, const char *text) { return fh_config_choice_index(o->choices, text); }

/* where key o of part p of m lies in a block */
static size_t field_offset(const AlgoMethod *m, int p, const AlgoOption *o) { return part_offset(m, p) + o->at; }

/* whether the key's field is an int (a count, a switch, a choice's index) rather than a double */
static int int_field(const AlgoOption *o) { return o->land == FH_LAND_INT || o->land == FH_LAND_INDEX; }

static void store(AlgoOptionBlock *b, const AlgoMethod *m, int p, const AlgoOption *o, double value)
{
    void *f = b->bytes + field_offset(m, p, o);
    if (int_field(o)) *(int *)f = (int)value;
    else *(double *)f = value;
}

void algo_options_reset(AlgoOptionBlock *b, const AlgoMethod *m)
{
    if (algo_options_size(m) > sizeof b->bytes) {
        fprintf(stderr, "fedhet: method %s's options take %zu bytes, more than ALGO_OPTIONS_BYTES = %d\n", m->name,
                algo_options_size(m), ALGO_OPTIONS_BYTES);
        abort();
    }
    memset(b, 0, sizeof *b);
    int p = 0;
    for (int i = 0; i < algo_option_count(m); i++) {
        const AlgoOption *o = option_at(m, i, &p);
        store(b, m, p, o, algo_option_default(m, o));
    }
}

int algo_option_set(AlgoOptionBlock *b, const AlgoMethod *m, const char *key, double value)
{
    int p = 0;
    const AlgoOption *o = option_named(m, key, &p);
    if (!o) FH_FAIL(FH_ERR_USAGE, "method %s has no key %s", m->name, key);
    if (o->type == FH_CFG_BOOL && value != 0.0 && value != 1.0)
        FH_FAIL(FH_ERR_USAGE, "method %s: [algo] %s = %g is not 0 (false) or 1 (true)", m->name, key, value);
    if (int_field(o) && !(value == floor(value) && value >= INT_MIN && value <= INT_MAX))
        FH_FAIL(FH_ERR_USAGE, "method %s: [algo] %s = %g is not an integer", m->name, key, value);
    store(b, m, p, o, value);
    return FH_OK;
}

double algo_option_value(AlgoOptions view, const AlgoOption *o)
{
    for (int p = 0; p < part_count(view.row); p++) {
        const AlgoOptionPart *part = view.row->parts[p];
        for (int k = 0; k < part->n; k++) {
            if (&part->keys[k] != o) continue;
            const void *f = view.block->bytes + field_offset(view.row, p, o);
            return int_field(o) ? (double)*(const int *)f : *(const double *)f;
        }
    }
    fprintf(stderr, "fedhet: key %s is not an option of method %s\n", o->key, view.row->name);
    abort();
}
