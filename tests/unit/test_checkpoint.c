/* Unit tests for src/fl/checkpoint.c on a hand-made one-process run: a checkpoint reads back what was
 * saved; a table written before a column existed reads back by column name; one flipped bit in /metrics/rounds is refused (Fletcher32) without leaking what was read so far
 * (the heap does not grow over many refused loads); fl_final_model_current follows the files' ages; the state
 * read outside a run (fl_checkpoint_read_global) is refused to a model of another layout of the same size.
 *
 * Run all:  build/tests/test_checkpoint            Run one:  build/tests/test_checkpoint test_damaged_rows_no_leak */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_tmp.h"

#include <fcntl.h>
#include <malloc.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../src/fl/fl_internal.h"

enum { N_STATE = 6, ROUNDS = 3, DONE = 2 };

/* Under make DEBUG=1: Open MPI 4.1 leaks from MPI_Init inside plug-ins it unloads at exit, which no
 * LeakSanitizer suppression can name (the MPI scripts turn leak detection off for the same reason); this
 * test watches its own leak by heap growth instead. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }

typedef struct {
    FlRun run;
    int owner[1], clients[1];
    float client_state[1];
} Fake;

/* one client on rank 0, no method state: the smallest run a checkpoint can hold */
static int fake_init(Fake *f, const char *dir)
{
    memset(f, 0, sizeof *f);
    FlRun *r = &f->run;
    FH_CHECK(fl_comm_init(&r->comm, MPI_COMM_WORLD));
    r->s.rounds = ROUNDS;
    r->s.seed = 7;
    r->s.model = "tiny";
    r->s.norm = "none";
    r->config_text = "[fl]\nrounds = 3\n";
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    snprintf(r->checkpoint_path, sizeof r->checkpoint_path, "%s/checkpoint.h5", dir);
    r->n_clients = 1;
    r->owner = f->owner;
    r->work.n_owned = 1;
    r->work.loader.clients = f->clients;
    r->work.client_state = f->client_state;
    r->work.block = 1;
    /* a model whose state is the N_STATE floats: 2 inputs -> linear 2 (weights 4, biases 2); the checkpoint
     * writes its named tensors beside /server/global */
    NnModel *m = &r->work.model;
    FH_CHECK(nn_model_init(m, "tiny", (NnShape){ 1, 1, 2 }, 1));
    const int x = nn_flatten(m, m->input);
    FH_CHECK(nn_model_finalize(m, nn_linear(m, x, 2, 1, NN_ACT_NONE), x, 2));
    if (m->n_state != N_STATE) FH_FAIL(FH_ERR_USAGE, "tiny model has %lld state values", (long long)m->n_state);
    r->n_state = N_STATE;
    r->layout_hash = 0x1234;
    r->lr = 0.05;
    FH_CHECK(fh_alloc_aligned(&r->global, N_STATE * sizeof(float), "global"));
    for (int i = 0; i < N_STATE; i++) r->global[i] = 0.25f * (float)(i + 1);
    FH_CHECK(fh_calloc(&r->rows, ROUNDS, FL_N_COLUMNS * sizeof(double), "rows"));
    /* distinct values, so that each 8-byte row value occurs once in the file */
    for (int i = 0; i < DONE * FL_N_COLUMNS; i++) r->rows[i] = 1000.0 + 0.001 * i;
    r->n_rows = DONE;
    r->n_ccols = FL_N_CCOLUMNS;
    for (int c = 0; c < FL_N_CCOLUMNS; c++) r->ccol_names[c] = fl_client_column_names[c];
    FH_CHECK(fh_calloc(&r->client_rows, 2, FL_N_CCOLUMNS * sizeof(double), "client rows"));
    r->n_client_rows = 2;
    r->cap_client_rows = 2;
    /* a method without per-client floats: the store is the table alone, no file */
    FH_CHECK(fl_store_open(&r->store, &r->comm, dir, 1, 0, r->layout_hash, 1, 1));
    return fl_checkpoint_init(r);
}

