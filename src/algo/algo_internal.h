/* Internal to src/algo: the method families (one file each, one table of registry rows each) and helpers
 * shared by their parts. */
#ifndef FEDHET_ALGO_INTERNAL_H
#define FEDHET_ALGO_INTERNAL_H

#include "fedhet/algo.h"

/* Each family file defines its rows: const AlgoMethod algo_family_<name>[] and its row count. */
#define ALGO_FAMILY(name)                             \
    extern const AlgoMethod algo_family_##name[];     \
    extern const int algo_family_##name##_count;
ALGO_FAMILY(basic)    /* fedavg, uniform (spec A.1, A.2) */
ALGO_FAMILY(server)   /* fedavgm, fedprox, scaffold, feddyn, fednova, fedcm (A.3-A.8) */
ALGO_FAMILY(fair)     /* qfedavg, afl, fairfed, fedce, fedga, fedlw, fednolowe, feddisco (A.9-A.16) */
ALGO_FAMILY(repr)     /* moon, feddecorr, fedmr, fednp, fedgkd (A.17-A.21) */
#undef ALGO_FAMILY

/* The error for a configuration a method cannot honour (FH_ERR_USAGE naming the method). */
int algo_refuse(const AlgoMethod *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
