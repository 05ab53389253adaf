/* Checkpoints (docs/architecture.md; layout below): written atomically with Fletcher32 on every dataset; read
 * back with every size checked, so a damaged file is refused instead of half-used.
 *   /meta        attributes: format, format_version, rounds_done, lr, seed, config, code_version,
 *                layout_hash, n_state
 *   /server      /server/global [n_state], /server/vectors [V_s, n_state] (broadcast), /server/private
 *                [V_p, n_state] (server only), /server/scalars [S_s]
 *   /clients     /clients/vector_<i> [K, n_state] per persistent client vector, /clients/floats [K, F] (small
 *                per-client states), /clients/has_state [K, 1] (1 once the client has trained)
 *   /metrics     /metrics/rounds [rows, columns], /metrics/clients [rows, columns] (attribute columns)
 *   /model       the global state again as named tensors in PyTorch's names and shapes (model_tensors.c);
 *                since version 3. Loading reads /server/global only, so version 2 files stay readable.
 * Completeness mark: /meta attribute "complete" = {datasets in the file, FNV-1a 64 of /server/global's
 * bytes}, written after every dataset (fl_checkpoint_verify). Atomic replacement already keeps a partly
 * written file from ever being under the final name; the mark and a full read (Fletcher32 checks every
 * chunk, the 1.10 format every object header) catch what happens to a file afterwards: a copy cut short,
 * a disk that loses blocks, a dataset removed by hand. A file without the mark (written before it
 * existed, or of format version 2) counts as complete when every dataset reads back with its checksums. */
#include "fl_internal.h"

#include <stdlib.h>
#include <math.h>
#include <unistd.h>
#include <string.h>
#include <sys/stat.h>

#include "fedhet/core.h"
#include "fedhet/h5io.h"

#define CKPT_FORMAT "fedhet-checkpoint"
#define CKPT_VERSION 3
#define CKPT_OLDEST_VERSION 2 /* version 2 lacks only /model */
#define CKPT_CODE_VERSION "fedhet 0.1"

uint64_t fl_layout_hash(const NnModel *m)
{
    uint64_t h = 1469598103934665603ull;
    for (int v = 0; v < m->n_views; v++) {
        const NnParamView *pv = &m->views[v];
        char line[128];
        int n = snprintf(line, sizeof line, "%s:%lld:%lld;", pv->name, (long long)pv->offset, (long long)pv->count);
        for (int i = 0; i < n; i++) h = (h ^ (unsigned char)line[i]) * 1099511628211ull;
    }
    return h;
}

static FhH5Layout ckpt_layout(hsize_t rows, hsize_t row_elems)
{
    /* chunks of about 1 MiB; Fletcher32 needs chunking */
    hsize_t per = ((hsize_t)1 << 18) / (row_elems ? row_elems : 1);
    if (per < 1) per = 1;
    return (FhH5Layout){ rows < per ? (rows ? rows : 1) : per, 0, 1 };
}

static int write_matrix(const FhH5File *f, const char *name, hid_t mem, hid_t file_type, hsize_t rows, hsize_t cols,
                        const void *data)
{
    const hsize_t dims[2] = { rows, cols };
    FhH5Layout l = ckpt_layout(rows, cols);
    if (rows == 0) l.chunk_rows = 0, l.fletcher32 = 0;
    return fh_h5_write(f, name, mem, file_type, cols ? 2 : 1, dims, &l, data);
}

static int write_columns_attr(const FhH5File *f, const char *dset_name, const char *const *names, int n)
{
    char text[4096];
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof text; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", i ? "," : "", names[i]);
    hid_t d = H5Dopen2(f->id, dset_name, H5P_DEFAULT);
    int st = fh_h5_attr_write_string(f, d, "columns", text);
    H5Dclose(d);
    return st;
}