/* tmp_record takes paths of up to 600 bytes */
static void record_checkpoint(const Fake *f)
{
    char path[600];
    snprintf(path, sizeof path, "%.590s", f->run.checkpoint_path);
    tmp_record(path);
}

/* fake_init in a fresh folder tmp_root/sub, its checkpoint recorded for removal */
static int fake_init_in(Fake *f, const char *sub)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, sub);
    mkdir(dir, 0777);
    tmp_record(dir);
    FH_CHECK(fake_init(f, dir));
    record_checkpoint(f);
    return FH_OK;
}

static void fake_free(Fake *f)
{
    nn_model_free(&f->run.work.model);
    fh_free(&f->run.global);
    fh_free(&f->run.rows);
    free(f->run.client_rows);
    fl_store_close(&f->run.store);
    fl_checkpoint_free(&f->run);
}

static void test_round_trip(void)
{
    Fake f;
    CHECK_OK(fake_init(&f, tmp_root));
    record_checkpoint(&f);
    CHECK_OK(fl_checkpoint_save(&f.run, DONE, f.run.checkpoint_path));
    double saved = f.run.rows[FL_N_COLUMNS + 3];
    memset(f.run.global, 0, N_STATE * sizeof(float));
    memset(f.run.rows, 0, ROUNDS * FL_N_COLUMNS * sizeof(double));
    f.run.n_rows = 0;
    CHECK_OK(fl_checkpoint_load(&f.run));
    CHECK(f.run.start_round == DONE);
    CHECK(f.run.n_rows == DONE);
    CHECK(f.run.rows[FL_N_COLUMNS + 3] == saved);
    CHECK(f.run.global[N_STATE - 1] == 0.25f * N_STATE);
    fake_free(&f);
}

