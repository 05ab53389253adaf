/* Rounds after the first allocate nothing (docs/architecture.md: memory is sized at setup; the round loop allocates
 * nothing): whole runs of a few rounds, in this process on one rank, with every allocation of ours counted.
 *
 * What is counted: the Makefile links this test with --wrap for malloc, calloc, realloc, aligned_alloc,
 * posix_memalign, strdup and strndup, so every such call from libfedhet.a (core, nn, data, algo, fl) and from
 * this file goes through the counters below. Allocations inside libc (stdio buffers, qsort), Open MPI, HDF5
 * and OpenBLAS, which are shared libraries, are not counted. fl_fault_point is wrapped too: the run calls
 * it at fixed points of every round (tests/mpi/test_crash.sh kills there), which split the count by round.
 * Round t is counted from its "broadcast" point to the next round's (the last round: to the final run.h5
 * write), so it holds its training, aggregation, evaluation, diagnostics and checkpoint. Round 1 may
 * allocate what is made on first use; rounds 2..R must allocate nothing.
 *
 * Every registered method runs with its default keys, and some with keys that take other paths of its hooks (their
 * scratch is sized at setup from the method's sizes: AlgoSizes.client_scratch, server_scratch).
 *
 * Run all:  build/tests/test_round_alloc            Run one:  build/tests/test_round_alloc test_fedavg_diagnostics */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_tmp.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fedhet/algo.h"
#include "fedhet/data.h"
#include "fedhet/fl.h"
#include "fedhet/rng.h"
#include "../../src/fl/eval_metrics.h"

/* Open MPI 4.1 leaks from MPI_Init (see test_checkpoint.c); this test counts allocations, not leaks */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }

/* ---- the counters ---------------------------------------------------------------------------------------- */

enum { MAX_ROUNDS = 16, MAX_SEEN = 4 };

static long n_allocs;            /* every counted call, whenever it happens */
static int round_now = -1;       /* the round being counted; -1 outside rounds */
static const char *phase_now;    /* the last point passed in it */
static long round_allocs[MAX_ROUNDS];
static struct {
    int round;
    const char *phase;
    size_t bytes;
} seen[MAX_SEEN];                /* the first allocations of rounds 2..R, for the message */
static int n_seen;

