/* FLOOD (docs/methods/sam.md §13, docs/methods/baselines.md A.23): adaptive sample weighting of pseudo-OOD samples
 * (ASW) during local training and dynamic aggregation correction (DAC) on the server. A method of its own
 * (FedAvg + FLOOD) and a plug-in (`[algo] plugin = flood`) on top of other methods. */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

enum { SCORE_ENERGY, SCORE_MSP, SCORE_MAXLOGIT, SCORE_GEN, SCORE_ASH_P, SCORE_ASH_B, SCORE_ASH_S };
enum { SCHED_AUTO, SCHED_COSINE, SCHED_LINEAR, SCHED_QUADRATIC, SCHED_EXPONENTIAL, SCHED_LOGISTIC, SCHED_CONSTANT };
enum { COMPAT_PAPER, COMPAT_CODE };

#define FLOOD_MAX_CLASSES 1024
typedef struct {
    int flood_score;
    double flood_q, flood_a;
    int flood_halt, flood_schedule, flood_start;
    double flood_alpha;
    int flood_compat, flood_dac_shift;
    double flood_lambda, flood_ash_percentile;
} FloodOptions;
static const AlgoOption flood_keys[] = {
    { ALGO_CHOICE(FloodOptions, flood_score), .def.s = "energy", .choices = "energy|msp|maxlogit|gen|ash-p|ash-b|ash-s",
      .help = "OOD score of ASW and phi (higher = more in-distribution): energy (T = 1, paper and code), msp, maxlogit, "
              "gen (gamma 0.1, top 10), or the paper's Table VI ASH scores (docs/methods/sam.md §13; not in the released code): the "
              "classifier's input a (the penultimate activation) pruned below its flood_ash_percentile-th percentile "
              "(ash-p), the kept values then set to sum(a)/kept (ash-b) or scaled by exp(sum a / sum kept) (ash-s), "
              "scored by the energy of the classifier on it; training logits are unchanged" },
    { ALGO_NUMBER(FloodOptions, flood_q), .def.f = 0.7, .lo = 0, .hi = 1, .lo_open = 1, .hi_open = 1,
      .help = "batch quantile below which samples are pseudo-OOD (lower interpolation; 0.7: about 70 % of each batch)" },
    { ALGO_NUMBER(FloodOptions, flood_a), .def.f = 0, .lo = 0, .hi = 1e6,
      .help = "schedule amplitude a (lambda ends at 2a); 0: by compat (paper 200, code 50)" },
    { ALGO_INT(FloodOptions, flood_halt), .def.i = 1000, .lo = 1, .hi = 1e9,
      .help = "halt round T_h after which lambda stays 2a (paper and code 1000)" },
    { ALGO_CHOICE(FloodOptions, flood_schedule), .def.s = "auto",
      .choices = "auto|cosine|linear|quadratic|exponential|logistic|constant",
      .help = "lambda schedule; auto: by compat (paper cosine, code logistic); constant: flood_lambda every round" },
    { ALGO_INT(FloodOptions, flood_start), .def.i = 0, .lo = 0, .hi = 1e9,
      .help = "start phase: lambda = 1 up to this round (0: the code's timing)" },
    { ALGO_NUMBER(FloodOptions, flood_alpha), .def.f = 0.5, .lo = 0, .hi = 1e6,
      .help = "DAC weight of the confidence term (paper and code 0.5; 0: FedAvg weights)" },
    { ALGO_CHOICE(FloodOptions, flood_compat), .def.s = "paper", .choices = "paper|code",
      .help = "defaults of amplitude and schedule: paper (cosine, a = 200) or the released code (logistic, a = 50)" },
    { ALGO_BOOL(FloodOptions, flood_dac_shift), .def.b = 0,
      .help = "shift the participants' phi by -min + 1e-6 before normalising (scores that can be negative)" },
    { ALGO_NUMBER(FloodOptions, flood_lambda), .def.f = 1, .lo = 0, .hi = 1e6,
      .help = "the weight of pseudo-OOD samples with flood_schedule = constant" },
    { ALGO_NUMBER(FloodOptions, flood_ash_percentile), .def.f = 90, .lo = 0, .hi = 100,
      .help = "ASH's pruning percentile p (flood_score = ash-*): values below the p-th percentile of a sample's "
              "penultimate activation (lower interpolation) are zeroed; docs/methods/sam.md §13 default 90" },
};
static const AlgoOptionPart flood_options = ALGO_OPTION_PART("flood", FloodOptions, flood_keys);
ALGO_OPTIONS_OF(flood_of, FloodOptions, flood_options)
enum { UP_PHI }; /* the upload scalar: phi_i (the fl layer hands a plug-in its own upload scalars) */