/* rank 0: the file except client vectors */
static int save_server_side(FlRun *run, FhH5File *f, int rounds_done)
{
    hid_t g;
    FH_CHECK(fh_h5_group(f, "/meta", &g));
    int status = FH_OK;
    const int64_t version = CKPT_VERSION, done = rounds_done, seed = run->s.seed, n_state = run->n_state,
                  hash = (int64_t)run->layout_hash;
    if (status == FH_OK) status = fh_h5_attr_write_string(f, g, "format", CKPT_FORMAT);
    if (status == FH_OK) status = fh_h5_attr_write_int64s(f, g, "format_version", &version, 1);
    if (status == FH_OK) status = fh_h5_attr_write_int64s(f, g, "rounds_done", &done, 1);
    if (status == FH_OK) status = fh_h5_attr_write_doubles(f, g, "lr", &run->lr, 1);
    if (status == FH_OK) status = fh_h5_attr_write_int64s(f, g, "seed", &seed, 1);
    if (status == FH_OK) status = fh_h5_attr_write_string(f, g, "config", run->config_text);
    if (status == FH_OK) status = fh_h5_attr_write_string(f, g, "code_version", CKPT_CODE_VERSION);
    if (status == FH_OK) status = fh_h5_attr_write_int64s(f, g, "layout_hash", &hash, 1);
    if (status == FH_OK) status = fh_h5_attr_write_int64s(f, g, "n_state", &n_state, 1);
    H5Gclose(g);
    FH_CHECK(status);
    FH_CHECK(fh_h5_group(f, "/server", &g));
    H5Gclose(g);
    FH_CHECK(write_matrix(f, "/server/global", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, (hsize_t)run->n_state, 0, run->global));
    FH_CHECK(fl_model_tensors_write(f, &run->work.model, &run->s, run->tensor_names, run->global));
    if (run->z.server_vectors)
        FH_CHECK(write_matrix(f, "/server/vectors", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, (hsize_t)run->z.server_vectors,
                              (hsize_t)run->n_state, run->server_vecs));
    if (run->z.server_private)
        FH_CHECK(write_matrix(f, "/server/private", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, (hsize_t)run->z.server_private,
                              (hsize_t)run->n_state, run->server_private));
    if (run->z.server_scalars)
        FH_CHECK(write_matrix(f, "/server/scalars", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, (hsize_t)run->z.server_scalars, 0,
                              run->server_scalars));
    FH_CHECK(fh_h5_group(f, "/metrics", &g));
    H5Gclose(g);
    FH_CHECK(write_matrix(f, "/metrics/rounds", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, (hsize_t)run->n_rows, FL_N_COLUMNS,
                          run->rows));
    FH_CHECK(write_columns_attr(f, "/metrics/rounds", fl_column_names, FL_N_COLUMNS));
    if (run->n_dcols) {
        /* metrics.csv's per-domain accuracy columns */
        FH_CHECK(write_matrix(f, "/metrics/domains", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, (hsize_t)run->n_rows,
                              (hsize_t)run->n_dcols, run->drows));
        FH_CHECK(write_columns_attr(f, "/metrics/domains", (const char *const *)run->dcol_names, run->n_dcols));
    }
    FH_CHECK(write_matrix(f, "/metrics/clients", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, (hsize_t)run->n_client_rows,
                          (hsize_t)run->n_ccols, run->client_rows));
    FH_CHECK(write_columns_attr(f, "/metrics/clients", run->ccol_names, run->n_ccols));
    return FH_OK;
}

/* A client's persistent block (FlClientWork) in datasets of [K, length] each. */
typedef struct {
    char name[64];
    int64_t offset, length;
} BlockPiece;

static int block_pieces(const FlRun *run, BlockPiece *p, int cap)
{
    int n = 0;
    for (int v = 0; v < run->z.client_vectors && n < cap - 2; v++, n++) {
        snprintf(p[n].name, sizeof p[n].name, "/clients/vector_%d", v);
        p[n].offset = (int64_t)v * run->n_state;
        p[n].length = run->n_state;
    }
    if (run->z.client_floats > 0) {
        snprintf(p[n].name, sizeof p[n].name, "/clients/floats");
        p[n].offset = (int64_t)run->z.client_vectors * run->n_state;
        p[n++].length = run->z.client_floats;
    }
    snprintf(p[n].name, sizeof p[n].name, "/clients/has_state");
    p[n].offset = run->work.block - 1;
    p[n++].length = 1;
    return n;
}

#define MAX_PIECES 16

