/* Private to src/data (hetero.c and the partition file reader in partfile.c); not part of the fedhet API. */
#ifndef FEDHET_DATA_HETERO_INTERNAL_H
#define FEDHET_DATA_HETERO_INTERNAL_H

#include "fedhet/data.h"

/* Zeroed per-client arrays for K clients; FH_ERR_MEMORY when out of memory (h is then empty). */
int data_hetero_alloc(DataHetero *h, int K, int classes);

#endif