#define PI 3.14159265358979323846

/* Higher = more in-distribution (A.23). Energy with T = 1; GEN with gamma 0.1 over the top min(10, C). */
double algo_ood_score(int score, const float *z, int classes)
{
    double zmax = z[0];
    for (int k = 1; k < classes; k++)
        if (z[k] > zmax) zmax = z[k];
    if (score == SCORE_MAXLOGIT) return zmax;
    double sum = 0.0;
    for (int k = 0; k < classes; k++) sum += exp((double)z[k] - zmax);
    if (score == SCORE_ENERGY) return zmax + log(sum);
    if (score == SCORE_MSP) return 1.0 / sum; /* exp(zmax - zmax) / sum */
    /* GEN: the M largest probabilities, by repeated selection (C is small) */
    double p[FLOOD_MAX_CLASSES];
    const int n = classes < FLOOD_MAX_CLASSES ? classes : FLOOD_MAX_CLASSES;
    for (int k = 0; k < n; k++) p[k] = exp((double)z[k] - zmax) / sum;
    const int M = n < 10 ? n : 10;
    const double g = 0.1;
    double gen = 0.0;
    for (int j = 0; j < M; j++) {
        int best = j;
        for (int k = j + 1; k < n; k++)
            if (p[k] > p[best]) best = k;
        double t = p[j];
        p[j] = p[best];
        p[best] = t;
        gen += pow(p[j], g) * pow(1.0 - p[j], g);
    }
    return -gen;
}

/* x[i] moved down the max-heap x[0..n) to its place */
static void sift_down(double *x, int64_t i, int64_t n)
{
    for (;;) {
        const int64_t left = 2 * i + 1, right = left + 1;
        int64_t top = i;
        if (left < n && x[left] > x[top]) top = left;
        if (right < n && x[right] > x[top]) top = right;
        if (top == i) return;
        const double v = x[i];
        x[i] = x[top];
        x[top] = v;
        i = top;
    }
}

/* The k-th smallest of x[0..n) (from 0: x[k] once sorted ascending), in place (x is left permuted): a max-heap of
 * all n, whose n - 1 - k largest are moved out, leaves it on top. An ascending sort (qsort, which may allocate)
 * picks a value equal to it: the same number, or a zero of the other sign, which no comparison tells apart. */
static double kth_smallest(double *x, int64_t n, int64_t k)
{
    for (int64_t i = n / 2; i-- > 0;) sift_down(x, i, n);
    for (int64_t end = n - 1; end > k; end--) {
        const double v = x[0];
        x[0] = x[end];
        x[end] = v;
        sift_down(x, 0, end);
    }
    return x[0];
}

/* ASH (docs/methods/sam.md §13): a [D] the penultimate activation; t its p-th percentile (lower interpolation, as the batch
 * quantile); values below t pruned; ASH-B sets the kept ones to s1/k, ASH-S scales them by exp(s1/s2) (s1 the
 * sum before pruning, s2 after, k the count kept; s2 = 0 scores as ASH-P); Energy of W a' + b. Sums in double.
 * work: D doubles of scratch. */