/* Client blocks travel to rank 0 one client at a time (bounded memory) in ascending id. */
static int save_client_state(FlRun *run, FhH5File *f, int status)
{
    const int K = run->n_clients;
    const int64_t block = run->work.block;
    BlockPiece pieces[MAX_PIECES];
    const int n_pieces = block_pieces(run, pieces, MAX_PIECES);
    float *buf = run->ckpt_block;
    hid_t dsets[MAX_PIECES];
    int n_open = 0;
    if (run->comm.rank == 0 && status == FH_OK) {
        hid_t g;
        status = fh_h5_group(f, "/clients", &g);
        if (status == FH_OK) H5Gclose(g);
        for (int i = 0; i < n_pieces && status == FH_OK; i++) {
            const hsize_t dims[2] = { (hsize_t)K, (hsize_t)pieces[i].length };
            FhH5Layout l = ckpt_layout(1, (hsize_t)pieces[i].length);
            l.chunk_rows = pieces[i].length < 4096 ? (hsize_t)K : 1;
            status = fh_h5_create_dataset(f, pieces[i].name, H5T_IEEE_F32LE, 2, dims, &l, &dsets[i]);
            if (status == FH_OK) n_open++;
        }
    }
    status = fl_agree(&run->comm, status);
    for (int k = 0; k < K && status == FH_OK; k++) {
        const int owner = run->owner[k];
        const float *src = run->comm.rank == owner ? fl_client_block(&run->work, k) : NULL;
        if (owner != 0 && run->comm.rank == owner) {
            MPI_Request req;
            MPI_Isend(src, (int)block, MPI_FLOAT, 0, k, run->comm.comm, &req);
            status = fl_wait(&req);
        } else if (run->comm.rank == 0) {
            if (owner != 0) {
                MPI_Request req;
                MPI_Irecv(buf, (int)block, MPI_FLOAT, owner, k, run->comm.comm, &req);
                status = fl_wait(&req);
                src = buf;
            }
            for (int i = 0; i < n_pieces && status == FH_OK; i++)
                status = fh_h5_write_rows(f, dsets[i], pieces[i].name, H5T_NATIVE_FLOAT, (hsize_t)k, 1,
                                          src + pieces[i].offset);
        }
    }
    for (int i = 0; i < n_open; i++) H5Dclose(dsets[i]);
    return fl_agree(&run->comm, status);
}

int fl_checkpoint_init(FlRun *run)
{
    FH_CHECK(fh_alloc_aligned(&run->ckpt_block, (size_t)run->work.block * sizeof(float), "client state buffer"));
    return fl_model_tensor_names(&run->work.model, &run->tensor_names);
}

void fl_checkpoint_free(FlRun *run)
{
    fh_free(&run->ckpt_block);
    fh_free(&run->tensor_names);
}

typedef struct {
    int64_t rounds_done, layout_hash, n_state, version;
    double lr;
} CkptMeta;
static int read_meta(const FhH5File *f, CkptMeta *meta);

/* ---- the completeness mark ---- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
#define FNV_SEED 1469598103934665603ull

typedef struct {
    char **names;
    int n, cap;
} DsetList;

static herr_t list_dataset(hid_t obj, const char *name, const H5O_info_t *info, void *data)
{
    (void)obj;
    DsetList *l = data;
    if (info->type != H5O_TYPE_DATASET) return 0;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        char **grown = realloc(l->names, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        l->names = grown;
        l->cap = cap;
    }
    return (l->names[l->n] = strdup(name)) ? (l->n++, 0) : -1;
}

static void dset_list_free(DsetList *l)
{
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

/* the round loop allocates nothing: the writer only counts */
static herr_t count_dataset(hid_t obj, const char *name, const H5O_info_t *info, void *data)
{
    (void)obj, (void)name;
    if (info->type == H5O_TYPE_DATASET) ++*(int *)data;
    return 0;
}

/* every dataset of f: names into l (list_dataset), or only their count (count_dataset, l NULL) */
static int visit_datasets(const FhH5File *f, DsetList *l, int *count)
{
    if (l) memset(l, 0, sizeof *l);
    void *data = l ? (void *)l : (void *)count;
#if H5_VERSION_GE(1, 12, 0)
    herr_t rc = H5Ovisit3(f->id, H5_INDEX_NAME, H5_ITER_INC, (H5O_iterate2_t)(l ? list_dataset : count_dataset), data,
                          H5O_INFO_BASIC);
#else
    herr_t rc = H5Ovisit2(f->id, H5_INDEX_NAME, H5_ITER_INC, l ? list_dataset : count_dataset, data, H5O_INFO_BASIC);
#endif
    if (rc < 0) {
        char msg[256];
        if (l) dset_list_free(l);
        FH_FAIL(FH_ERR_IO, "%s: cannot walk its objects (HDF5: %s)", f->path, fh_h5_message(msg));
    }
    return FH_OK;
}

