/* The landscape (analysis.h; fedhet landscape CHECKPOINT.h5): the test loss around a model along random
 * directions (Li, Xu, Taylor, Studer, Goldstein, "Visualizing the Loss Landscape of Neural Nets", NeurIPS
 * 2018).
 *
 * Directions: Gaussian vectors from Philox (seed, purpose projection) with counter (direction, tensor),
 * filter-normalised: each filter (a slice along the tensor's first dimension: a conv output channel, a
 * linear layer's row) is scaled to the norm of the same filter of the model, d_f <- d_f / |d_f| * |w_f|.
 * One-dimensional tensors (biases, norm weights) get zero (bias=zero, Li et al.'s ignore='biasbn') or the
 * tensor itself (bias=weights); buffers (BatchNorm running statistics) are never moved: every point is
 * evaluated in eval mode with the checkpoint's buffers.
 *
 * Points w + a d1 (+ b d2) on a regular grid over [-span, span] are dealt to the ranks in turn (point p on
 * rank p mod size); each point's loss is the mean softmax cross-entropy over the test rows (all, or
 * `subset` rows spread evenly over the test set), summed in double in row order, so the numbers do not
 * depend on the rank count. Rank 0 writes <out>/<name>.h5 atomically and draws <out>/<name>.png. */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/analysis.h"
#include "fedhet/config.h"
#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/fl.h"
#include "fedhet/h5io.h"
#include "fedhet/nn.h"
#include "fedhet/rng.h"

#define LS_FORMAT "fedhet-landscape"
#define LS_VERSION 1

/* ---- the model ----------------------------------------------------------------------------------------- */

typedef struct {
    LandscapeOptions o;
    MPI_Comm comm;
    char *config;        /* the checkpoint's config text */
    int64_t rounds_done, n_state;
    float *center;       /* [n_state] the checkpoint's global state */
    char data_path[4096];
    FlRunModel *run;     /* the run's model, as the run built it */
    const char *model;   /* its name */
    DataPartFile f;
    int f_open;
    NnModel m;
    int m_built;
    float *dir[2];       /* directions [n_state] */
    uint8_t *images;     /* the subset's rows */
    int32_t *labels;
    int64_t n_rows;
    float *x, *lut, *dlogits, *per_sample;
    int32_t *pred;
    int n_points;        /* per axis */
    int64_t n_total;     /* points in all */
    double *loss, *acc;  /* [n_total] */
} Landscape;

/* every rank: the run's model from the config text, on the run's partition file (or data=) read as the run read it */
static int setup_model(Landscape *L)
{
    FH_CHECK(fl_run_model_open(&L->run, L->config, L->o.checkpoint));
    L->model = fl_run_model_name(L->run);
    snprintf(L->data_path, sizeof L->data_path, "%s", *L->o.data ? L->o.data : fl_run_model_data_path(L->run));
    FH_CHECK(fl_run_model_data_open(L->run, L->data_path, &L->f));
    L->f_open = 1;
    if (L->f.n_test == 0) FH_FAIL(FH_ERR_DATA, "%s has no test set: the landscape needs test rows", L->data_path);
    nn_set_threads(L->o.threads); /* before the build: oneDNN's primitives keep the thread count they were made with */
    L->m_built = 1;               /* nn_zoo_build leaves the model freeable even when it fails */
    FH_CHECK(fl_run_model_build(L->run, &L->f, L->o.batch, &L->m));
    L->n_state = L->m.n_state;
    nn_model_set_training(&L->m, 0);
    return FH_OK;
}