double algo_ash_score(int variant, const float *a, int64_t D, const float *W, const float *b, int classes, double p,
                      double *work)
{
    for (int64_t j = 0; j < D; j++) work[j] = a[j];
    const float t = (float)kth_smallest(work, D, (int64_t)floor(p / 100.0 * (double)(D - 1)));
    double s1 = 0.0, s2 = 0.0;
    int64_t kept = 0;
    for (int64_t j = 0; j < D; j++) {
        s1 += a[j];
        if (a[j] >= t) s2 += a[j], kept++;
    }
    /* every kept value becomes value * scale + shift */
    double scale = 1.0, shift = 0.0;
    if (variant == SCORE_ASH_B) scale = 0.0, shift = s1 / (double)kept;
    else if (variant == SCORE_ASH_S && s2 != 0.0) scale = exp(s1 / s2);
    double zmax = -INFINITY, z[FLOOD_MAX_CLASSES];
    for (int k = 0; k < classes; k++) {
        const float *wk = W + (int64_t)k * D;
        double acc = 0.0;
        for (int64_t j = 0; j < D; j++)
            if (a[j] >= t) acc += (double)wk[j] * ((double)a[j] * scale + shift);
        z[k] = acc + (b ? (double)b[k] : 0.0);
        if (z[k] > zmax) zmax = z[k];
    }
    double sum = 0.0;
    for (int k = 0; k < classes; k++) sum += exp(z[k] - zmax);
    return zmax + log(sum);
}

static int is_ash(int score) { return score >= SCORE_ASH_P; }

/* The model's classifier: the linear layer from the features to the logits (ASH reshapes its input). */
static int ash_classifier(const NnModel *m, const NnLayer **out)
{
    for (int i = 0; i < m->n_layers; i++) {
        const NnLayer *l = &m->layers[i];
        if (l->type == NN_OP_LINEAR && l->in == m->features && l->out == m->logits) {
            *out = l;
            return FH_OK;
        }
    }
    FH_FAIL(FH_ERR_USAGE, "[algo] flood_score = ash-p|ash-b|ash-s shapes the classifier's input, but model %s has no "
            "linear layer from its features to its logits: choose energy, msp, maxlogit or gen", m->arch);
}

/* Scores of a batch's samples into sc[count]: from the logits, or ASH from the features through `model`'s
 * classifier at model->state (with feature_size doubles of scratch) */
static int batch_scores(const FloodOptions *o, const NnModel *model, const AlgoBatch *b, double *sc,
                        AlgoScratch scratch)
{
    const int score = o->flood_score;
    if (!is_ash(score)) {
        for (int i = 0; i < b->count; i++) sc[i] = algo_ood_score(score, b->logits + (int64_t)i * b->classes, b->classes);
        return FH_OK;
    }
    const NnLayer *l = NULL;
    FH_CHECK(ash_classifier(model, &l));
    double *work = algo_scratch_take(&scratch, (size_t)b->feature_size, sizeof *work, "ASH's percentile");
    const float *W = model->state + l->w_off, *bias = l->b_off >= 0 ? model->state + l->b_off : NULL;
    for (int i = 0; i < b->count; i++)
        sc[i] = algo_ash_score(score, b->features + (int64_t)i * b->feature_size, b->feature_size, W, bias, b->classes,
                               o->flood_ash_percentile, work);
    return FH_OK;
}

/* client scratch: a batch's scores and the copy its quantile permutes (flood_weigh), then batch_scores's */
static void flood_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    algo_upload_named(z, UP_PHI, "phi", ALGO_SHOW_CLIENT);
    z->client_scratch = 2 * algo_scratch_bytes((size_t)s->batch_size, sizeof(double));
    if (is_ash(flood_of(s->options)->flood_score))
        z->client_scratch += algo_scratch_bytes((size_t)s->feature_size, sizeof(double));
}

