/* fedhet bench: one engine benchmark point. A training step is forward + cross-entropy + backward +
 * SGD(momentum 0.9) step on fixed random data; a SAM step adds the ascent to w + rho g/|g| and a second
 * forward/backward there (BatchNorm running statistics frozen), w itself untouched, before the SGD step.
 * Prints `model,batch,threads,mode,samples_per_s,gflops` with gflops = 3 x forward FLOPs x samples/s (the
 * convention of the PyTorch script beside it, tests/bench/torch_bench.py); --mode both measures the two steps
 * in turns and prints a line for each. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/rng.h"

typedef struct {
    NnModel m;
    NnSgd opt;
    float *input, *dlogits, *saved;
    int32_t *labels;
    int batch, sam;
    float rho;
} BenchCtx;

static void bench_step(BenchCtx *b)
{
    NnModel *m = &b->m;
    size_t nlog = (size_t)b->batch * (size_t)m->classes;
    nn_model_zero_grad(m);
    nn_model_forward(m, b->input, b->batch);
    memset(b->dlogits, 0, sizeof(float) * nlog);
    nn_softmax_xent(b->dlogits, NULL, nn_model_logits(m), b->labels, NULL, NULL, b->batch, m->classes);
    nn_model_backward(m, b->dlogits, NULL);
    if (b->sam) {
        /* the passes of the methods' SAM step (algo/sam.c): fb 2 reads w + eps from beside w */
        const double norm = nn_vec_norm_f64(m->grad, m->n_params);
        float *w = nn_model_perturb_beside(m, b->saved, (float)(b->rho / (norm + 1e-12)), m->grad);
        nn_model_zero_grad(m);
        m->bn_update_running = 0;
        nn_model_forward(m, b->input, b->batch);
        m->bn_update_running = 1;
        memset(b->dlogits, 0, sizeof(float) * nlog);
        nn_softmax_xent(b->dlogits, NULL, nn_model_logits(m), b->labels, NULL, NULL, b->batch, m->classes);
        nn_model_backward(m, b->dlogits, NULL);
        m->state = w;
    }
    nn_sgd_step(&b->opt, m->state, m->grad, 0.01f);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* samples/s of each mode (0: SGD step, 1: SAM step): the median over reps of steps*batch/seconds, each slice
 * calibrated to last about target_s. Several modes take turns within every rep, so that a change in the
 * machine's speed (other tenants, clocks) touches them alike and their ratio holds. */
static void bench_measure(BenchCtx *b, const int *modes, int n_modes, int reps, double target_s, double *rate)
{
    int steps[2];
    double rates[2][16];
    for (int k = 0; k < n_modes; k++) {
        b->sam = modes[k];
        bench_step(b); /* warm-up: first touches of every buffer */
        double t0 = fh_time_now();
        bench_step(b);
        double one = fh_time_now() - t0;
        steps[k] = one > 0 ? (int)(target_s / one) : 1;
        if (steps[k] < 1) steps[k] = 1;
        if (one > 1.0 && reps > 3) reps = 3;
    }
    if (reps > 16) reps = 16;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < n_modes; k++) {
            b->sam = modes[k];
            double t0 = fh_time_now();
            for (int s = 0; s < steps[k]; s++) bench_step(b);
            rates[k][r] = (double)steps[k] * b->batch / (fh_time_now() - t0);
        }
    for (int k = 0; k < n_modes; k++) {
        qsort(rates[k], (size_t)reps, sizeof(double), cmp_double);
        rate[k] = rates[k][reps / 2];
    }
}

