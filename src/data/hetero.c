/* Heterogeneity statistics of a partition (data.h): how far each client's label distribution is from the
 * pooled one, and how unequal the client sizes are, from the client x label count matrix alone. */
#include "fedhet/data.h"
#include "fedhet/core.h"
#include "hetero_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void data_hetero_free(DataHetero *h)
{
    fh_free(&h->entropy);
    fh_free(&h->effective_classes);
    fh_free(&h->tv);
    fh_free(&h->emd);
    memset(h, 0, sizeof *h);
}

int data_hetero_alloc(DataHetero *h, int K, int classes)
{
    memset(h, 0, sizeof *h);
    h->n_clients = K;
    h->classes = classes;
    int status = fh_calloc(&h->entropy, (size_t)K, sizeof(double), "label entropies");
    if (status == FH_OK) status = fh_calloc(&h->effective_classes, (size_t)K, sizeof(double), "effective classes");
    if (status == FH_OK) status = fh_calloc(&h->tv, (size_t)K, sizeof(double), "total-variation distances");
    if (status == FH_OK) status = fh_calloc(&h->emd, (size_t)K, sizeof(double), "earth mover's distances");
    if (status != FH_OK) data_hetero_free(h);
    return status;
}

/* Gini of sizes from the sorted form: G = 2 sum_i i x_(i) / (K sum x) - (K + 1) / K, i = 1..K, equal to
 * sum_ij |x_i - x_j| / (2 K sum x) */
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Pooled label counts and client sizes (of total rows), with the statistics of every client that has rows. */
static void hetero_fill(DataHetero *h, const int32_t *label_counts, int K, int classes, int64_t total,
                        int64_t *pooled, int64_t *sizes)
{
    for (int k = 0; k < K; k++)
        for (int c = 0; c < classes; c++) {
            int32_t v = label_counts[(size_t)k * classes + c];
            pooled[c] += v, sizes[k] += v;
        }
    for (int k = 0; k < K; k++) {
        if (sizes[k] == 0) {
            /* an empty client has no label distribution */
            h->entropy[k] = h->effective_classes[k] = h->tv[k] = h->emd[k] = NAN;
            continue;
        }
        const int32_t *row = label_counts + (size_t)k * classes;
        const double n = (double)sizes[k], N = (double)total;
        double entropy = 0, tv = 0, emd = 0;
        int64_t cum_client = 0, cum_pooled = 0;
        for (int c = 0; c < classes; c++) {
            double p = row[c] / n, q = pooled[c] / N;
            if (row[c] > 0) entropy -= p * log(p);
            tv += fabs(p - q);
            cum_client += row[c], cum_pooled += pooled[c];
            /* 1-D Wasserstein-1 with |i - j|: the area between the two cumulative distributions */
            if (c + 1 < classes) emd += fabs(cum_client / n - cum_pooled / N);
        }
        h->entropy[k] = entropy;
        h->effective_classes[k] = exp(entropy);
        h->tv[k] = 0.5 * tv;
        h->emd[k] = emd;
    }
    qsort(sizes, (size_t)K, sizeof *sizes, cmp_i64);
    double weighted = 0;
    for (int i = 0; i < K; i++) weighted += (double)(i + 1) * (double)sizes[i];
    h->size_gini = 2.0 * weighted / ((double)K * (double)total) - (double)(K + 1) / K;
    if (h->size_gini < 0) h->size_gini = 0; /* rounding of equal sizes */
}

int data_hetero_compute(DataHetero *h, const int32_t *label_counts, int K, int classes)
{
    memset(h, 0, sizeof *h);
    if (K < 1 || classes < 1) FH_FAIL(FH_ERR_USAGE, "heterogeneity statistics of %d clients x %d classes", K, classes);
    int64_t total = 0;
    for (int k = 0; k < K; k++)
        for (int c = 0; c < classes; c++) {
            int32_t v = label_counts[(size_t)k * classes + c];
            if (v < 0) FH_FAIL(FH_ERR_DATA, "label count of client %d, label %d is %d", k, c, (int)v);
            total += v;
        }
    if (total == 0) FH_FAIL(FH_ERR_DATA, "the partition has no training rows");
    int64_t *pooled = NULL, *sizes = NULL;
    int status = fh_calloc(&pooled, (size_t)classes, sizeof *pooled, "pooled label counts");
    if (status == FH_OK) status = fh_calloc(&sizes, (size_t)K, sizeof *sizes, "client sizes");
    if (status == FH_OK) status = data_hetero_alloc(h, K, classes);
    if (status == FH_OK) hetero_fill(h, label_counts, K, classes, total, pooled, sizes);
    fh_free(&pooled);
    fh_free(&sizes);
    return status;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void data_summary4(const double *v, int n, double out[4])
{
    out[0] = out[1] = out[2] = out[3] = NAN;
    double *finite = malloc((size_t)(n > 0 ? n : 1) * sizeof *finite);
    if (!finite) return;
    int m = 0;
    double sum = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) finite[m++] = v[i], sum += v[i];
    if (m > 0) {
        qsort(finite, (size_t)m, sizeof *finite, cmp_double);
        out[0] = finite[0];
        out[1] = m % 2 ? finite[m / 2] : 0.5 * (finite[m / 2 - 1] + finite[m / 2]);
        out[2] = finite[m - 1];
        out[3] = sum / m;
    }
    free(finite);
}

void data_print_hetero_summary(FILE *out, const DataHetero *h)
{
    const struct {
        const char *label;
        const double *v;
        const char *format;
    } rows[] = {
        { "entropy     label entropy (nats)", h->entropy, "%.3f" },
        { "eff classes exp(entropy)", h->effective_classes, "%.2f" },
        { "TV          to the global label distribution", h->tv, "%.3f" },
        { "EMD         to it, ground distance |i - j| on label index", h->emd, "%.3f" },
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        double s[4];
        char text[4][32];
        data_summary4(rows[r].v, h->n_clients, s);
        for (int i = 0; i < 4; i++) snprintf(text[i], sizeof text[i], rows[r].format, s[i]);
        fprintf(out, "%s: min %s / median %s / max %s / mean %s\n", rows[r].label, text[0], text[1], text[2], text[3]);
    }
    fprintf(out, "size Gini   %.3f (client sizes; 0 = equal, (K - 1) / K = one client holds all)\n", h->size_gini);
}
