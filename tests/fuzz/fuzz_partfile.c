/* libFuzzer target: HDF5 inputs. Partition files (data_partfile_open, then every client's rows through the
 * batch loader for one epoch and the test groups through data_test_read, as `fedhet run` reads them) and
 * users' own HDF5 image sets (data_hdf5_read, the `fedhet partition` source), on the same bytes.
 * Properties: an opened file's offsets run from 0 to n_rows without going down, and every label that
 * comes out is below the file's class count. */
#include "fuzz.h"

#include <hdf5.h>

#include "fedhet/data.h"

/* inputs that claim more than this many image bytes are only opened, not read: the harness must not
 * run out of memory on a small file whose compressed datasets claim gigabytes */
#define FUZZ_MAX_READ_BYTES (64ll << 20)

/* HDF5 1.10 itself leaks on some damaged files (inside H5Dopen2 and the like): not ours to fix. Our own
 * leaks of HDF5 objects are caught by the open-object count below, which does not depend on LSan. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }

int LLVMFuzzerInitialize(int *argc, char ***argv) { return 0; }

static void read_partfile(DataPartFile *f)
{
    FUZZ_ASSERT(f->offsets[0] == 0 && f->offsets[f->n_clients] == f->n_rows, "offsets 0..%lld for %lld rows",
                (long long)f->offsets[f->n_clients], (long long)f->n_rows);
    for (int k = 0; k < f->n_clients; k++)
        FUZZ_ASSERT(f->offsets[k] <= f->offsets[k + 1], "offsets go down at client %d", k);
    const int64_t image = (int64_t)f->c * f->h * f->w;
    if (image <= 0 || (f->n_rows + f->n_test) > FUZZ_MAX_READ_BYTES / image || f->n_clients > 4096) return;

    int *clients = malloc(sizeof *clients * (size_t)(f->n_clients ? f->n_clients : 1));
    if (!clients) abort();
    for (int k = 0; k < f->n_clients; k++) clients[k] = k;
    DataLoader L;
    if (data_loader_init(&L, f, clients, f->n_clients, -1) == FH_OK) {
        enum { BATCH = 16 };
        float *x = malloc(sizeof *x * (size_t)(BATCH * image));
        uint8_t *scratch = malloc((size_t)(BATCH * image));
        int32_t y[BATCH];
        if (!x || !scratch) abort();
        for (int k = 0; k < f->n_clients; k++) {
            DataBatchIter it;
            if (data_loader_begin(&L, &it, k, 1, 0) != FH_OK) break;
            const int64_t n = data_loader_client_rows(&L, k);
            for (int64_t rows = 0; rows < n;) { /* one epoch (the loader itself goes on into the next) */
                const int64_t got = data_loader_next(&L, &it, BATCH, x, y);
                FUZZ_ASSERT(got > 0 && got <= n - rows, "client %d: %lld rows after %lld of %lld", k, (long long)got,
                            (long long)rows, (long long)n);
                for (int64_t i = 0; i < got; i++)
                    FUZZ_ASSERT(y[i] >= 0 && y[i] < f->classes, "client %d: label %d of %d classes", k, y[i],
                                f->classes);
                rows += got;
            }
        }
        float *lut = malloc(sizeof *lut * 256 * (size_t)f->c);
        if (!lut) abort();
        data_normal_lut(lut, f);
        const DataRowGroup groups[2] = { DATA_ROWS_TEST, DATA_ROWS_TEST_CORRUPTED };
        for (int g = 0; g < 2 && f->n_test > 0; g++) {
            if (groups[g] == DATA_ROWS_TEST_CORRUPTED && !f->has_test_corrupted) continue;
            for (int64_t first = 0; first < f->n_test; first += BATCH) {
                int64_t count = f->n_test - first < BATCH ? f->n_test - first : BATCH;
                if (data_test_read(f, lut, groups[g], first, count, x, y, scratch) != FH_OK) break;
                for (int64_t i = 0; i < count; i++)
                    FUZZ_ASSERT(y[i] >= 0 && y[i] < f->classes, "test label %d of %d classes", y[i], f->classes);
            }
            fh_error_clear();
        }
        free(lut);
        free(scratch);
        free(x);
        data_loader_free(&L);
    }
    free(clients);
    fh_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_path(path, sizeof path, "input.h5");
    fuzz_write(path, data, size);
    DataPartFile f;
    if (data_partfile_open(&f, path) == FH_OK) {
        read_partfile(&f);
        data_partfile_close(&f);
    }
    fh_error_clear();
    DataImageSet train = { 0 }, test = { 0 };
    if (data_hdf5_read(&train, &test, path) == FH_OK) {
        for (int64_t i = 0; i < train.n; i++)
            FUZZ_ASSERT(train.labels[i] >= 0 && train.labels[i] < train.classes, "label %d of %d classes",
                        train.labels[i], train.classes);
    }
    data_imageset_free(&train);
    data_imageset_free(&test);
    fh_error_clear();
    FUZZ_ASSERT(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0, "%ld HDF5 objects left open",
                (long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL));
    return 0;
}
