/* Writes the seed corpora of the fuzz targets into OUT/<target>/: small valid inputs made by the
 * project's own writers (partition files, checkpoints) or by the formats' definitions (IDX, CIFAR,
 * an HDF5 image set, a grid file). The run configs of inputs/ are added by tests/fuzz/fuzz.sh.
 * Usage: fuzz_seeds OUT */
#include <errno.h>
#include <zlib.h>

#include "fake_run.h"
#include "fedhet/data.h"
#include "fedhet/h5io.h"
#include "fedhet/nn.h"
#include "fedhet/onnx.h"
#include "fuzz.h"

static char out_dir[512];

static void seed_path(char *out, size_t size, const char *target, const char *name)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", out_dir, target);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        perror(dir);
        exit(1);
    }
    snprintf(out, size, "%s/%s", dir, name);
}

static void seed_write(const char *target, const char *name, const void *data, size_t size)
{
    char path[1100];
    seed_path(path, sizeof path, target, name);
    fuzz_write(path, data, size);
}

static void must(int status, const char *what)
{
    if (status != FH_OK) {
        fprintf(stderr, "fuzz_seeds: %s: %s\n", what, fh_error_message());
        exit(1);
    }
}

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static void idx_seeds(void)
{
    enum { N = 3, H = 4, W = 5 };
    uint8_t images[16 + N * H * W], labels[8 + N];
    be32(images, 0x803), be32(images + 4, N), be32(images + 8, H), be32(images + 12, W);
    for (int i = 0; i < N * H * W; i++) images[16 + i] = (uint8_t)(i * 37);
    be32(labels, 0x801), be32(labels + 4, N);
    for (int i = 0; i < N; i++) labels[8 + i] = (uint8_t)i;
    seed_write("idx", "images-raw", images, sizeof images);
    seed_write("idx", "labels-raw", labels, sizeof labels);
    const struct { const char *name; const uint8_t *data; size_t size; } gz[2] = {
        { "images-gz", images, sizeof images }, { "labels-gz", labels, sizeof labels } };
    for (int i = 0; i < 2; i++) {
        char path[1100];
        seed_path(path, sizeof path, "idx", gz[i].name);
        gzFile f = gzopen(path, "wb9");
        if (!f || gzwrite(f, gz[i].data, (unsigned)gz[i].size) != (int)gz[i].size || gzclose(f) != Z_OK) {
            fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
            exit(1);
        }
    }
}

/* the layout of fuzz_cifar.c: format byte, one length byte per file but the last (16 = one record), body */
static void cifar_seed(int classes)
{
    const int n_files = classes == 10 ? 6 : 2;
    const size_t record = classes == 10 ? 3073 : 3074;
    const size_t size = (size_t)n_files + (size_t)n_files * record;
    uint8_t *d = calloc(size, 1);
    if (!d) abort();
    d[0] = classes == 10 ? 0 : 1;
    for (int i = 1; i < n_files; i++) d[i] = 16;
    for (int f = 0; f < n_files; f++) {
        uint8_t *r = d + n_files + (size_t)f * record;
        r[0] = (uint8_t)(f % 10);                   /* CIFAR-10 label / CIFAR-100 coarse label */
        if (classes == 100) r[1] = (uint8_t)(42 + f); /* fine label */
        for (size_t i = classes == 10 ? 1 : 2; i < record; i++) r[i] = (uint8_t)(i * 7 + f);
    }
    seed_write("cifar", classes == 10 ? "cifar10" : "cifar100", d, size);
    free(d);
}

static void image_set(DataImageSet *s, int64_t n, int c, int h, int w, int classes, int shift)
{
    memset(s, 0, sizeof *s);
    s->n = n, s->c = c, s->h = h, s->w = w, s->classes = classes;
    s->images = calloc((size_t)(n * c * h * w), 1);
    s->labels = calloc((size_t)n, sizeof *s->labels);
    if (!s->images || !s->labels) abort();
    for (int64_t i = 0; i < n * c * h * w; i++) s->images[i] = (uint8_t)(i * 13 + shift);
    for (int64_t i = 0; i < n; i++) s->labels[i] = (int32_t)((i + shift) % classes);
}

