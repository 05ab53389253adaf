/* A method's named options in tests: its keys at their defaults in a block, then keys changed by name (a choice
 * by its index). Include after test.h. */
#ifndef FEDHET_TEST_OPTIONS_H
#define FEDHET_TEST_OPTIONS_H

#include <stddef.h>

#include "fedhet/algo.h"

/* m's keys at their defaults in b; the view of them (it follows later option_set calls on b) */
static inline AlgoOptions options_default(AlgoOptionBlock *b, const AlgoMethod *m)
{
    algo_options_reset(b, m);
    return algo_options_view(m, b);
}

static inline void option_set(AlgoOptionBlock *b, const AlgoMethod *m, const char *key, double value)
{
    CHECK_OK(algo_option_set(b, m, key, value));
}

/* key `key` of view o (a number, or a choice's index) */
static inline double option_value(AlgoOptions o, const char *key)
{
    const AlgoOption *k = algo_option_find(o.row, key);
    CHECK_MSG(k != NULL, "method %s has no key %s", o.row->name, key);
    return k ? algo_option_value(o, k) : NAN;
}

/* m's keys in b: the defaults, then the pairs given, e.g. OPTIONS(&b, m, { "q", 0 }, { "variant", 1 }) */
typedef struct {
    const char *key;
    double value;
} OptionValue;
#define OPTIONS(b, m, ...) options_with(b, m, (const OptionValue[]){ __VA_ARGS__, { NULL, 0 } })

static inline AlgoOptions options_with(AlgoOptionBlock *b, const AlgoMethod *m, const OptionValue *values)
{
    const AlgoOptions o = options_default(b, m);
    for (; values->key; values++) option_set(b, m, values->key, values->value);
    return o;
}

/* Scratch for hooks called by hand (AlgoScratch): a view of `bytes` of one static block (hooks run one at a time);
 * more than the block holds fails the test. */
enum { TEST_SCRATCH_BYTES = 1 << 20 };
static inline AlgoScratch test_scratch(size_t bytes)
{
    static max_align_t block[TEST_SCRATCH_BYTES / sizeof(max_align_t)];
    CHECK_MSG(bytes <= TEST_SCRATCH_BYTES, "%zu bytes of scratch: more than the tests' %d", bytes, TEST_SCRATCH_BYTES);
    return (AlgoScratch){ block, bytes <= TEST_SCRATCH_BYTES ? bytes : TEST_SCRATCH_BYTES };
}

#endif