static void count_alloc(size_t bytes)
{
    __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    const int t = round_now;
    if (t < 0 || t >= MAX_ROUNDS) return;
    round_allocs[t]++;
    if (t > 0 && n_seen < MAX_SEEN) {
        seen[n_seen].round = t;
        seen[n_seen].phase = phase_now;
        seen[n_seen++].bytes = bytes;
    }
}

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *p, size_t size);
void *__real_aligned_alloc(size_t align, size_t size);
int __real_posix_memalign(void **p, size_t align, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_fl_fault_point(const char *point, int rank, int round);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t count, size_t size);
void *__wrap_realloc(void *p, size_t size);
void *__wrap_aligned_alloc(size_t align, size_t size);
int __wrap_posix_memalign(void **p, size_t align, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_fl_fault_point(const char *point, int rank, int round);

void *__wrap_malloc(size_t size) { count_alloc(size); return __real_malloc(size); }
void *__wrap_calloc(size_t count, size_t size) { count_alloc(count * size); return __real_calloc(count, size); }
void *__wrap_realloc(void *p, size_t size) { count_alloc(size); return __real_realloc(p, size); }
void *__wrap_aligned_alloc(size_t align, size_t size) { count_alloc(size); return __real_aligned_alloc(align, size); }
int __wrap_posix_memalign(void **p, size_t align, size_t size)
{
    count_alloc(size);
    return __real_posix_memalign(p, align, size);
}
char *__wrap_strdup(const char *s) { count_alloc(strlen(s) + 1); return __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { count_alloc(n + 1); return __real_strndup(s, n); }

/* The run's round points: "broadcast" opens round `round`; "run.h5" (the final write, before its rename)
 * closes the last. */
int __wrap_fl_fault_point(const char *point, int rank, int round)
{
    if (!strcmp(point, "broadcast")) round_now = round;
    else if (!strcmp(point, "run.h5")) round_now = -1;
    phase_now = point;
    return __real_fl_fault_point(point, rank, round);
}

static void counters_reset(void)
{
    round_now = -1;
    phase_now = "setup";
    memset(round_allocs, 0, sizeof round_allocs);
    n_seen = 0;
}

/* ---- the data and the runs ------------------------------------------------------------------------------- */

/* 6 clients, 4 classes, 8x8 images, a test set and its corrupted copy. The mlp on them has an even state
 * size: with an odd one, a rank's second upload record would start 4 bytes off the alignment of its header. */
static const char *data_path;

static int write_data(void)
{
    const int64_t n = 180, n_test = 40;
    DataImageSet train = { n, 1, 8, 8, 4, malloc((size_t)n * 64), malloc((size_t)n * sizeof(int32_t)), NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL };
    DataImageSet test = { n_test, 1, 8, 8, 4, malloc((size_t)n_test * 64), malloc((size_t)n_test * sizeof(int32_t)), NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL };
    FhRng rng;
    fh_rng_init(&rng, 5, FH_RNG_TEST, 0, 0, 0);
    DataImageSet *sets[2] = { &train, &test };
    for (int s = 0; s < 2; s++)
        for (int64_t i = 0; i < sets[s]->n; i++) {
            sets[s]->labels[i] = (int32_t)(i % 4);
            for (int j = 0; j < 64; j++)
                sets[s]->images[i * 64 + j] = (uint8_t)(fh_rng_below(&rng, 100) + (j / 16 == i % 4 ? 150 : 0));
        }
    DataPartFileSpec spec;
    memset(&spec, 0, sizeof spec);
    spec.partition = (DataPartitionSpec){ "dirichlet", NULL, 6, 0.5, 5, 1, 0, 1000, 2, NULL, 0, NULL, 0 };
    spec.corruption = DATA_CORRUPT_GAUSSIAN_NOISE;
    spec.severity = 3;
    spec.n_corrupted = 2;
    spec.deflate = 1;
    data_path = tmp_path("p6.h5");
    tmp_record(data_path);
    DataPartition part;
    int status = data_partition(&part, train.labels, n, 4, &spec.partition);
    if (status == FH_OK) status = data_partfile_write(data_path, &train, &test, &part, &spec);
    if (status == FH_OK) data_partition_free(&part);
    data_imageset_free(&train);
    data_imageset_free(&test);
    return status;
}

static const char *config_path;

static int write_config(void)
{
    config_path = tmp_path("base.ini");
    tmp_record(config_path);
    FILE *f = fopen(config_path, "w");
    if (!f) return FH_ERR_IO;
    fprintf(f, "[data]\npath = %s\neval_batch = 16\n[model]\nname = mlp\n"
               "[train]\noptimizer = sgd\nlr = 0.05\nmomentum = 0.9\nbatch_size = 16\nepochs = 1\n"
               "[fl]\nrounds = 4\nselection = all\nseed = 3\neval_every = 1\ncheckpoint_every = 1\n"
               "[algo]\nmethod = fedavg\n[output]\ndir = %s\nlog_level = quiet\n", data_path, tmp_root);
    return fclose(f) == 0 ? FH_OK : FH_ERR_IO;
}

/* The files a run leaves in its folder, recorded for tmp_cleanup. */
static void record_run_folder(const char *name)
{
    static const char *const files[] = { "config.ini", "log.txt", "metrics.csv", "clients.csv", "checkpoint.h5",
                                          "run.h5" };
    char path[600];
    snprintf(path, sizeof path, "%.500s/%.60s", tmp_root, name);
    tmp_record(path);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%.500s/%.60s/%s", tmp_root, name, files[i]);
        tmp_record(path);
    }
}

/* Runs the base config with `overrides` (NULL-terminated) in folder `name`; round_allocs holds the counts.
 * resume: continue the folder instead. */
static int run_counted(const char *name, const char *const *overrides, int resume)
{
    char *args[24];
    char name_arg[96];
    int n = 0;
    snprintf(name_arg, sizeof name_arg, "output.name=%s", name);
    if (!resume) args[n++] = name_arg;
    for (; overrides && *overrides && n < 23; overrides++) args[n++] = (char *)*overrides;
    char dir[600];
    snprintf(dir, sizeof dir, "%.500s/%.60s", tmp_root, name);
    FlRunOptions opt = { .config_path = resume ? NULL : config_path, .overrides = args, .n_overrides = n,
                         .force = !resume, .resume_dir = resume ? dir : NULL };
    record_run_folder(name);
    counters_reset();
    const int status = fl_run(&opt, MPI_COMM_WORLD);
    round_now = -1;
    return status;
}

/* rounds [first, rounds) allocated nothing; says which round and phase did otherwise */
static int rounds_allocate_nothing(const char *what, int first, int rounds)
{
    long total = 0;
    for (int t = first; t < rounds && t < MAX_ROUNDS; t++) total += round_allocs[t];
    if (total == 0) return 1;
    printf("\n    %s: ", what);
    for (int t = first; t < rounds && t < MAX_ROUNDS; t++)
        if (round_allocs[t]) printf("round %d made %ld allocations; ", t + 1, round_allocs[t]);
    for (int i = 0; i < n_seen; i++)
        printf("%sround %d after '%s': %zu bytes", i ? ", " : "first: ", seen[i].round + 1, seen[i].phase,
               seen[i].bytes);
    printf("\n");
    return 0;
}

/* ---- the methods ----------------------------------------------------------------------------------------- */

/* A method with some of its keys (or of the run's). */
typedef struct {
    const char *method;
    const char *keys[4];
} MethodCase;

/* every registered method with its default keys, then the keys that take other allocating paths */
static const MethodCase cases[] = {
    { "fedavg", { NULL } },     { "uniform", { NULL } },    { "fedavgm", { NULL } },    { "fedprox", { NULL } },
    { "scaffold", { NULL } },   { "feddyn", { NULL } },     { "fednova", { NULL } },    { "fedcm", { NULL } },
    { "qfedavg", { NULL } },    { "afl", { NULL } },        { "fairfed", { NULL } },    { "fedce", { NULL } },
    { "fedga", { NULL } },      { "fedlw", { NULL } },      { "fednolowe", { NULL } },  { "feddisco", { NULL } },
    { "moon", { NULL } },       { "feddecorr", { NULL } },  { "fedmr", { NULL } },      { "fednp", { NULL } },
    { "fedgkd", { NULL } },     { "flood", { NULL } },      { "fedsam", { NULL } },     { "mofedsam", { NULL } },
    { "fedgamma", { NULL } },   { "fedspeed", { NULL } },   { "fedsmoo", { NULL } },    { "fedlesam", { NULL } },
    { "fedlesam-s", { NULL } }, { "fedlesam-d", { NULL } }, { "fedlwsam", { NULL } },   { "fedism", { NULL } },
    { "fedismplus", { NULL } }, { "fedwmsam", { NULL } },   { "afedsam", { NULL } },    { "fedscam", { NULL } },
    { "fedscam_wa", { NULL } }, { "fedscam_sam", { NULL } },
    { "afl", { "algo.variant=original", "train.steps=1", "train.momentum=0" } },
    { "qfedavg", { "model.name=smallcnn" } }, /* BatchNorm buffers: their own sample weights */
    { "fedmr", { "algo.first_stage=1" } },
    { "fedgkd", { "algo.variant=vote" } },
    { "fedscam", { "algo.cluster=true" } },
    { "flood", { "algo.flood_score=ash-p" } },
    { "fedavg", { "algo.plugin=flood" } },
    { "scaffold", { "algo.plugin=flood", "algo.flood_score=ash-s" } },
};
enum { N_CASES = sizeof cases / sizeof *cases };

static int has_default_case(const char *method)
{
    for (int i = 0; i < N_CASES; i++)
        if (!strcmp(cases[i].method, method) && !cases[i].keys[0]) return 1;
    return 0;
}

/* ---- tests ----------------------------------------------------------------------------------------------- */

/* the wrap reaches the library's own calls (fl_eval_metrics allocates its work arrays) */
static void test_counter_sees_library_allocations(void)
{
    const float logits[4] = { 1, 0, 0, 1 };
    const int32_t labels[2] = { 0, 1 };
    FlEvalMetrics m;
    const long before = n_allocs;
    CHECK_OK(fl_eval_metrics(&m, logits, labels, 2, 2));
    CHECK(n_allocs > before);
}

/* FedAvg with everything a round can do: a partial selection, evaluation on the clean and the corrupted test
 * set every round, checkpoints every round, the sharpness probe from round 2 and the Hessian columns from
 * round 3 (their buffers are made at setup, not on first use) */
static void test_fedavg_diagnostics(void)
{
    const char *const o[] = { "fl.rounds=5", "fl.selection=fraction", "fl.fraction=0.5", "fl.sharpness_every=2",
                              "fl.sharpness_probe=40", "fl.hessian_every=3", "fl.hessian_iters=3",
                              "fl.hessian_samples=2", NULL };
    CHECK_OK(run_counted("fedavg-diag", o, 0));
    CHECK(rounds_allocate_nothing("fedavg", 1, 5));
}

/* Bernoulli selection: a different number of clients every round (the client rows are sized at setup from
 * the run's whole selection plan) */
static void test_bernoulli_selection(void)
{
    const char *const o[] = { "fl.rounds=6", "fl.selection=bernoulli", "fl.fraction=0.4", "fl.eval_every=2",
                              "fl.checkpoint_every=3", NULL };
    CHECK_OK(run_counted("bernoulli", o, 0));
    CHECK(rounds_allocate_nothing("fedavg, bernoulli selection", 1, 6));
}

/* A resumed run with more rounds: its second round on allocates nothing (the client rows hold the
 * checkpoint's rows and the rest of the plan) */
static void test_resumed_run(void)
{
    const char *const first[] = { "fl.rounds=2", "fl.selection=fraction", "fl.fraction=0.5",
                                  "algo.method=fedavgm", NULL };
    CHECK_OK(run_counted("resumed", first, 0));
    const char *const more[] = { "fl.rounds=5", NULL };
    CHECK_OK(run_counted("resumed", more, 1));
    CHECK(rounds_allocate_nothing("fedavgm resumed at round 3", 3, 5));
}

/* every registered method has a case; every case allocates nothing from round 2 on */
static void test_every_method(void)
{
    for (int i = 0; i < algo_count(); i++)
        CHECK_MSG(has_default_case(algo_at(i)->name), "method %s has no case with its default keys", algo_at(i)->name);
    for (int i = 0; i < N_CASES; i++) {
        const MethodCase *mc = &cases[i];
        char method[96], what[256], folder[32];
        snprintf(method, sizeof method, "algo.method=%s", mc->method);
        snprintf(folder, sizeof folder, "case-%d", i);
        int n = snprintf(what, sizeof what, "%s", mc->method);
        const char *o[6] = { method };
        for (int k = 0; k < 4 && mc->keys[k]; k++) {
            o[k + 1] = mc->keys[k];
            n += snprintf(what + n, sizeof what - (size_t)n, " %s", mc->keys[k]);
        }
        const int status = run_counted(folder, o, 0);
        CHECK_MSG(status == FH_OK, "%s: %s", what, fh_error_message());
        if (status == FH_OK) CHECK_MSG(rounds_allocate_nothing(what, 1, 4), "%s allocates in rounds 2..4", what);
    }
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    MPI_Init(&argc, &argv);
    if (tmp_init("round_alloc") != 0 || write_data() != FH_OK || write_config() != FH_OK) {
        printf("cannot make the test data: %s\n0 passed, 1 failed, 0 skipped\n", fh_error_message());
        MPI_Finalize();
        return 1;
    }
    RUN(test_counter_sees_library_allocations);
    RUN(test_fedavg_diagnostics);
    RUN(test_bernoulli_selection);
    RUN(test_resumed_run);
    RUN(test_every_method);
    tmp_cleanup();
    MPI_Finalize();
    return test_summary();
}