/* the subset's rows, as uint8 with labels: rows floor(j * n_test / S), j < S */
static int read_rows(Landscape *L)
{
    const int64_t n_test = L->f.n_test;
    const int64_t S = L->o.subset > 0 && L->o.subset < n_test ? L->o.subset : n_test;
    const size_t row = (size_t)L->f.c * L->f.h * L->f.w;
    L->n_rows = S;
    FH_CHECK(fh_calloc(&L->images, (size_t)S, row, "test rows"));
    FH_CHECK(fh_calloc(&L->labels, (size_t)S, sizeof *L->labels, "test labels"));
    if (S == n_test) return data_partfile_read_rows(&L->f, DATA_ROWS_TEST, 0, n_test, L->images, L->labels);
    /* in blocks of the whole test set, keeping the chosen rows */
    const int64_t block = 4096;
    uint8_t *img = NULL;
    int32_t *lab = NULL;
    int status = fh_calloc(&img, (size_t)block, row, "test block");
    if (status == FH_OK) status = fh_calloc(&lab, (size_t)block, sizeof *lab, "test block labels");
    int64_t j = 0;
    for (int64_t first = 0; first < n_test && status == FH_OK && j < S; first += block) {
        const int64_t count = first + block < n_test ? block : n_test - first;
        status = data_partfile_read_rows(&L->f, DATA_ROWS_TEST, first, count, img, lab);
        for (; status == FH_OK && j < S; j++) {
            const int64_t r = j * n_test / S;
            if (r >= first + count) break;
            memcpy(L->images + (size_t)j * row, img + (size_t)(r - first) * row, row);
            L->labels[j] = lab[r - first];
        }
    }
    fh_free(&img);
    fh_free(&lab);
    return status;
}

/* ---- directions ---------------------------------------------------------------------------------------- */

static void make_direction(Landscape *L, int which, float *d)
{
    const NnModel *m = &L->m;
    memset(d, 0, (size_t)m->n_state * sizeof *d);
    for (int v = 0; v < m->n_views; v++) {
        const NnParamView *pv = &m->views[v];
        if (!pv->trainable) continue; /* buffers stay where the checkpoint has them */
        float *dv = d + pv->offset;
        const float *w = L->center + pv->offset;
        if (pv->ndim <= 1) {
            if (!strcmp(L->o.bias, "weights")) memcpy(dv, w, (size_t)pv->count * sizeof *dv);
            continue;
        }
        FhRng rng;
        fh_rng_init(&rng, (uint64_t)L->o.seed, FH_RNG_PROJECTION, (uint32_t)which, (uint32_t)v, 0);
        for (int64_t i = 0; i < pv->count; i++) dv[i] = (float)fh_rng_normal(&rng);
        /* filter normalisation (Li et al. 2018, Eq. 1): per slice along the first dimension */
        const int64_t filters = pv->dims[0], per = pv->count / filters;
        for (int64_t f = 0; f < filters; f++) {
            double nd = 0, nw = 0;
            for (int64_t i = f * per; i < (f + 1) * per; i++) nd += (double)dv[i] * dv[i], nw += (double)w[i] * w[i];
            const double scale = sqrt(nw) / (sqrt(nd) + 1e-10);
            for (int64_t i = f * per; i < (f + 1) * per; i++) dv[i] = (float)(dv[i] * scale);
        }
    }
}

static double coord(const Landscape *L, int i)
{
    return -L->o.span + 2.0 * L->o.span * i / (L->n_points - 1);
}

/* loss and accuracy of the model whose state is m->state, over the subset */
static int evaluate(Landscape *L, double *loss, double *acc)
{
    NnModel *m = &L->m;
    const int C = L->f.c, HW = L->f.h * L->f.w, classes = L->f.classes;
    const size_t row = (size_t)C * HW;
    double sum = 0;
    int64_t correct = 0;
    for (int64_t first = 0; first < L->n_rows; first += L->o.batch) {
        const int n = (int)(L->n_rows - first < L->o.batch ? L->n_rows - first : L->o.batch);
        for (int i = 0; i < n; i++) {
            const uint8_t *src = L->images + (size_t)(first + i) * row;
            float *dst = L->x + (size_t)i * row;
            for (int ch = 0; ch < C; ch++)
                for (int p = 0; p < HW; p++) dst[ch * HW + p] = L->lut[ch * 256 + src[ch * HW + p]];
        }
        FH_CHECK(nn_model_forward(m, L->x, n));
        const float *logits = nn_model_logits(m);
        memset(L->dlogits, 0, (size_t)n * classes * sizeof *L->dlogits);
        nn_softmax_xent(L->dlogits, L->per_sample, logits, L->labels + first, NULL, NULL, n, classes);
        for (int i = 0; i < n; i++) sum += L->per_sample[i];
        correct += nn_count_correct(L->pred, logits, L->labels + first, n, classes);
    }
    *loss = sum / (double)L->n_rows;
    *acc = (double)correct / (double)L->n_rows;
    return FH_OK;
}