/* rank 0, last thing before the commit */
static int write_mark(FhH5File *f, const FlRun *run)
{
    int n = 0;
    FH_CHECK(visit_datasets(f, NULL, &n));
    const int64_t mark[2] = { n, (int64_t)fnv1a(FNV_SEED, run->global, (size_t)run->n_state * sizeof(float)) };
    hid_t g = H5Gopen2(f->id, "/meta", H5P_DEFAULT);
    int status = fh_h5_attr_write_int64s(f, g, "complete", mark, 2);
    H5Gclose(g);
    return status;
}

/* Reads all of dataset `name` in blocks of about 16 MiB (each chunk's Fletcher32 is checked on the way);
 * *hash: FNV-1a of its bytes as stored (float32 little-endian for /server/global) */
static int read_through(const FhH5File *f, const char *name, uint64_t *hash)
{
    hid_t d = H5I_INVALID_HID, space = H5I_INVALID_HID, type = H5I_INVALID_HID;
    char msg[256];
    void *buf = NULL;
    int status = fh_h5_open_dataset(f, name, &d);
    if (status == FH_OK) {
        space = H5Dget_space(d);
        type = H5Dget_type(d);
        if (space < 0 || type < 0)
            status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: cannot query %s (HDF5: %s)", f->path, name,
                                    fh_h5_message(msg));
    }
    hsize_t dims[8] = { 0 };
    const int rank = status == FH_OK ? H5Sget_simple_extent_ndims(space) : -1;
    if (status == FH_OK && (rank < 0 || rank > 8))
        status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: %s has a damaged dataspace", f->path, name);
    if (status == FH_OK && rank > 0) {
        H5Sget_simple_extent_dims(space, dims, NULL);
        size_t row = H5Tget_size(type);
        for (int i = 1; i < rank; i++) row *= (size_t)dims[i];
        hsize_t per = row ? ((hsize_t)1 << 24) / row : 1;
        if (per < 1) per = 1;
        if (per > dims[0]) per = dims[0];
        status = dims[0] ? fh_calloc(&buf, (size_t)per, row ? row : 1, name) : FH_OK;
        for (hsize_t first = 0; status == FH_OK && first < dims[0]; first += per) {
            hsize_t n = dims[0] - first < per ? dims[0] - first : per;
            status = fh_h5_read_rows(f, d, name, type, first, n, buf);
            if (status == FH_OK && hash) *hash = fnv1a(*hash, buf, (size_t)n * row);
        }
    } else if (status == FH_OK) { /* a scalar */
        status = fh_calloc(&buf, 1, H5Tget_size(type) + 1, name);
        if (status == FH_OK && H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
            status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: reading %s failed (HDF5: %s)", f->path, name,
                                    fh_h5_message(msg));
    }
    free(buf);
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    if (d >= 0) H5Dclose(d);
    return status;
}

int fl_checkpoint_verify(const char *path)
{
    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    FhH5File f;
    CkptMeta meta;
    DsetList l = { 0 };
    int status = fh_h5_open(&f, path, FH_ERR_IO);
    if (status == FH_OK) status = read_meta(&f, &meta);
    if (status == FH_OK) status = visit_datasets(&f, &l, NULL);
    uint64_t global = FNV_SEED;
    for (int i = 0; i < l.n && status == FH_OK; i++)
        status = read_through(&f, l.names[i], strcmp(l.names[i], "server/global") ? NULL : &global);
    int has_mark = 0;
    hid_t g = status == FH_OK ? H5Gopen2(f.id, "/meta", H5P_DEFAULT) : H5I_INVALID_HID;
    /* the mark belongs to this format version; a file of an older one is verified by the read alone */
    if (status == FH_OK && meta.version == CKPT_VERSION) status = fh_h5_attr_exists(&f, g, "complete", &has_mark);
    int64_t mark[2];
    if (status == FH_OK && has_mark) status = fh_h5_attr_read_int64s(&f, g, "complete", mark, 2);
    if (status == FH_OK && has_mark && (mark[0] != l.n || (uint64_t)mark[1] != global))
        status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: incomplete or altered: it holds %d datasets "
                                "(written: %lld) and /server/global %s its checksum", path, l.n, (long long)mark[0],
                                (uint64_t)mark[1] == global ? "matches" : "does not match");
    if (g >= 0) H5Gclose(g);
    dset_list_free(&l);
    fh_h5_close(&f);
    fh_h5_quiet_end(&quiet);
    return status;
}

