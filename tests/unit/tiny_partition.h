/* A tiny partition file for tests that train: n images of 1 x 6 x 6 in 3 classes (class k brightens rows
 * 2k, 2k+1), iid over `clients` clients, no test set. Include after test.h and test_tmp.h. */
#ifndef FEDHET_TEST_TINY_PARTITION_H
#define FEDHET_TEST_TINY_PARTITION_H

#include <stdlib.h>

#include "fedhet/data.h"
#include "fedhet/rng.h"

/* writes tmp_path(name) and records it for tmp_cleanup; returns the path */
static inline const char *tiny_partition(const char *name, int clients, int64_t n)
{
    DataImageSet train = { n, 1, 6, 6, 3, malloc((size_t)n * 36), malloc((size_t)n * sizeof(int32_t)), NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL };
    DataImageSet test = { 0 };
    FhRng rng;
    fh_rng_init(&rng, 3, FH_RNG_TEST, 0, 0, 0);
    for (int64_t i = 0; i < n; i++) {
        train.labels[i] = (int32_t)(i % 3);
        for (int j = 0; j < 36; j++)
            train.images[i * 36 + j] = (uint8_t)(fh_rng_below(&rng, 100) + (j / 12 == train.labels[i] ? 150 : 0));
    }
    DataPartFileSpec spec;
    memset(&spec, 0, sizeof spec);
    spec.partition = (DataPartitionSpec){ "iid", NULL, clients, 1.0, 1, 1, 0, 100, 5, NULL, 0, NULL, 0 };
    spec.deflate = 1;
    DataPartition part;
    const char *path = tmp_path(name);
    tmp_record(path);
    CHECK_OK(data_partition(&part, train.labels, n, 3, &spec.partition));
    CHECK_OK(data_partfile_write(path, &train, &test, &part, &spec));
    data_partition_free(&part);
    data_imageset_free(&train);
    return path;
}

#endif