static int compute(Landscape *L, int rank, int size)
{
    const int64_t n_state = L->n_state;
    float *state = L->m.state; /* the model's own vector: overwritten per point */
    const double t0 = fh_time_now();
    double last_print = t0;
    int64_t mine = 0, done = 0;
    for (int64_t p = rank; p < L->n_total; p += size) mine++;
    for (int64_t p = rank; p < L->n_total; p += size) {
        const int i = (int)(p % L->n_points), j = (int)(p / L->n_points);
        const float a = (float)coord(L, i), b = L->o.dims == 2 ? (float)coord(L, j) : 0.0f;
        for (int64_t k = 0; k < n_state; k++) {
            float v = L->center[k] + a * L->dir[0][k];
            if (L->o.dims == 2) v += b * L->dir[1][k];
            state[k] = v;
        }
        FH_CHECK(evaluate(L, &L->loss[p], &L->acc[p]));
        done++;
        const double now = fh_time_now();
        if (rank == 0 && (now - last_print > 5 || done == mine)) {
            const double eta = (now - t0) / done * (mine - done);
            printf("[landscape] %lld/%lld points on rank 0 (%lld in all on %d rank%s), ETA %.0f s\n", (long long)done,
                   (long long)mine, (long long)L->n_total, size, size == 1 ? "" : "s", eta);
            fflush(stdout);
            last_print = now;
        }
    }
    return FH_OK;
}

/* ---- outputs (rank 0) ---------------------------------------------------------------------------------- */

static int write_h5(const Landscape *L, const char *path)
{
    FhH5File f;
    FH_CHECK(fh_h5_create(&f, path, FH_ERR_IO));
    const int P = L->n_points;
    double *axis = malloc((size_t)P * sizeof *axis);
    if (!axis) {
        fh_h5_discard(&f);
        FH_FAIL(FH_ERR_MEMORY, "out of memory");
    }
    for (int i = 0; i < P; i++) axis[i] = coord(L, i);
    const FhH5Layout contiguous = { 0, 0, 0 };
    hsize_t d1[1] = { (hsize_t)P }, d2[2] = { (hsize_t)P, (hsize_t)P };
    const int rank = L->o.dims;
    const hsize_t *dims = rank == 2 ? d2 : d1;
    int status = fh_h5_write(&f, "/alpha", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 1, d1, &contiguous, axis);
    if (status == FH_OK && rank == 2)
        status = fh_h5_write(&f, "/beta", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 1, d1, &contiguous, axis);
    /* loss[j][i] = the point alpha_i, beta_j */
    if (status == FH_OK) status = fh_h5_write(&f, "/loss", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, rank, dims, &contiguous, L->loss);
    if (status == FH_OK)
        status = fh_h5_write(&f, "/accuracy", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, rank, dims, &contiguous, L->acc);
    if (status == FH_OK && L->o.save_directions) {
        hsize_t dd[2] = { (hsize_t)rank, (hsize_t)L->n_state };
        float *both = malloc((size_t)rank * L->n_state * sizeof *both);
        if (!both) status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory");
        else {
            for (int d = 0; d < rank; d++) memcpy(both + (size_t)d * L->n_state, L->dir[d], (size_t)L->n_state * sizeof *both);
            const FhH5Layout chunked = { 1, 4, 0 };
            status = fh_h5_write(&f, "/directions", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 2, dd, &chunked, both);
            free(both);
        }
    }
    free(axis);
    const hid_t root = f.id;
    char params[8192];
    snprintf(params, sizeof params, "dims=%d points=%d span=%g seed=%lld subset=%lld bias=%s data=%s", L->o.dims, P,
             L->o.span, (long long)L->o.seed, (long long)L->n_rows, L->o.bias, L->data_path);
    const int64_t ints[] = { LS_VERSION, L->o.dims, P, L->o.seed, L->n_rows, L->rounds_done, L->n_state };
    const char *names[] = { "format_version", "dims", "points", "seed", "rows", "rounds_done", "n_state" };
    if (status == FH_OK) status = fh_h5_attr_write_string(&f, root, "format", LS_FORMAT);
    for (int i = 0; i < 7 && status == FH_OK; i++) status = fh_h5_attr_write_int64s(&f, root, names[i], &ints[i], 1);
    if (status == FH_OK) status = fh_h5_attr_write_doubles(&f, root, "span", &L->o.span, 1);
    if (status == FH_OK) status = fh_h5_attr_write_string(&f, root, "checkpoint", L->o.checkpoint);
    if (status == FH_OK) status = fh_h5_attr_write_string(&f, root, "model", L->model);
    if (status == FH_OK) status = fh_h5_attr_write_string(&f, root, "data", L->data_path);
    if (status == FH_OK) status = fh_h5_attr_write_string(&f, root, "bias", L->o.bias);
    if (status == FH_OK)
        status = fh_h5_attr_write_string(&f, root, "directions",
                                         "Gaussian (Philox seed, purpose projection, counter (direction, tensor)), "
                                         "filter-normalised (Li et al. 2018); buffers fixed; eval mode");
    if (status == FH_OK) status = fh_h5_attr_write_string(&f, root, "parameters", params);
    if (status == FH_OK) status = fh_h5_attr_write_string(&f, root, "config", L->config);
    if (status == FH_OK) status = fh_h5_commit(&f);
    else fh_h5_discard(&f);
    return status;
}