int fl_checkpoint_save(FlRun *run, int rounds_done, const char *path)
{
    FhH5File f = { .id = H5I_INVALID_HID };
    FhH5Quiet quiet;
    int status = FH_OK;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char done_point[64];
    snprintf(done_point, sizeof done_point, "%.50s:done", base);
    if (run->comm.rank == 0) {
        fh_h5_quiet_begin(&quiet);
        status = fh_h5_create(&f, path, FH_ERR_IO);
        if (status == FH_OK) status = save_server_side(run, &f, rounds_done);
    }
    status = save_client_state(run, &f, fl_agree(&run->comm, status));
    if (run->comm.rank == 0) {
        if (status == FH_OK) status = write_mark(&f, run);
        if (status == FH_OK) {
            fl_injected_kill(base, rounds_done - 1);
            status = fh_h5_commit(&f);
            if (status == FH_OK) fl_injected_kill(done_point, rounds_done - 1);
        } else fh_h5_discard(&f);
        fh_h5_quiet_end(&quiet);
    }
    return fl_agree(&run->comm, status);
}

static int modified_before(const struct stat *a, const struct stat *b)
{
    return a->st_mtim.tv_sec < b->st_mtim.tv_sec ||
           (a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec < b->st_mtim.tv_nsec);
}

int fl_final_model_current(const char *run_dir)
{
    char path[4300], ckpt_path[4300];
    struct stat final, ckpt;
    snprintf(path, sizeof path, "%.4200s/run.h5", run_dir);
    if (stat(path, &final) != 0) return 0;
    snprintf(ckpt_path, sizeof ckpt_path, "%.4200s/checkpoint.h5", run_dir);
    if (stat(ckpt_path, &ckpt) == 0 && modified_before(&final, &ckpt)) return 0;
    if (fl_checkpoint_verify(path) != FH_OK) {
        fh_log_warn("%s", fh_error_message());
        return 0;
    }
    return 1;
}

/* ---- loading ---- */

static int read_vector(const FhH5File *f, const char *name, hsize_t rows, hsize_t cols, hid_t mem, void *out)
{
    hsize_t dims[2];
    hid_t d;
    FH_CHECK(fh_h5_open_checked(f, name, H5T_FLOAT, 0, cols ? 2 : 1, dims, &d));
    H5Dclose(d);
    if (dims[0] != rows || (cols && dims[1] != cols))
        FH_FAIL(FH_ERR_IO, "%s: %s has %llu x %llu values; expected %llu x %llu", f->path, name,
                (unsigned long long)dims[0], (unsigned long long)(cols ? dims[1] : 1), (unsigned long long)rows,
                (unsigned long long)(cols ? cols : 1));
    return fh_h5_read_all(f, name, mem, out);
}

/* A table in this version's columns `names`. Stored columns are matched by name (the dataset's "columns"
 * attribute), so a checkpoint written before a column existed still resumes, the column empty (NaN) in its
 * earlier rows; a stored column this version does not know is refused rather than dropped. */
