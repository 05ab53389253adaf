/* libFuzzer target: CIFAR-10/100 binary batches (data_cifar_read). The input's first byte picks the format
 * (even: CIFAR-10, odd: CIFAR-100), the next ones where the rest is cut into the format's batch files.
 * Property: what loads has labels in range and [n, 3, 32, 32] images. */
#include "fuzz.h"

#include "fedhet/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8) return 0;
    const int classes = data[0] & 1 ? 100 : 10;
    static const char *const c10[] = { "data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                       "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin" };
    static const char *const c100[] = { "train.bin", "test.bin" };
    const char *const *files = classes == 10 ? c10 : c100;
    const int n_files = classes == 10 ? 6 : 2;
    /* file i gets data[cut[i], cut[i+1]): byte i (1..n_files-1) gives the length of file i-1 in 16ths of a
     * record (16: one whole record), so that whole and broken records are both easy to reach */
    const uint8_t *body = data + n_files;
    const size_t body_size = size - (size_t)n_files;
    const size_t record = classes == 10 ? 3073 : 3074;
    size_t cut[7];
    cut[0] = 0;
    for (int i = 1; i < n_files; i++) {
        size_t c = cut[i - 1] + data[i] * record / 16;
        cut[i] = c > body_size ? body_size : c;
    }
    cut[n_files] = body_size;
    char dir[512], path[1024];
    fuzz_path(dir, sizeof dir, classes == 10 ? "cifar10" : "cifar100");
    mkdir(dir, 0700);
    for (int i = 0; i < n_files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        fuzz_write(path, body + cut[i], cut[i + 1] - cut[i]);
    }
    DataImageSet train = { 0 }, test = { 0 };
    if (data_cifar_read(&train, &test, dir, classes) == FH_OK) {
        const DataImageSet *sets[2] = { &train, &test };
        for (int s = 0; s < 2; s++) {
            FUZZ_ASSERT(sets[s]->c == 3 && sets[s]->h == 32 && sets[s]->w == 32, "shape %dx%dx%d", sets[s]->c,
                        sets[s]->h, sets[s]->w);
            for (int64_t i = 0; i < sets[s]->n; i++)
                FUZZ_ASSERT(sets[s]->labels[i] >= 0 && sets[s]->labels[i] < classes, "label %d", sets[s]->labels[i]);
        }
    }
    data_imageset_free(&train);
    data_imageset_free(&test);
    fh_error_clear();
    return 0;
}