/* replaces the checkpoint's /metrics/rounds by a table of the given columns (values 10 r + c) */
static int rewrite_rounds(const char *path, const char *columns, int n_cols)
{
    hid_t fid = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (fid < 0) return -1;
    double v[DONE * 8];
    for (int r = 0; r < DONE; r++)
        for (int c = 0; c < n_cols; c++) v[r * n_cols + c] = 10.0 * r + c;
    const hsize_t dims[2] = { DONE, (hsize_t)n_cols };
    hid_t space = H5Screate_simple(2, dims, NULL);
    int bad = H5Ldelete(fid, "/metrics/rounds", H5P_DEFAULT) < 0;
    hid_t d = H5Dcreate2(fid, "/metrics/rounds", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bad |= d < 0 || H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0;
    FhH5File f = { .id = fid, .path = path, .fail_status = FH_ERR_IO };
    bad |= d >= 0 && fh_h5_attr_write_string(&f, d, "columns", columns) != FH_OK;
    if (d >= 0) H5Dclose(d);
    H5Sclose(space);
    H5Fclose(fid);
    return bad ? -1 : 0;
}

/* A checkpoint written before a column existed resumes: its columns are matched by name, the new ones are
 * empty (NaN); a column this version does not know is refused naming it. */
static void test_older_columns(void)
{
    Fake f;
    CHECK_OK(fake_init(&f, tmp_root));
    record_checkpoint(&f);
    CHECK_OK(fl_checkpoint_save(&f.run, DONE, f.run.checkpoint_path));
    CHECK(rewrite_rounds(f.run.checkpoint_path, "test_accuracy,round", 2) == 0);
    CHECK_OK(fl_checkpoint_load(&f.run));
    CHECK(f.run.n_rows == DONE);
    int acc = -1;
    for (int c = 0; c < FL_N_COLUMNS; c++)
        if (!strcmp(fl_column_names[c], "test_accuracy")) acc = c;
    CHECK(acc > 0 && !strcmp(fl_column_names[0], "round"));
    if (acc > 0) {
        CHECK(f.run.rows[FL_N_COLUMNS + acc] == 10.0 && f.run.rows[FL_N_COLUMNS + 0] == 11.0);
        CHECK(isnan(f.run.rows[FL_N_COLUMNS + FL_N_COLUMNS - 1]));
    }
    CHECK(rewrite_rounds(f.run.checkpoint_path, "round,bogus_column", 2) == 0);
    fh_error_clear();
    CHECK(fl_checkpoint_load(&f.run) == FH_ERR_IO);
    CHECK_MSG(strstr(fh_error_message(), "bogus_column") != NULL, "%s", fh_error_message());
    fake_free(&f);
}

/* flips the lowest bit of the first byte of `value` (8 bytes) in the file; 0 when it occurs once */
static int flip_value(const char *path, double value)
{
    FILE *fp = fopen(path, "r+b");
    if (!fp) return -1;
    static unsigned char data[1 << 20];
    size_t n = fread(data, 1, sizeof data, fp);
    long at = -1;
    int count = 0;
    for (size_t i = 0; i + 8 <= n; i++)
        if (!memcmp(data + i, &value, 8)) at = (long)i, count++;
    int ok = count == 1 && fseek(fp, at, SEEK_SET) == 0 && fputc(data[at] ^ 1, fp) != EOF;
    fclose(fp);
    return ok ? 0 : -1;
}

static void test_damaged_rows_no_leak(void)
{
    Fake f;
    CHECK_OK(fake_init_in(&f, "damaged"));
    CHECK_OK(fl_checkpoint_save(&f.run, DONE, f.run.checkpoint_path));
    CHECK(flip_value(f.run.checkpoint_path, f.run.rows[FL_N_COLUMNS + 5]) == 0);
    fh_error_clear();
    CHECK(fl_checkpoint_load(&f.run) == FH_ERR_IO);
    CHECK_MSG(strstr(fh_error_message(), "/metrics/rounds") != NULL, "%s", fh_error_message());
    /* each refused load used to keep the rows read so far (rows x columns doubles) */
    for (int i = 0; i < 5; i++) fl_checkpoint_load(&f.run);
    const size_t before = mallinfo2().uordblks;
    const int loads = 400;
    for (int i = 0; i < loads; i++) fl_checkpoint_load(&f.run);
    const size_t after = mallinfo2().uordblks;
    const size_t table = (size_t)DONE * FL_N_COLUMNS * sizeof(double);
    CHECK_MSG(after < before + loads * table / 2, "the heap grew by %zu bytes over %d refused loads (%zu per load)",
              after - before, loads, (after - before) / loads);
    fh_error_clear();
    fake_free(&f);
}

/* Reading the global state outside a run (fedhet landscape): the model that wrote it reads it back; a model
 * of another layout with the same number of state values is refused, naming the file. */
static void test_read_global_layout(void)
{
    Fake f;
    CHECK_OK(fake_init_in(&f, "layout"));
    f.run.layout_hash = fl_layout_hash(&f.run.work.model);
    CHECK_OK(fl_checkpoint_save(&f.run, DONE, f.run.checkpoint_path));
    float state[N_STATE] = { 0 };
    int64_t rounds = -1;
    CHECK_OK(fl_checkpoint_read_global(f.run.checkpoint_path, &f.run.work.model, state, &rounds));
    CHECK(rounds == DONE && state[N_STATE - 1] == 0.25f * N_STATE);
    /* 2 inputs -> linear 1 without bias (2) -> linear 2 (2 + 2): six state values too */
    NnModel other;
    CHECK_OK(nn_model_init(&other, "other", (NnShape){ 1, 1, 2 }, 1));
    const int x = nn_flatten(&other, other.input);
    const int h = nn_linear(&other, x, 1, 0, NN_ACT_NONE);
    CHECK_OK(nn_model_finalize(&other, nn_linear(&other, h, 2, 1, NN_ACT_NONE), h, 2));
    CHECK(other.n_state == N_STATE);
    fh_error_clear();
    CHECK(fl_checkpoint_read_global(f.run.checkpoint_path, &other, state, NULL) == FH_ERR_USAGE);
    CHECK_MSG(strstr(fh_error_message(), f.run.checkpoint_path) && strstr(fh_error_message(), "another layout"), "%s",
              fh_error_message());
    fh_error_clear();
    nn_model_free(&other);
    fake_free(&f);
}

static void set_mtime(const char *path, time_t when)
{
    struct timespec t[2] = { { when, 0 }, { when, 0 } };
    utimensat(AT_FDCWD, path, t, 0);
}

static void touch_at(const char *path, time_t when)
{
    FILE *fp = fopen(path, "w");
    if (fp) fclose(fp);
    tmp_record(path);
    set_mtime(path, when);
}

/* run.h5 is current when it is not older than the checkpoint and whole (fl_checkpoint_verify) */
static void test_final_model_current(void)
{
    Fake f;
    CHECK_OK(fake_init_in(&f, "ages"));
    const char *ck = f.run.checkpoint_path;
    char dir[600], fin[600];
    snprintf(dir, sizeof dir, "%.500s", ck);
    *strrchr(dir, '/') = '\0';
    snprintf(fin, sizeof fin, "%.500s/run.h5", dir);
    CHECK(!fl_final_model_current(dir)); /* nothing: no final model */
    touch_at(ck, 1000);
    CHECK(!fl_final_model_current(dir)); /* the final checkpoint alone: killed before run.h5 */
    CHECK_OK(fl_checkpoint_save(&f.run, DONE, fin));
    tmp_record(fin);
    set_mtime(fin, 999);
    CHECK(!fl_final_model_current(dir)); /* run.h5 older than the checkpoint: an extended run's old one */
    set_mtime(fin, 1000);
    CHECK(fl_final_model_current(dir));
    set_mtime(fin, 1001);
    CHECK(fl_final_model_current(dir));
    CHECK_OK(fl_checkpoint_verify(fin));
    /* cut short, or emptied: not current (it is rebuilt from the checkpoint), and named */
    struct stat st;
    CHECK(stat(fin, &st) == 0);
    CHECK(truncate(fin, st.st_size / 2) == 0);
    set_mtime(fin, 1001);
    CHECK(!fl_final_model_current(dir));
    CHECK(fl_checkpoint_verify(fin) == FH_ERR_IO && strstr(fh_error_message(), fin));
    fh_error_clear();
    touch_at(fin, 1001);
    CHECK(!fl_final_model_current(dir));
    remove(ck);
    CHECK_OK(fl_checkpoint_save(&f.run, DONE, fin));
    CHECK(fl_final_model_current(dir)); /* no checkpoint to be newer */
    fake_free(&f);
}

/* a config saved by a version with FedAvgM's eta_s (config.ini, a checkpoint's /meta config) reads as eta_g; only
 * that key of [algo] changes */
static void test_saved_config_renamed_keys(void)
{
    const char *old = "[fl]\neta_s = 2\n[algo]\nmethod = fedavgm ; x\n  eta_s = 0.5 ; default\neta_sx = 1\neta_s=3";
    const char *now = "[fl]\neta_s = 2\n[algo]\nmethod = fedavgm ; x\n  eta_g = 0.5 ; default\neta_sx = 1\neta_g=3";
    char *text = NULL;
    CHECK_OK(fl_config_text_upgrade(old, &text));
    CHECK(text && !strcmp(text, now));
    free(text);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    MPI_Init(&argc, &argv);
    if (tmp_init("checkpoint") != 0) return 1;
    RUN(test_round_trip);
    RUN(test_older_columns);
    RUN(test_damaged_rows_no_leak);
    RUN(test_read_global_layout);
    RUN(test_final_model_current);
    RUN(test_saved_config_renamed_keys);
    tmp_cleanup();
    MPI_Finalize();
    return test_summary();
}