static int read_table(const FhH5File *f, const char *name, const char *const *names, int cols, double **rows_out,
                      int64_t *n_rows)
{
    hsize_t dims[2];
    hid_t d;
    FH_CHECK(fh_h5_open_checked(f, name, H5T_FLOAT, 8, 2, dims, &d));
    char *stored = NULL;
    int status = fh_h5_attr_read_string(f, d, "columns", &stored);
    H5Dclose(d);
    FH_CHECK(status);
    int *col_of = NULL; /* stored column j -> this version's column */
    double *raw = NULL;
    const int n_stored = (int)dims[1];
    status = fh_calloc(&col_of, n_stored > 0 ? (size_t)n_stored : 1, sizeof *col_of, name);
    int j = 0;
    for (char *save = NULL, *tok = status == FH_OK ? strtok_r(stored, ",", &save) : NULL; tok && status == FH_OK;
         tok = strtok_r(NULL, ",", &save), j++) {
        int c = 0;
        while (c < cols && strcmp(names[c], tok)) c++;
        if (j >= n_stored)
            status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: %s names more columns than its %d", f->path,
                                    name, n_stored);
        else if (c == cols)
            status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: %s has a column %s that this version does not "
                                    "write (a checkpoint of a newer fedhet?)", f->path, name, tok);
        else col_of[j] = c;
    }
    if (status == FH_OK && j != n_stored)
        status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: %s has %d columns but names %d", f->path, name,
                                n_stored, j);
    free(stored);
    if (status == FH_OK) status = fh_calloc(rows_out, dims[0] ? (size_t)dims[0] : 1, (size_t)cols * sizeof(double), name);
    if (status == FH_OK && dims[0] > 0) {
        status = fh_calloc(&raw, (size_t)dims[0], (size_t)n_stored * sizeof(double), name);
        if (status == FH_OK) status = fh_h5_read_all(f, name, H5T_NATIVE_DOUBLE, raw);
        for (hsize_t r = 0; status == FH_OK && r < dims[0]; r++) {
            double *row = *rows_out + r * (size_t)cols;
            for (int c = 0; c < cols; c++) row[c] = NAN;
            for (int k = 0; k < n_stored; k++) row[col_of[k]] = raw[r * (size_t)n_stored + k];
        }
    }
    fh_free(&raw);
    fh_free(&col_of);
    if (status != FH_OK) { /* a failed checksum: nothing half-read is kept */
        fh_free(rows_out);
        *n_rows = 0;
        return status;
    }
    *n_rows = (int64_t)dims[0];
    return FH_OK;
}

int fl_checkpoint_read_config(const char *path, char **text)
{
    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    FhH5File f;
    int status = fh_h5_open(&f, path, FH_ERR_IO);
    hid_t g = H5I_INVALID_HID;
    if (status == FH_OK) {
        int exists = 0;
        status = fh_h5_exists(&f, "/meta", &exists);
        if (status == FH_OK && !exists) status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: not a fedhet checkpoint (no /meta)", path);
        if (status == FH_OK) g = H5Gopen2(f.id, "/meta", H5P_DEFAULT);
        if (status == FH_OK) status = fh_h5_attr_read_string(&f, g, "config", text);
    }
    if (g >= 0) H5Gclose(g);
    fh_h5_close(&f);
    fh_h5_quiet_end(&quiet);
    if (status == FH_OK) { /* the keys as this version names them */
        char *now = NULL;
        status = fl_config_text_upgrade(*text, &now);
        free(*text);
        *text = now;
    }
    return status;
}

/* /meta: what a reader checks before it trusts the rest of the file */

static int read_meta(const FhH5File *f, CkptMeta *meta)
{
    int exists = 0;
    FH_CHECK(fh_h5_exists(f, "/meta", &exists));
    if (!exists) FH_FAIL(FH_ERR_IO, "%s: not a fedhet checkpoint (no /meta)", f->path);
    hid_t g = H5Gopen2(f->id, "/meta", H5P_DEFAULT);
    char *format = NULL;
    int64_t version = 0;
    int status = fh_h5_attr_read_string(f, g, "format", &format);
    if (status == FH_OK && strcmp(format, CKPT_FORMAT))
        status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: format is \"%s\", not %s", f->path, format, CKPT_FORMAT);
    if (status == FH_OK) status = fh_h5_attr_read_int64s(f, g, "format_version", &version, 1);
    if (status == FH_OK && (version < CKPT_OLDEST_VERSION || version > CKPT_VERSION))
        status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: checkpoint version %lld; this fedhet reads %d to %d",
                                f->path, (long long)version, CKPT_OLDEST_VERSION, CKPT_VERSION);
    meta->version = version;
    if (status == FH_OK) status = fh_h5_attr_read_int64s(f, g, "rounds_done", &meta->rounds_done, 1);
    if (status == FH_OK) status = fh_h5_attr_read_doubles(f, g, "lr", &meta->lr, 1);
    if (status == FH_OK) status = fh_h5_attr_read_int64s(f, g, "layout_hash", &meta->layout_hash, 1);
    if (status == FH_OK) status = fh_h5_attr_read_int64s(f, g, "n_state", &meta->n_state, 1);
    free(format);
    H5Gclose(g);
    return status;
}