/* partition files by the writer `fedhet partition` uses: clean, and with a corrupted client and test copy */
static void partfile_seed(const char *name, int c, DataCorruption corruption)
{
    DataImageSet train, test;
    image_set(&train, 12, c, 4, 4, 3, 0);
    image_set(&test, 4, c, 4, 4, 3, 1);
    DataPartFileSpec spec = { .source = "fuzz", .source_format = "idx",
                              .partition = { .scheme = "iid", .n_clients = 3, .min_size = 1, .max_attempts = 10 },
                              .corruption = corruption, .severity = 3, .n_corrupted = corruption ? 1 : 0,
                              .deflate = 1, .parameters = "scheme=iid clients=3" };
    DataPartition part;
    must(data_partition(&part, train.labels, train.n, train.classes, &spec.partition), "partition");
    char path[1100];
    seed_path(path, sizeof path, "partfile", name);
    must(data_partfile_write(path, &train, &test, &part, &spec), path);
    data_partition_free(&part);
    data_imageset_free(&train);
    data_imageset_free(&test);
}

/* a user's HDF5 image set (data_hdf5_read): /train and /test, uint8 images [N,C,H,W] and int32 labels */
static void hdf5_source_seed(void)
{
    char path[1100];
    seed_path(path, sizeof path, "partfile", "source.h5");
    DataImageSet s;
    image_set(&s, 6, 1, 3, 3, 2, 0);
    FhH5File f;
    must(fh_h5_create(&f, path, FH_ERR_IO), path);
    const hsize_t dims[4] = { 6, 1, 3, 3 }, ldims[1] = { 6 };
    const FhH5Layout contiguous = { 0 };
    hid_t g;
    must(fh_h5_group(&f, "/train", &g), "group");
    H5Gclose(g);
    must(fh_h5_group(&f, "/test", &g), "group");
    H5Gclose(g);
    for (int i = 0; i < 2; i++) {
        const char *images = i ? "/test/images" : "/train/images", *labels = i ? "/test/labels" : "/train/labels";
        must(fh_h5_write(&f, images, H5T_NATIVE_UINT8, H5T_STD_U8LE, 4, dims, &contiguous, s.images), images);
        must(fh_h5_write(&f, labels, H5T_NATIVE_INT32, H5T_STD_I32LE, 1, ldims, &contiguous, s.labels), labels);
    }
    must(fh_h5_commit(&f), path);
    data_imageset_free(&s);
}

static void checkpoint_seed(const char *name, int rounds_done)
{
    FlRun *run = calloc(1, sizeof *run);
    if (!run) abort();
    fake_run_init(run, fuzz_tmp_dir()); /* the store outside the corpus */
    fake_run_set_rounds(run, rounds_done);
    char path[1100];
    seed_path(path, sizeof path, "checkpoint", name);
    must(fl_checkpoint_save(run, rounds_done, path), path);
    fake_run_free(run);
    free(run);
}

static void grid_seed(void)
{
    static const char grid[] = "[data]\npath = fuzz.h5\n[algo]\nmethod = fedsam\n[grid]\nalgo.rho = 0.01, 0.05\n"
                               "seed = 0..2\ntrain.lr = 0.1, \"0.05\"\nfl.rounds = 2, 3\nzip = train.lr, fl.rounds\n"
                               "ranks_per_member = 1\n";
    seed_write("grid", "zip.ini", grid, sizeof grid - 1);
}

/* small zoo models exported by fedhet's own writer (convs, batch norm, pools, residual adds, linear layers) */
static void onnx_seed(const char *model, NnShape input, const char *name)
{
    NnModel m;
    memset(&m, 0, sizeof m);
    must(nn_zoo_build(&m, model, input, 3, 2, NULL), model);
    nn_model_init_params(&m, 1);
    char path[1100];
    seed_path(path, sizeof path, "onnx", name);
    must(onnx_export(&m, m.state, path), "onnx_export");
    nn_model_free(&m);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds OUT\n");
        return 1;
    }
    snprintf(out_dir, sizeof out_dir, "%s", argv[1]);
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        perror(out_dir);
        return 1;
    }
    MPI_Init(&argc, &argv);
    idx_seeds();
    cifar_seed(10);
    cifar_seed(100);
    partfile_seed("clean.h5", 1, DATA_CORRUPT_NONE);
    partfile_seed("corrupted.h5", 3, DATA_CORRUPT_GAUSSIAN_NOISE);
    hdf5_source_seed();
    checkpoint_seed("round0.h5", 0);
    checkpoint_seed("round2.h5", 2);
    grid_seed();
    onnx_seed("mlp", (NnShape){ 1, 4, 4 }, "mlp.onnx");
    onnx_seed("smallcnn", (NnShape){ 3, 8, 8 }, "smallcnn.onnx");
    onnx_seed("resnet8", (NnShape){ 3, 8, 8 }, "resnet8.onnx");
    MPI_Finalize();
    return 0;
}