/* per-layer forward/backward milliseconds per step, and GFLOP/s of the layers that count FLOPs */
static void bench_profile(BenchCtx *b)
{
    NnModel *m = &b->m;
    const int steps = 10;
    m->profile = 1;
    double t0 = fh_time_now();
    for (int s = 0; s < steps; s++) bench_step(b);
    double total = (fh_time_now() - t0) / steps, layers = 0.0;
    m->profile = 0;
    printf("%-12s %10s %10s %10s %9s\n", "layer", "fwd ms", "bwd ms", "GFLOP/s", "share");
    for (int i = 0; i < m->n_layers; i++) {
        const NnLayer *l = &m->layers[i];
        double f = l->seconds_forward / steps * 1e3, bw = l->seconds_backward / steps * 1e3;
        layers += (f + bw) / 1e3;
        /* a training step does one forward and two backward products (dW, dX) per layer */
        double gf = l->flops ? 3.0 * (double)l->flops * b->batch * (b->sam ? 2 : 1) / ((f + bw) / 1e3) / 1e9 : 0.0;
        char impl[256];
        nn_model_layer_impl(m, i, impl, sizeof impl);
        printf("%-12s %10.3f %10.3f %10.1f %8.1f%%%s%s\n", l->name, f, bw, gf, 100.0 * (f + bw) / 1e3 / total,
               *impl ? "  " : "", impl);
    }
    printf("step %.3f ms: layers %.1f%%, loss + optimiser + bookkeeping %.1f%%\n", total * 1e3,
           100.0 * layers / total, 100.0 * (total - layers) / total);
}

static int bench_sgemm(int n, int threads)
{
    float *a = NULL, *b = NULL, *c = NULL;
    size_t bytes = sizeof(float) * (size_t)n * (size_t)n;
    int status = fh_alloc_aligned(&a, bytes, "sgemm benchmark");
    if (status == FH_OK) status = fh_alloc_aligned(&b, bytes, "sgemm benchmark");
    if (status == FH_OK) status = fh_alloc_aligned(&c, bytes, "sgemm benchmark");
    if (status != FH_OK) {
        fh_free(&a);
        fh_free(&b);
        return status;
    }
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = 1.0f / (float)(1 + i % 7);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double best = 0.0;
    for (int r = 0; r < 5; r++) {
        double t0 = fh_time_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double g = 2.0 * n * (double)n * n / (fh_time_now() - t0) / 1e9;
        if (g > best) best = g;
    }
    printf("sgemm,%d,%d,%.1f\n", n, threads, best);
    fh_free(&a);
    fh_free(&b);
    fh_free(&c);
    return FH_OK;
}

static void print_help(void)
{
    printf("usage: fedhet bench --model M --batch B [--threads T] [--mode sgd|sam|both] [--input CxHxW] [--classes K]\n"
           "                    [--backend onednn|blas|auto] [--reps R] [--seconds S] [--header] [--profile]\n"
           "       fedhet bench --sgemm N [--threads T]\n"
           "  Prints one CSV line: model,batch,threads,mode,samples_per_s,gflops\n"
           "  (median of R reps, default 5, each about S seconds, default 0.5; gflops = 3 x forward FLOPs/sample\n"
           "  x samples/s); --mode both: a line for the SGD step and one for the SAM step, the two taking turns in\n"
           "  every rep so that their ratio holds on a machine whose speed drifts.\n"
           "  --backend: what computes the conv layers (train.backend), onednn by default.\n"
           "  --profile adds a per-layer time table (with oneDNN's implementation of each conv layer under onednn).\n"
           "  --sgemm N prints sgemm,N,threads,gflops for an N x N x N OpenBLAS sgemm (best of 5).\n"
           "  Models: %s, or an ONNX file (FILE.onnx, docs/onnx.md: input shape and classes from the file).\n",
           nn_zoo_names());
}