int fl_checkpoint_read_global(const char *path, const NnModel *m, float *state, int64_t *rounds_done)
{
    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    FhH5File f;
    CkptMeta meta;
    int status = fh_h5_open(&f, path, FH_ERR_IO);
    if (status == FH_OK) status = read_meta(&f, &meta);
    const uint64_t hash = fl_layout_hash(m);
    /* the same size is not enough: another model of that size would read as nonsense */
    if (status == FH_OK && ((uint64_t)meta.layout_hash != hash || meta.n_state != m->n_state))
        status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__,
                                "%s: written by a model of another layout (%lld state values, layout hash %016llx) "
                                "than model %s (%lld state values, layout hash %016llx)", path,
                                (long long)meta.n_state, (unsigned long long)meta.layout_hash, m->arch,
                                (long long)m->n_state, (unsigned long long)hash);
    if (status == FH_OK) status = read_vector(&f, "/server/global", (hsize_t)m->n_state, 0, H5T_NATIVE_FLOAT, state);
    if (status == FH_OK && rounds_done) *rounds_done = meta.rounds_done;
    fh_h5_close(&f);
    fh_h5_quiet_end(&quiet);
    return status;
}

/* rank 0: everything but client vectors, into run */
static int load_server_side(FlRun *run, FhH5File *f, int64_t *rounds_done)
{
    CkptMeta meta;
    FH_CHECK(read_meta(f, &meta));
    *rounds_done = meta.rounds_done;
    run->lr = meta.lr;
    if (*rounds_done > run->s.rounds)
        FH_FAIL(FH_ERR_USAGE, "%s: %lld rounds are done but fl.rounds = %d (raise fl.rounds to continue)", f->path,
                (long long)*rounds_done, run->s.rounds);
    if ((uint64_t)meta.layout_hash != run->layout_hash || meta.n_state != run->n_state)
        FH_FAIL(FH_ERR_IO, "%s: the model layout differs from this run's (%lld state values vs %lld)", f->path,
                (long long)meta.n_state, (long long)run->n_state);
    if (*rounds_done < 0 || *rounds_done > run->s.rounds)
        FH_FAIL(FH_ERR_IO, "%s: rounds_done = %lld is outside 0..%d (fl.rounds)", f->path, (long long)*rounds_done,
                run->s.rounds);
    FH_CHECK(read_vector(f, "/server/global", (hsize_t)run->n_state, 0, H5T_NATIVE_FLOAT, run->global));
    if (run->z.server_vectors)
        FH_CHECK(read_vector(f, "/server/vectors", (hsize_t)run->z.server_vectors, (hsize_t)run->n_state,
                             H5T_NATIVE_FLOAT, run->server_vecs));
    if (run->z.server_private)
        FH_CHECK(read_vector(f, "/server/private", (hsize_t)run->z.server_private, (hsize_t)run->n_state,
                             H5T_NATIVE_FLOAT, run->server_private));
    if (run->z.server_scalars)
        FH_CHECK(read_vector(f, "/server/scalars", (hsize_t)run->z.server_scalars, 0, H5T_NATIVE_DOUBLE,
                             run->server_scalars));
    double *rows = NULL;
    int64_t n_rows = 0;
    FH_CHECK(read_table(f, "/metrics/rounds", fl_column_names, FL_N_COLUMNS, &rows, &n_rows));
    if (n_rows > run->s.rounds) {
        fh_free(&rows);
        FH_FAIL(FH_ERR_IO, "%s: %lld metric rows for %d rounds", f->path, (long long)n_rows, run->s.rounds);
    }
    memcpy(run->rows, rows, (size_t)n_rows * FL_N_COLUMNS * sizeof(double));
    run->n_rows = (int)n_rows;
    fh_free(&rows);
    int has_domains = 0;
    if (run->n_dcols) FH_CHECK(fh_h5_exists(f, "/metrics/domains", &has_domains));
    if (has_domains) {
        int64_t n_drows = 0;
        FH_CHECK(read_table(f, "/metrics/domains", (const char *const *)run->dcol_names, run->n_dcols, &rows, &n_drows));
        if (n_drows == n_rows) memcpy(run->drows, rows, (size_t)n_rows * run->n_dcols * sizeof(double));
        fh_free(&rows);
    } else {
        for (int64_t i = 0; i < n_rows * run->n_dcols; i++) run->drows[i] = NAN;
    }
    fh_free(&run->client_rows);
    FH_CHECK(read_table(f, "/metrics/clients", run->ccol_names, run->n_ccols, &run->client_rows,
                        &run->n_client_rows));
    run->cap_client_rows = run->n_client_rows > 0 ? run->n_client_rows : 1;
    return FH_OK;
}

