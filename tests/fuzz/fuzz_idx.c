/* libFuzzer target: IDX files, raw or gzip (data_idx_read_images, data_idx_read_labels). Property: what
 * loads is consistent (n rows of h x w, labels of one byte). */
#include "fuzz.h"

#include "fedhet/data.h"

/* where the image bytes are summed, so that reading them cannot be optimised away */
static volatile unsigned fuzz_sink;

int LLVMFuzzerInitialize(int *argc, char ***argv) { return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_path(path, sizeof path, "set-idx-ubyte");
    fuzz_write(path, data, size);
    uint8_t *images = NULL;
    int64_t n = 0;
    int h = 0, w = 0;
    if (data_idx_read_images(path, &images, &n, &h, &w) == FH_OK) {
        FUZZ_ASSERT(n >= 0 && h > 0 && w > 0, "n %lld, %d x %d", (long long)n, h, w);
        for (int64_t i = 0; i < n * h * w; i++) fuzz_sink += images[i]; /* every byte claimed is readable */
        free(images);
    }
    fh_error_clear();
    int32_t *labels = NULL;
    if (data_idx_read_labels(path, &labels, &n) == FH_OK) {
        for (int64_t i = 0; i < n; i++) FUZZ_ASSERT(labels[i] >= 0 && labels[i] < 256, "label %d", labels[i]);
        free(labels);
    }
    fh_error_clear();
    return 0;
}