static int draw(void *ctx, const char *dir, FILE *out, const char *image)
{
    const Landscape *L = ctx;
    const int P = L->n_points;
    char data[4200], cont[4200], title[8400];
    FH_CHECK(fh_path_join(data, sizeof data, dir, "landscape.dat"));
    FH_CHECK(fh_path_join(cont, sizeof cont, dir, "contours.dat"));
    FILE *d = fopen(data, "w");
    if (!d) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", data, strerror(errno));
    if (L->o.dims == 1)
        for (int i = 0; i < P; i++) fprintf(d, "%.10g %.10g %.10g\n", coord(L, i), L->loss[i], L->acc[i]);
    else
        for (int j = 0; j < P; j++) {
            for (int i = 0; i < P; i++) {
                const double v = L->loss[(size_t)j * P + i];
                if (isfinite(v) && v > 0) fprintf(d, "%.10g %.10g %.10g\n", coord(L, i), coord(L, j), log10(v));
                else fprintf(d, "%.10g %.10g ?\n", coord(L, i), coord(L, j));
            }
            fputc('\n', d);
        }
    if (fclose(d) != 0) FH_FAIL(FH_ERR_IO, "%s: write failed", data);
    const double center = L->o.dims == 1 ? L->loss[P / 2] : L->loss[(size_t)(P / 2) * P + P / 2];
    /* the checkpoint's last two path parts: "run/run.h5" */
    const char *shown = L->o.checkpoint + strlen(L->o.checkpoint);
    for (int slashes = 0; shown > L->o.checkpoint; shown--)
        if (shown[-1] == '/' && ++slashes == 2) break;
    snprintf(title, sizeof title, "%s (round %lld): test loss, %s filter-normalised direction%s, %lld rows%s%.4g", shown,
             (long long)L->rounds_done, L->o.dims == 1 ? "one" : "two", L->o.dims == 1 ? "" : "s", (long long)L->n_rows,
             P % 2 ? "; centre " : "", P % 2 ? center : 0.0);
    if (L->o.dims == 1) {
        plot_gp_terminal(out, 900, 600, image);
        fprintf(out, "set title ");
        plot_gp_string(out, title);
        fprintf(out, "\nset xlabel 'alpha'\nset ylabel 'test loss'\nset y2label 'test accuracy'\nset ytics nomirror\n"
                     "set y2tics\nset grid\nset key top center\nplot ");
        plot_gp_string(out, data);
        fprintf(out, " using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc 1 title 'loss', ");
        plot_gp_string(out, data);
        fprintf(out, " using 1:3 axes x1y2 with linespoints lw 1 pt 6 ps 0.6 lc 2 title 'accuracy'\nset output\n");
        return FH_OK;
    }
    /* contour lines first, into a table; then the heat map with the lines on top */
    fprintf(out, "set contour base\nset cntrparam levels auto 12\nunset surface\nset table ");
    plot_gp_string(out, cont);
    fprintf(out, "\nsplot ");
    plot_gp_string(out, data);
    fprintf(out, " using 1:2:3 with lines notitle\nunset table\nunset contour\nset surface\n");
    plot_gp_terminal(out, 900, 760, image);
    fprintf(out, "set title ");
    plot_gp_string(out, title);
    fprintf(out, "\nset xlabel 'alpha (direction 1)'\nset ylabel 'beta (direction 2)'\nset cblabel 'log10 test loss'\n"
                 "set size ratio -1\nset xrange [%g:%g]\nset yrange [%g:%g]\n"
                 "set palette defined (0 '#0d0887', 0.35 '#7e03a8', 0.65 '#e16462', 1 '#f0f921')\n"
                 "set label 1 '' at 0,0 point pointtype 7 pointsize 1.2 lc rgb 'white' front\nplot ",
            -L->o.span, L->o.span, -L->o.span, L->o.span);
    plot_gp_string(out, data);
    fprintf(out, " using 1:2:3 with image notitle, ");
    plot_gp_string(out, cont);
    fprintf(out, " using 1:2 with lines lc rgb 'white' lw 1 notitle\nset output\n");
    return FH_OK;
}