/* The amplitude and schedule after `compat`: the paper's cosine with a = 200, the code's logistic with a = 50. */
static double amplitude(const FloodOptions *o)
{
    return o->flood_a > 0 ? o->flood_a : o->flood_compat == COMPAT_CODE ? 50.0 : 200.0;
}

static int schedule(const FloodOptions *o)
{
    if (o->flood_schedule != SCHED_AUTO) return o->flood_schedule;
    return o->flood_compat == COMPAT_CODE ? SCHED_LOGISTIC : SCHED_COSINE;
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* f(t) of section 13 for t in [0, T_h]; every schedule ends at 2a */
static double schedule_value(int kind, double a, double t, double T)
{
    switch (kind) {
    case SCHED_LINEAR: return 2 * a * t / T;
    case SCHED_QUADRATIC: return 2 * a * (t / T) * (t / T);
    case SCHED_EXPONENTIAL: return 2 * a * (1 - exp(-5.0 * t)) / (1 - exp(-5.0 * T));
    case SCHED_LOGISTIC: {
        const double s = 10.0;
        return 2 * a * (sigmoid(s * (t - T / 2)) - sigmoid(-s * T / 2)) / (sigmoid(s * T / 2) - sigmoid(-s * T / 2));
    }
    default: return a * (1 - cos(PI * t / T));
    }
}

/* lambda_t with the code's timing: 1 up to round t_start, then f(min(t - 1 - t_start, T_h)) */
double algo_flood_lambda(AlgoOptions flood, int round)
{
    const FloodOptions *o = flood_of(flood);
    if (schedule(o) == SCHED_CONSTANT) return o->flood_lambda;
    if (round <= o->flood_start) return 1.0;
    const double halt = (double)o->flood_halt;
    double t = (double)(round - 1 - o->flood_start);
    if (t > halt) t = halt;
    return schedule_value(schedule(o), amplitude(o), t, halt);
}

/* ASW: samples scoring below the batch's lower-interpolated q-quantile get weight lambda_t, the others 1 */
static int flood_weigh(AlgoClientCtx *c, const AlgoBatch *b, float *weights)
{
    AlgoScratch scratch = c->state.scratch;
    double *sc = algo_scratch_take(&scratch, (size_t)b->count, sizeof *sc, "FLOOD's batch scores"),
           *copy = algo_scratch_take(&scratch, (size_t)b->count, sizeof *copy, "FLOOD's batch quantile");
    const FloodOptions *o = flood_of(c->round->options);
    FH_CHECK(batch_scores(o, c->model, b, sc, scratch));
    memcpy(copy, sc, (size_t)b->count * sizeof *copy);
    const double tau = kth_smallest(copy, b->count, (int64_t)floor(o->flood_q * (double)(b->count - 1)));
    const float lambda = (float)algo_flood_lambda(c->round->options, c->round->t);
    for (int i = 0; i < b->count; i++) weights[i] = sc[i] < tau ? lambda : 1.0f;
    return FH_OK;
}

typedef struct {
    const FloodOptions *options;
    const NnModel *model;
    AlgoScratch scratch;
    double sum;
    int64_t n;
} ScoreSum;

static int add_scores(void *env, const AlgoBatch *b)
{
    ScoreSum *s = env;
    AlgoScratch scratch = s->scratch;
    double *sc = algo_scratch_take(&scratch, (size_t)b->count, sizeof *sc, "FLOOD's scores");
    const int status = batch_scores(s->options, s->model, b, sc, scratch);
    for (int i = 0; status == FH_OK && i < b->count; i++) s->sum += sc[i];
    s->n += b->count;
    return status;
}

/* phi_i: mean score of the trained local model over the local training set, eval mode, no augmentation */
static int flood_end(AlgoClientCtx *c)
{
    ScoreSum s = { flood_of(c->round->options), c->model, c->state.scratch, 0.0, 0 };
    FH_CHECK(c->svc->for_each_local_batch(c, c->model, c->model->state, add_scores, &s));
    c->state.upload_scalars[UP_PHI] = s.n ? s.sum / (double)s.n : 0.0;
    return FH_OK;
}

/* DAC: p_i proportional to n_i/N + alpha phi_i/Phi, written as n_i + alpha N phi_i / Phi so that alpha = 0
 * gives FedAvg's weights exactly; dac_shift moves the participants' phi to be positive first. */
static int flood_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    const FloodOptions *o = flood_of(s->options);
    const double alpha = o->flood_alpha;
    double N = 0.0, Phi = 0.0, lo = INFINITY;
    for (int i = 0; i < m; i++) {
        /* a local model whose logits overflow in evaluation mode (large lambda_t, batch-norm running statistics)
         * has diverged: no shift of the scores mends that */
        if (alpha != 0.0 && !isfinite(u[i].scalars[UP_PHI]))
            FH_FAIL(FH_ERR_NUMERIC, "round %d: client %lld's FLOOD confidence score phi is %g: its local model "
                    "diverged (non-finite logits in evaluation mode; lambda_t = %g this round)", s->round + 1,
                    (long long)u[i].client, u[i].scalars[UP_PHI], algo_flood_lambda(s->options, s->round));
        N += (double)u[i].n_samples;
        if (u[i].scalars[UP_PHI] < lo) lo = u[i].scalars[UP_PHI];
    }
    const double shift = o->flood_dac_shift ? -lo + 1e-6 : 0.0;
    for (int i = 0; i < m; i++) Phi += u[i].scalars[UP_PHI] + shift;
    for (int i = 0; i < m; i++) {
        p[i] = (double)u[i].n_samples;
        if (alpha != 0.0) {
            if (!(Phi != 0.0) || !isfinite(Phi))
                FH_FAIL(FH_ERR_NUMERIC, "round %d: FLOOD's confidence scores sum to %g (set algo.flood_dac_shift = true "
                        "for scores that can be negative)", s->round + 1, Phi);
            p[i] += alpha * N * (u[i].scalars[UP_PHI] + shift) / Phi;
        }
        if (p[i] < 0) p[i] = 0; /* code-literal sums of negative scores can invert a weight */
    }
    return FH_OK;
}

