/* fedhet data: dataset readers (IDX for MNIST / Fashion-MNIST so far).
 * Readers check magic numbers, dimensions and sizes and fail with FH_ERR_DATA naming the file. */
#ifndef FEDHET_DATA_H
#define FEDHET_DATA_H

#include <stdint.h>

/* An in-memory image set: uint8 images [n, c, h, w] and int32 labels [n] in [0, classes). */
typedef struct {
    int64_t n;
    int c, h, w;
    int classes;
    uint8_t *images;
    int32_t *labels;
} DataImageSet;

/* IDX files, gzip-compressed or raw (detected from the content, not the name).
 * Images: magic 0x00000803, dims n x h x w, uint8. Labels: magic 0x00000801, dim n, uint8. */
int data_idx_read_images(const char *path, uint8_t **images, int64_t *n, int *h, int *w);
int data_idx_read_labels(const char *path, int32_t **labels, int64_t *n);

/* Reads `prefix`-images-idx3-ubyte[.gz] and `prefix`-labels-idx1-ubyte[.gz] from dir (prefix "train" or
 * "t10k"), checks that counts agree and labels are < classes. */
int data_idx_read_set(DataImageSet *set, const char *dir, const char *prefix, int classes);
void data_imageset_free(DataImageSet *set);

/* Default location of Debian's dataset-fashion-mnist */
#define DATA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Per-pixel normalisation to float: out = (x / 255 - mean) / std, for rows [first, first + count). */
void data_images_to_float(float *out, const DataImageSet *set, int64_t first, int64_t count, float mean, float std);

#endif