/* ---- the command --------------------------------------------------------------------------------------- */

static void landscape_free(Landscape *L)
{
    free(L->config);
    fh_free(&L->center);
    if (L->m_built) nn_model_free(&L->m);
    fl_run_model_close(&L->run);
    if (L->f_open) data_partfile_close(&L->f);
    fh_free(&L->dir[0]);
    fh_free(&L->dir[1]);
    fh_free(&L->images);
    fh_free(&L->labels);
    fh_free(&L->x);
    fh_free(&L->lut);
    fh_free(&L->dlogits);
    fh_free(&L->per_sample);
    fh_free(&L->pred);
    free(L->loss);
    free(L->acc);
}

/* every rank's status -> the first nonzero one */
static int agree(MPI_Comm comm, int status)
{
    int worst = status, bad = status != FH_OK;
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm);
    if (!any) return FH_OK;
    /* the status of the lowest failing rank, so that every rank returns the same */
    int rank;
    MPI_Comm_rank(comm, &rank);
    int mine = bad ? rank : 1 << 30, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    MPI_Bcast(&worst, 1, MPI_INT, first, comm);
    if (!bad) {
        /* the message is on the failing rank; rank 0 prints it when it is the one */
        if (rank == 0) fh_error_raise(worst, __FILE__, __LINE__, "rank %d failed (its message is on its stderr)", first);
    } else if (rank != 0)
        fprintf(stderr, "fedhet landscape: rank %d: error: %s\n", rank, fh_error_text(worst));
    return worst;
}

/* rank 0: the checkpoint's state through fl's reader, which refuses a file of another model layout */
static int read_state(Landscape *L)
{
    int status = fl_checkpoint_read_global(L->o.checkpoint, &L->m, L->center, &L->rounds_done);
    if (status != FH_ERR_USAGE) return status;
    /* the usual cause: the model was built for another data set's shape */
    char first[2048];
    const char *m = fh_error_message();
    snprintf(first, sizeof first, "%.*s", (int)strcspn(m, "\n"), m);
    FH_FAIL(status, "%s; the model was built for %dx%dx%d inputs and %d classes: is data=%s the run's partition file?",
            first, L->f.c, L->f.h, L->f.w, L->f.classes, L->data_path);
}

