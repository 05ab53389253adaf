/* Test helper of tests/mpi/test_torch.sh: fedhet's own view of a trained model, to set beside PyTorch's.
 * usage: model_logits RUN.h5 PARTITION.h5 OUT.h5
 * Builds the model named by RUN.h5's /model attributes, loads its /server/global, and writes OUT.h5 with
 *   /test_x [n, C, H, W]   the partition's test rows, normalised as evaluation normalises them
 *   /test_logits [n, K]    the model's logits on them in evaluation mode (running statistics), in batches
 *                          of at most 64 rows like fedhet's evaluation
 *   /test_y [n]            their labels
 *   /train_x, /train_y     every training row, normalised (client after client), and its label */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/h5io.h"
#include "fedhet/nn.h"

#define EVAL_BATCH 64

static int read_model(const char *path, NnModel *m, const DataPartFile *data)
{
    FhH5File f;
    FH_CHECK(fh_h5_open(&f, path, FH_ERR_DATA));
    hid_t g = H5Gopen2(f.id, "/model", H5P_DEFAULT);
    if (g < 0) {
        fh_h5_close(&f);
        FH_FAIL(FH_ERR_DATA, "%s: no /model group", path);
    }
    char *arch = NULL, *norm = NULL;
    int64_t groups = 2;
    int status = fh_h5_attr_read_string(&f, g, "arch", &arch);
    if (status == FH_OK) status = fh_h5_attr_read_string(&f, g, "norm", &norm);
    if (status == FH_OK) status = fh_h5_attr_read_int64s(&f, g, "groups", &groups, 1);
    H5Gclose(g);
    const NnZooOptions zoo = { .norm = norm, .gn_groups = (int)groups }; /* no projection head (MOON proj_dim) */
    if (status == FH_OK)
        status = nn_zoo_build(m, arch, (NnShape){ data->c, data->h, data->w }, data->classes, EVAL_BATCH, &zoo);
    if (status == FH_OK) {
        hsize_t dims[1];
        hid_t d;
        status = fh_h5_open_checked(&f, "/server/global", H5T_FLOAT, 4, 1, dims, &d);
        if (status == FH_OK) {
            H5Dclose(d);
            if (dims[0] != (hsize_t)m->n_state)
                status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: /server/global has %llu values, model %s %lld",
                                        path, (unsigned long long)dims[0], arch, (long long)m->n_state);
        }
        if (status == FH_OK) status = fh_h5_read_all(&f, "/server/global", H5T_NATIVE_FLOAT, m->state);
    }
    free(arch);
    free(norm);
    fh_h5_close(&f);
    return status;
}

static int write_rows(const FhH5File *out, const char *name, const float *x, int64_t n, const DataPartFile *d)
{
    const hsize_t dims[4] = { (hsize_t)n, (hsize_t)d->c, (hsize_t)d->h, (hsize_t)d->w };
    return fh_h5_write(out, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 4, dims, NULL, x);
}

static int run(const char *run_path, const char *data_path, const char *out_path)
{
    DataPartFile d;
    FH_CHECK(data_partfile_open(&d, data_path));
    NnModel m;
    memset(&m, 0, sizeof m);
    int status = read_model(run_path, &m, &d);
    const size_t row = (size_t)d.c * d.h * d.w;
    const int64_t n_max = d.n_test > d.n_rows ? d.n_test : d.n_rows;
    float *x = NULL, *logits = NULL, *lut = NULL;
    int32_t *y = NULL;
    uint8_t *images = NULL;
    if (status == FH_OK) status = fh_calloc(&x, (size_t)n_max, row * sizeof(float), "rows");
    if (status == FH_OK) status = fh_calloc(&y, (size_t)n_max, sizeof(int32_t), "labels");
    if (status == FH_OK) status = fh_calloc(&images, (size_t)n_max, row, "images");
    if (status == FH_OK) status = fh_calloc(&logits, (size_t)d.n_test, (size_t)d.classes * sizeof(float), "logits");
    if (status == FH_OK) status = fh_calloc(&lut, (size_t)d.c * 256, sizeof(float), "normalisation table");
    FhH5File out = { .id = H5I_INVALID_HID };
    if (status == FH_OK) status = fh_h5_create(&out, out_path, FH_ERR_IO);
    if (status == FH_OK) {
        data_normal_lut(lut, &d);
        status = data_test_read(&d, lut, DATA_ROWS_TEST, 0, d.n_test, x, y, images);
        nn_model_set_training(&m, 0);
        for (int64_t off = 0; off < d.n_test && status == FH_OK; off += EVAL_BATCH) {
            const int n = (int)(d.n_test - off < EVAL_BATCH ? d.n_test - off : EVAL_BATCH);
            status = nn_model_forward(&m, x + (size_t)off * row, n);
            if (status == FH_OK)
                memcpy(logits + (size_t)off * d.classes, nn_model_logits(&m), (size_t)n * d.classes * sizeof(float));
        }
        if (status == FH_OK) status = write_rows(&out, "/test_x", x, d.n_test, &d);
        const hsize_t ldims[2] = { (hsize_t)d.n_test, (hsize_t)d.classes };
        if (status == FH_OK)
            status = fh_h5_write(&out, "/test_logits", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 2, ldims, NULL, logits);
        if (status == FH_OK) status = fh_h5_write(&out, "/test_y", H5T_NATIVE_INT32, H5T_STD_I32LE, 1, ldims, NULL, y);
    }
    if (status == FH_OK) status = data_partfile_read_rows(&d, DATA_ROWS_CLIENTS, 0, d.n_rows, images, y);
    if (status == FH_OK) {
        for (int64_t i = 0; i < d.n_rows; i++)
            for (size_t j = 0; j < row; j++)
                x[(size_t)i * row + j] = lut[(j / ((size_t)d.h * d.w)) * 256 + images[(size_t)i * row + j]];
        status = write_rows(&out, "/train_x", x, d.n_rows, &d);
        const hsize_t ydims[1] = { (hsize_t)d.n_rows };
        if (status == FH_OK) status = fh_h5_write(&out, "/train_y", H5T_NATIVE_INT32, H5T_STD_I32LE, 1, ydims, NULL, y);
    }
    if (out.id >= 0) {
        if (status == FH_OK) status = fh_h5_commit(&out);
        else fh_h5_discard(&out);
    }
    free(x);
    free(y);
    free(images);
    free(logits);
    free(lut);
    nn_model_free(&m);
    data_partfile_close(&d);
    return status;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: model_logits RUN.h5 PARTITION.h5 OUT.h5\n");
        return 1;
    }
    int status = run(argv[1], argv[2], argv[3]);
    if (status != FH_OK) fprintf(stderr, "model_logits: error: %s\n", fh_error_message());
    return status;
}