int app_cmd_bench(int argc, char **argv)
{
    AppModelArgs a;
    app_model_args_default(&a);
    int batch = 0, threads = 1, reps = 5, header = 0, sgemm_n = 0, profile = 0;
    double seconds = 0.5;
    const char *mode = "sgd", *value = NULL;
    for (int i = 1; i < argc; i++) {
        int consumed = 0;
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            print_help();
            return FH_OK;
        }
        FH_CHECK(app_model_args_take(&a, argc, argv, &i, &consumed));
        if (consumed) continue;
        if (!strcmp(opt, "--header") || !strcmp(opt, "--profile")) {
            *(opt[2] == 'h' ? &header : &profile) = 1;
            continue;
        }
        FH_CHECK(app_option_value(argc, argv, &i, &value));
        if (!strcmp(opt, "--batch")) FH_CHECK(app_parse_int(value, "--batch", 1, 1 << 16, &batch));
        else if (!strcmp(opt, "--threads")) FH_CHECK(app_parse_int(value, "--threads", 1, 1024, &threads));
        else if (!strcmp(opt, "--reps")) FH_CHECK(app_parse_int(value, "--reps", 1, 16, &reps));
        else if (!strcmp(opt, "--seconds")) FH_CHECK(app_parse_float(value, "--seconds", 0.01, 60.0, &seconds));
        else if (!strcmp(opt, "--sgemm")) FH_CHECK(app_parse_int(value, "--sgemm", 16, 8192, &sgemm_n));
        else if (!strcmp(opt, "--mode")) {
            if (strcmp(value, "sgd") && strcmp(value, "sam") && strcmp(value, "both"))
                FH_FAIL(FH_ERR_USAGE, "--mode: '%s' must be sgd, sam or both", value);
            mode = value;
        } else FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet bench --help)", opt);
    }
    nn_set_threads(threads);
    if (sgemm_n) return bench_sgemm(sgemm_n, threads);
    if (!a.model) FH_FAIL(FH_ERR_USAGE, "--model NAME is required (one of %s, or FILE.onnx)", nn_zoo_names());
    if (!batch) FH_FAIL(FH_ERR_USAGE, "--batch B is required");
    FH_CHECK(app_model_args_check(&a));

    BenchCtx b;
    memset(&b, 0, sizeof b);
    b.batch = batch;
    const int both = !strcmp(mode, "both"), modes[2] = { both ? 0 : !strcmp(mode, "sam"), 1 };
    const int n_modes = both ? 2 : 1;
    b.rho = 0.05f;
    int status = nn_zoo_build(&b.m, a.model, a.input, a.classes, batch, &a.zoo);
    NnModel *m = &b.m;
    int64_t n_in = (int64_t)batch * a.input.c * a.input.h * a.input.w;
    if (status == FH_OK) {
        nn_model_init_params(m, 1);
        status = nn_sgd_init(&b.opt, m->n_params, 0.9f, 0.0f, 0);
    }
    if (status == FH_OK) status = fh_alloc_aligned(&b.input, sizeof(float) * (size_t)n_in, "benchmark input");
    if (status == FH_OK) status = fh_calloc(&b.labels, (size_t)batch, sizeof(int32_t), "benchmark labels");
    if (status == FH_OK)
        status = fh_alloc_aligned(&b.dlogits, sizeof(float) * (size_t)batch * (size_t)a.classes, "benchmark dlogits");
    if (status == FH_OK && modes[n_modes - 1])
        status = fh_alloc_aligned(&b.saved, sizeof(float) * (size_t)m->n_state, "SAM copy");
    if (status == FH_OK) {
        FhRng rng;
        fh_rng_init(&rng, 1, FH_RNG_TEST, 0, 0, 0);
        for (int64_t i = 0; i < n_in; i++) b.input[i] = (float)fh_rng_normal(&rng);
        for (int i = 0; i < batch; i++) b.labels[i] = (int32_t)fh_rng_below(&rng, (uint64_t)a.classes);
        double rate[2];
        bench_measure(&b, modes, n_modes, reps, seconds, rate);
        if (header) printf("model,batch,threads,mode,samples_per_s,gflops\n");
        for (int k = 0; k < n_modes; k++)
            printf("%s,%d,%d,%s,%.1f,%.3f\n", a.model, batch, threads, modes[k] ? "sam" : "sgd", rate[k],
                   3.0 * (double)nn_model_flops_forward(m) * rate[k] / 1e9);
        if (profile) bench_profile(&b);
    }
    nn_sgd_free(&b.opt);
    fh_free(&b.input);
    fh_free(&b.labels);
    fh_free(&b.dlogits);
    fh_free(&b.saved);
    nn_model_free(m);
    return status;
}