static int run(Landscape *L, int rank, int size)
{
    /* rank 0 reads the checkpoint's config; every rank builds the model it describes */
    /* a damaged file is refused, not half-used (fl_checkpoint_verify reads every dataset through) */
    int status = rank == 0 ? fl_checkpoint_verify(L->o.checkpoint) : FH_OK;
    if (status == FH_OK && rank == 0) status = fl_checkpoint_read_config(L->o.checkpoint, &L->config);
    FH_CHECK(agree(L->comm, status));
    int64_t config_len = rank == 0 ? (int64_t)strlen(L->config) + 1 : 0;
    MPI_Bcast(&config_len, 1, MPI_INT64_T, 0, L->comm);
    if (rank != 0) {
        L->config = calloc((size_t)config_len, 1);
        if (!L->config) status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory");
    }
    FH_CHECK(agree(L->comm, status));
    MPI_Bcast(L->config, (int)config_len, MPI_CHAR, 0, L->comm);
    status = setup_model(L);
    if (status == FH_OK) status = fh_alloc_aligned(&L->center, (size_t)L->n_state * sizeof(float), "model state");
    FH_CHECK(agree(L->comm, status));
    /* rank 0 reads the state; everyone gets it */
    FH_CHECK(agree(L->comm, rank == 0 ? read_state(L) : FH_OK));
    MPI_Bcast(&L->rounds_done, 1, MPI_INT64_T, 0, L->comm);
    for (int64_t off = 0; off < L->n_state; off += 1 << 28) {
        int n = (int)(L->n_state - off < (1 << 28) ? L->n_state - off : (1 << 28));
        MPI_Bcast(L->center + off, n, MPI_FLOAT, 0, L->comm);
    }
    status = read_rows(L);
    const size_t row = (size_t)L->f.c * L->f.h * L->f.w;
    if (status == FH_OK) status = fh_alloc_aligned(&L->x, (size_t)L->o.batch * row * sizeof(float), "input batch");
    if (status == FH_OK) status = fh_calloc(&L->lut, (size_t)L->f.c * 256, sizeof *L->lut, "normalisation table");
    if (status == FH_OK)
        status = fh_calloc(&L->dlogits, (size_t)L->o.batch * L->f.classes, sizeof *L->dlogits, "logit gradients");
    if (status == FH_OK) status = fh_calloc(&L->per_sample, (size_t)L->o.batch, sizeof *L->per_sample, "losses");
    if (status == FH_OK) status = fh_calloc(&L->pred, (size_t)L->o.batch, sizeof *L->pred, "predictions");
    for (int d = 0; d < L->o.dims && status == FH_OK; d++)
        status = fh_alloc_aligned(&L->dir[d], (size_t)L->n_state * sizeof(float), "direction");
    L->n_points = L->o.points;
    L->n_total = L->o.dims == 2 ? (int64_t)L->n_points * L->n_points : L->n_points;
    if (status == FH_OK) {
        L->loss = calloc((size_t)L->n_total, sizeof *L->loss);
        L->acc = calloc((size_t)L->n_total, sizeof *L->acc);
        if (!L->loss || !L->acc) status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory");
    }
    FH_CHECK(agree(L->comm, status));
    data_normal_lut(L->lut, &L->f);
    for (int d = 0; d < L->o.dims; d++) make_direction(L, d, L->dir[d]);
    if (rank == 0) {
        printf("[landscape] %s (round %lld): model %s, %lld state values; %lld test rows of %s; %d x %s%d points over "
               "[-%g, %g] on %d rank%s\n", L->o.checkpoint, (long long)L->rounds_done, L->model, (long long)L->n_state,
               (long long)L->n_rows, L->data_path, L->n_points, L->o.dims == 2 ? "" : "1 = ",
               L->o.dims == 2 ? L->n_points : L->n_points, L->o.span, L->o.span, size, size == 1 ? "" : "s");
        fflush(stdout);
    }
    FH_CHECK(agree(L->comm, compute(L, rank, size)));
    /* each point was computed by one rank; the others hold exact zeros there */
    double *sum = rank == 0 ? calloc((size_t)L->n_total, sizeof *sum) : NULL;
    double *sum_acc = rank == 0 ? calloc((size_t)L->n_total, sizeof *sum_acc) : NULL;
    if (rank == 0 && (!sum || !sum_acc)) {
        fprintf(stderr, "fedhet landscape: rank 0: out of memory\n");
        MPI_Abort(L->comm, FH_ERR_IO);
    }
    MPI_Reduce(L->loss, sum, (int)L->n_total, MPI_DOUBLE, MPI_SUM, 0, L->comm);
    MPI_Reduce(L->acc, sum_acc, (int)L->n_total, MPI_DOUBLE, MPI_SUM, 0, L->comm);
    status = FH_OK;
    if (rank == 0) {
        memcpy(L->loss, sum, (size_t)L->n_total * sizeof *sum);
        memcpy(L->acc, sum_acc, (size_t)L->n_total * sizeof *sum_acc);
        free(sum);
        free(sum_acc);
        char dir[4096], h5[4400], png[4400];
        if (*L->o.out) snprintf(dir, sizeof dir, "%s", L->o.out);
        else {
            snprintf(dir, sizeof dir, "%s", L->o.checkpoint);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = '\0';
            else snprintf(dir, sizeof dir, ".");
        }
        status = fh_mkdir_p(dir);
        snprintf(h5, sizeof h5, "%s/%s.h5", dir, L->o.name);
        snprintf(png, sizeof png, "%s/%s.png", dir, L->o.name);
        if (status == FH_OK) status = write_h5(L, h5);
        if (status == FH_OK) status = plot_png(png, draw, L);
        if (status == FH_OK) {
            const int P = L->n_points;
            const int64_t c = L->o.dims == 1 ? P / 2 : (int64_t)(P / 2) * P + P / 2;
            double lo = INFINITY, hi = -INFINITY;
            for (int64_t p = 0; p < L->n_total; p++) {
                if (L->loss[p] < lo) lo = L->loss[p];
                if (L->loss[p] > hi) hi = L->loss[p];
            }
            printf("[landscape] wrote %s and %s: loss from %.4g to %.4g", h5, png, lo, hi);
            if (P % 2) printf("; at the model (centre) %.6g, accuracy %.4f", L->loss[c], L->acc[c]);
            printf("\n");
        }
    }
    MPI_Bcast(&status, 1, MPI_INT, 0, L->comm);
    return status;
}