static int flood_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    if (s->classes > FLOOD_MAX_CLASSES)
        return algo_refuse(m, "FLOOD's scores support at most %d classes (the data has %d)", FLOOD_MAX_CLASSES, s->classes);
    return FH_OK;
}

/* Hosts whose aggregation is their method (AlgoMethod.aggregation_is_method): DAC would replace it. */
static const char *flood_refuse(const AlgoMethod *host, AlgoOptions host_options)
{
    static char why[320];
    if (!host->aggregation_is_method) return NULL;
    snprintf(why, sizeof why, "%s; DAC would replace it", host->aggregation_is_method);
    return why;
}

static const AlgoSampleWeights flood_asw = { flood_weigh };
static const AlgoClientReport flood_report = { NULL, flood_end };
static const AlgoServerWeights flood_dac = { .weights = flood_weights, .rule = "FLOOD's DAC (confidence)" };

const AlgoMethod algo_family_flood[] = {
    {
        .name = "flood",
        .summary = "FLOOD: pseudo-OOD sample weighting (ASW) and confidence-corrected aggregation (DAC); also a plug-in",
        .source = "docs/methods/sam.md §13, docs/methods/baselines.md A.23",
        .state = "- | lambda_t (computed from the round; metrics.csv method_scalar)",
        .payload = "down 1, up 1 + phi_i (clients.csv phi)",
        .sample_weights = &flood_asw,
        .report = &flood_report,
        .weights = &flood_dac,
        .validate = flood_validate,
        .sizes = flood_sizes,
        .plugin = 1,
        .plugin_refuse = flood_refuse,
        .round_scalar = algo_flood_lambda,
        .n_upload_scalars = 1,
        .parts = { &flood_options },
    },
};
const int algo_family_flood_count = sizeof algo_family_flood / sizeof algo_family_flood[0];