int fl_checkpoint_load(FlRun *run)
{
    FhH5File f = { .id = H5I_INVALID_HID };
    FhH5Quiet quiet;
    int64_t rounds_done = 0;
    int status = FH_OK;
    if (run->comm.rank == 0) {
        fh_h5_quiet_begin(&quiet);
        status = fh_h5_open(&f, run->checkpoint_path, FH_ERR_IO);
        if (status == FH_OK) status = load_server_side(run, &f, &rounds_done);
    }
    status = fl_agree(&run->comm, status);
    if (status == FH_OK) {
        int64_t meta[1] = { rounds_done };
        status = fl_bcast(&run->comm, meta, sizeof meta);
        rounds_done = meta[0];
        if (status == FH_OK) status = fl_bcast(&run->comm, &run->lr, sizeof run->lr);
        if (status == FH_OK)
            status = fl_bcast(&run->comm, run->global, (int64_t)(1 + run->z.server_vectors) * run->n_state * 4);
        if (status == FH_OK && run->z.server_scalars)
            status = fl_bcast(&run->comm, run->server_scalars, run->z.server_scalars * (int64_t)sizeof(double));
    }
    /* client state: rank 0 reads client k's rows and sends them to its owner */
    const int64_t block = run->work.block;
    BlockPiece pieces[MAX_PIECES];
    const int n_pieces = block_pieces(run, pieces, MAX_PIECES);
    float *buf = run->ckpt_block;
    if (status == FH_OK && run->comm.rank == 0) {
        for (int i = 0; i < n_pieces && status == FH_OK; i++) {
            hsize_t dims[2];
            hid_t d;
            status = fh_h5_open_checked(&f, pieces[i].name, H5T_FLOAT, 4, 2, dims, &d);
            if (status != FH_OK) break;
            H5Dclose(d);
            if (dims[0] != (hsize_t)run->n_clients || dims[1] != (hsize_t)pieces[i].length)
                status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: %s is %llu x %llu; expected %d x %lld",
                                        f.path, pieces[i].name, (unsigned long long)dims[0],
                                        (unsigned long long)dims[1], run->n_clients, (long long)pieces[i].length);
        }
    }
    status = fl_agree(&run->comm, status);
    for (int k = 0; k < run->n_clients && status == FH_OK; k++) {
        const int owner = run->owner[k];
        float *dst = run->comm.rank == owner ? fl_client_block(&run->work, k) : NULL;
        if (run->comm.rank == 0) {
            for (int i = 0; i < n_pieces && status == FH_OK; i++) {
                hid_t d;
                status = fh_h5_open_dataset(&f, pieces[i].name, &d);
                if (status == FH_OK) {
                    status = fh_h5_read_rows(&f, d, pieces[i].name, H5T_NATIVE_FLOAT, (hsize_t)k, 1, buf + pieces[i].offset);
                    H5Dclose(d);
                }
            }
            if (owner == 0 && status == FH_OK) memcpy(dst, buf, (size_t)block * sizeof(float));
            else if (status == FH_OK) {
                MPI_Request req;
                MPI_Isend(buf, (int)block, MPI_FLOAT, owner, k, run->comm.comm, &req);
                status = fl_wait(&req);
            }
        } else if (run->comm.rank == owner) {
            MPI_Request req;
            MPI_Irecv(dst, (int)block, MPI_FLOAT, 0, k, run->comm.comm, &req);
            status = fl_wait(&req);
        }
        /* a read failure on rank 0 would leave an owner waiting: agree after every client */
        status = fl_agree(&run->comm, status);
    }
    if (run->comm.rank == 0) {
        fh_h5_close(&f);
        fh_h5_quiet_end(&quiet);
    }
    run->start_round = (int)rounds_done;
    return fl_agree(&run->comm, status);
}
