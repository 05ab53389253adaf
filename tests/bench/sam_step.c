/* SAM-family step benchmark (driven by tests/bench/sam.sh): the time of one local step of each method
 * through the runtime's client loop (fl_client_train: the method's step, correction, report hooks), relative
 * to FedAvg's SGD step of the same model and batch, in one process. The methods take turns in short slices
 * (STEPS steps of one client each) and each keeps its fastest slice, timed in CPU seconds of the process (one
 * thread), so that other work on the machine does not bias the ratios. FedLESAM runs in code mode with a nonzero broadcast direction,
 * so every step perturbs.
 * usage: sam_step PARTITION.h5 MODEL BATCH STEPS SLICES METHOD[:key=choice-index-or-value] ...
 * prints CSV: method,seconds_per_step,ratio_vs_first */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/fl/fl_internal.h"
#include "fedhet/core.h"

/* CPU seconds of this process (one thread): far less disturbed by other processes than wall time */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const char *spec;
    FlSettings s;
    FlClientWork w;
    FlRecordLayout l;
    void *rec;
    float *server_vecs;
    double server_scalars[8], best;
} Bench;

/* "name" or "name:key=value" (a choice by its index) */
static int bench_init(Bench *b, const char *spec, DataPartFile *f, const char *model, int batch, int steps)
{
    char name[64];
    snprintf(name, sizeof name, "%s", spec);
    char *colon = strchr(name, ':');
    if (colon) *colon = '\0';
    memset(b, 0, sizeof *b);
    b->spec = spec;
    b->best = 1e30;
    FlSettings *s = &b->s;
    s->model = model;
    s->norm = "bn";
    s->groups = 2;
    s->optimizer = "sgd";
    s->lr = 0.01;
    s->epochs = 1;
    s->steps = steps;
    s->batch_size = batch;
    s->seed = 1;
    s->selection = "all";
    s->rounds = 10;
    s->method = algo_find(name);
    if (!s->method) FH_FAIL(FH_ERR_USAGE, "no method %s", name);
    algo_options_reset(&s->options, s->method);
    if (!strncmp(name, "fedlesam", 8)) FH_CHECK(algo_option_set(&s->options, s->method, "mode", 1)); /* code */
    if (colon) {
        char *eq = strchr(colon + 1, '=');
        if (!eq) FH_FAIL(FH_ERR_USAGE, "%s: expected key=value", spec);
        *eq = '\0';
        FH_CHECK(algo_option_set(&s->options, s->method, colon + 1, atof(eq + 1)));
    }
    int client = 0;
    FH_CHECK(fl_client_init(&b->w, s, f, &client, 1));
    fl_record_layout(&b->l, &b->w.z, b->w.model.n_state);
    b->rec = calloc(1, b->l.bytes);
    const int64_t n = b->w.model.n_state, nv = b->w.z.server_vectors;
    b->server_vecs = calloc((size_t)(nv > 0 ? nv : 1) * n, sizeof(float));
    for (int64_t j = 0; j < nv * n; j++) b->server_vecs[j] = 1e-3f * (float)((j % 7) - 3);
    b->server_scalars[0] = 20.0;
    if (!b->rec || !b->server_vecs) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    return FH_OK;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s PARTITION.h5 MODEL BATCH STEPS SLICES METHOD ...\n", argv[0]);
        return 1;
    }
    const char *model = argv[2];
    const int batch = atoi(argv[3]), steps = atoi(argv[4]), slices = atoi(argv[5]), n = argc - 6;
    DataPartFile f;
    if (data_partfile_open(&f, argv[1]) != FH_OK) {
        fprintf(stderr, "%s\n", fh_error_message());
        return 1;
    }
    nn_set_threads(1);
    Bench *b = calloc((size_t)n, sizeof *b);
    float *global = NULL;
    for (int i = 0; i < n; i++) {
        if (bench_init(&b[i], argv[6 + i], &f, model, batch, steps) != FH_OK) {
            fprintf(stderr, "%s\n", fh_error_message());
            return 1;
        }
        if (!global) {
            global = malloc((size_t)b[0].w.model.n_state * sizeof(float));
            nn_model_init_params(&b[0].w.model, 1);
            memcpy(global, b[0].w.model.state, (size_t)b[0].w.model.n_state * sizeof(float));
        }
    }
    for (int r = -1; r < slices; r++) /* slice -1: warm-up */
        for (int i = 0; i < n; i++) {
            const double t0 = cpu_now();
            if (fl_client_train(&b[i].w, &b[i].l, global, b[i].server_vecs, b[i].server_scalars, 0, 0, 1 + r % 3, 0.01,
                                b[i].rec) != FH_OK) {
                fprintf(stderr, "%s: %s\n", b[i].spec, fh_error_message());
                return 1;
            }
            const double t = (cpu_now() - t0) / steps;
            if (r >= 0 && t < b[i].best) b[i].best = t;
        }
    printf("method,seconds_per_step,ratio_vs_first\n");
    for (int i = 0; i < n; i++) printf("%s,%.6g,%.4f\n", b[i].spec, b[i].best, b[i].best / b[0].best);
    for (int i = 0; i < n; i++) {
        fl_client_free(&b[i].w);
        free(b[i].rec), free(b[i].server_vecs);
    }
    free(b), free(global);
    data_partfile_close(&f);
    return 0;
}