#define AT(field) FH_CONFIG_AT(LandscapeOptions, field)
static const FhConfigKey keys[] = {
    { .section = "landscape", .key = "dims", .type = FH_CFG_INT, .def.i = 2, .lo = 1, .hi = 2, AT(dims),
      .help = "1: a curve along one direction; 2: a surface over two" },
    { .section = "landscape", .key = "points", .type = FH_CFG_INT, .def.i = 21, .lo = 2, .hi = 1001, AT(points),
      .help = "points per axis (odd: the model itself is the centre point)" },
    { .section = "landscape", .key = "span", .type = FH_CFG_FLOAT, .def.f = 1, .lo = 1e-9, .hi = 1e6, AT(span),
      .help = "coordinates from -span to span, in units of the normalised direction" },
    { .section = "landscape", .key = "seed", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 2147483647, AT(seed),
      .help = "seed of the directions (Philox, purpose projection)" },
    { .section = "landscape", .key = "subset", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 2000000000, AT(subset),
      .help = "test rows used, spread evenly over the test set; 0: all of them" },
    { .section = "landscape", .key = "batch", .type = FH_CFG_INT, .def.i = 500, .lo = 1, .hi = 65536, AT(batch),
      .help = "rows per forward pass" },
    { .section = "landscape", .key = "data", .type = FH_CFG_STRING, AT(data),
      .help = "the partition file; empty: [data] path of the checkpoint's config" },
    { .section = "landscape", .key = "bias", .type = FH_CFG_CHOICE, .def.s = "zero", .choices = "zero|weights",
      AT(bias),
      .help = "1-D tensors (biases, norm weights): zero, or weights (the tensor itself)" },
    { .section = "landscape", .key = "out", .type = FH_CFG_STRING, AT(out),
      .help = "output folder; empty: the checkpoint's folder" },
    { .section = "landscape", .key = "name", .type = FH_CFG_STRING, .def.s = "landscape", AT(name),
      .help = "writes OUT/NAME.h5 (/alpha, /beta, /loss, /accuracy and the settings as attributes) and OUT/NAME.png "
              "(a curve, or a heat map of log10 loss with contours)" },
    { .section = "landscape", .key = "threads", .type = FH_CFG_INT, .def.i = 1, .lo = 1, .hi = 256, AT(threads),
      .help = "OpenBLAS threads per rank" },
    { .section = "landscape", .key = "save_directions", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 1,
      AT(save_directions), .help = "1: also store the two direction vectors (/directions, 2 x model size)" },
};
#undef AT

const FhConfigKey *landscape_keys(int *n)
{
    *n = (int)(sizeof keys / sizeof keys[0]);
    return keys;
}

int landscape_run(const LandscapeOptions *o, MPI_Comm comm)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    Landscape L;
    memset(&L, 0, sizeof L);
    L.o = *o;
    L.comm = comm;
    int status = run(&L, rank, size);
    landscape_free(&L);
    return status;
}
