/* A raw data set -> a partition file, with the summary `fedhet partition` prints (also used by `fedhet run`
 * when its data file does not exist yet). */
#include "fedhet/data.h"
#include "fedhet/core.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* "0.1,0.2,0.3" -> channels values, each > lo_exclusive */
static int parse_channels(const char *key, const char *text, int channels, double lo_exclusive, double *out)
{
    const char *p = text;
    for (int ch = 0; ch < channels; ch++) {
        char *end = NULL;
        errno = 0;
        out[ch] = strtod(p, &end);
        if (errno || end == p || !isfinite(out[ch]) || !(out[ch] > lo_exclusive))
            FH_FAIL(FH_ERR_USAGE, "%s=%s: need %d comma-separated numbers above %g (one per channel)", key, text,
                    channels, lo_exclusive);
        p = end;
        if (ch + 1 < channels) {
            if (*p != ',')
                FH_FAIL(FH_ERR_USAGE, "%s=%s: need %d comma-separated values (one per channel)", key, text, channels);
            p++;
        }
    }
    if (*p) FH_FAIL(FH_ERR_USAGE, "%s=%s: need exactly %d values (one per channel)", key, text, channels);
    return FH_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* min / median (v[n / 2]) / max of n values, sorted in place */
static void spread(int64_t *v, int n, int64_t out[3])
{
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    out[0] = v[0];
    out[1] = v[n / 2];
    out[2] = v[n - 1];
}

void data_print_client_spread(FILE *out, const int64_t *offsets, const int32_t *label_counts, int K, int classes)
{
    int64_t *sizes = malloc((size_t)K * sizeof *sizes), *present = calloc((size_t)K, sizeof *present);
    if (!sizes || !present) {
        free(sizes), free(present);
        return;
    }
    for (int k = 0; k < K; k++) {
        sizes[k] = offsets[k + 1] - offsets[k];
        for (int c = 0; c < classes; c++) present[k] += label_counts[(size_t)k * classes + c] > 0;
    }
    int64_t sz[3], cl[3];
    spread(sizes, K, sz);
    spread(present, K, cl);
    fprintf(out, "clients     %d: samples min %lld / median %lld / max %lld; classes per client min %lld / median %lld / "
            "max %lld\n", K, (long long)sz[0], (long long)sz[1], (long long)sz[2], (long long)cl[0], (long long)cl[1],
            (long long)cl[2]);
    free(sizes), free(present);
}

static void print_summary(const DataPartition *part, const DataImageSet *train, const DataPartFileSpec *spec)
{
    const int K = part->n_clients;
    int32_t *counts = calloc((size_t)K * train->classes, sizeof *counts);
    if (!counts) return;
    for (int k = 0; k < K; k++)
        for (int64_t r = part->offsets[k]; r < part->offsets[k + 1]; r++)
            counts[(size_t)k * train->classes + train->labels[part->indices[r]]]++;
    data_print_client_spread(stdout, part->offsets, counts, K, train->classes);
    DataHetero h;
    if (data_hetero_compute(&h, counts, K, train->classes) == FH_OK) {
        data_print_hetero_summary(stdout, &h);
        data_hetero_free(&h);
    } else fh_error_clear(); /* the writer computes them again and reports the failure */
    free(counts);
    if (spec->n_corrupted > 0)
        printf("corrupted   clients %d..%d (%d of %d): %s severity %d, and a corrupted copy of the test set\n",
               K - spec->n_corrupted, K - 1, spec->n_corrupted, K, data_corruption_name(spec->corruption),
               spec->severity);
    else printf("corrupted   none\n");
}

/* mkdir -p of path's folder */
static int make_parent_dirs(const char *path)
{
    char dir[FH_PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) FH_FAIL(FH_ERR_USAGE, "%s: path too long", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return FH_OK;
    *slash = '\0';
    return fh_mkdir_p(dir);
}

int data_partition_make(const char *src, const char *format, int idx_classes, const char *dst, DataPartFileSpec *spec,
                        const char *mean_text, const char *std_text)
{
    /* the destination is replaced at the end (atomic rename): it must be neither the source, under its own
     * name or another (a hard or symbolic link), nor a link that would redirect the write */
    struct stat st_dst, st_src;
    if (lstat(dst, &st_dst) == 0 && S_ISLNK(st_dst.st_mode))
        FH_FAIL(FH_ERR_USAGE, "%s is a symbolic link: fedhet partition does not write through it (name another "
                "file)", dst);
    if (stat(dst, &st_dst) == 0 && stat(src, &st_src) == 0 && st_dst.st_dev == st_src.st_dev &&
        st_dst.st_ino == st_src.st_ino)
        FH_FAIL(FH_ERR_USAGE, "%s is the source %s itself: its partition would replace the data it is made from "
                "(name another destination)", dst, src);
    double t0 = fh_time_now();
    DataImageSet train, test;
    const char *format_used = NULL;
    FH_CHECK(data_source_read(&train, &test, src, format, idx_classes, &format_used));
    printf("source      %s (%s): %lld train, %lld test, %dx%dx%d, %d classes (read in %.1f s)\n", src, format_used,
           (long long)train.n, (long long)test.n, train.c, train.h, train.w, train.classes, fh_time_now() - t0);

    double mean[256], std[256];
    int status = FH_OK;
    if (train.c > 256) status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %d channels (at most 256)", src, train.c);
    if (status == FH_OK && mean_text) status = parse_channels("mean", mean_text, train.c, -1e30, mean);
    if (status == FH_OK && std_text) status = parse_channels("std", std_text, train.c, 0.0, std);
    spec->mean = mean_text ? mean : NULL;
    spec->std = std_text ? std : NULL;
    spec->source = src;
    spec->source_format = format_used;

    DataPartition part = {0};
    double t1 = fh_time_now();
    if (status == FH_OK) status = data_partition(&part, train.labels, train.n, train.classes, &spec->partition);
    if (status == FH_OK) {
        printf("partition   %s (%.1f s)\n", spec->parameters ? spec->parameters : "", fh_time_now() - t1);
        print_summary(&part, &train, spec);
        status = make_parent_dirs(dst);
    }
    double t2 = fh_time_now();
    if (status == FH_OK) status = data_partfile_write(dst, &train, &test, &part, spec);
    if (status == FH_OK) {
        DataPartFile f;
        status = data_partfile_open(&f, dst);
        if (status == FH_OK) {
            printf("mean / std ");
            for (int ch = 0; ch < f.c; ch++) printf(" %.4f / %.4f", f.mean[ch], f.std[ch]);
            struct stat st;
            stat(dst, &st);
            printf("\nwrote       %s (%.1f MiB) in %.1f s; %.1f s in all\n", dst, (double)st.st_size / 1048576.0,
                   fh_time_now() - t2, fh_time_now() - t0);
            data_partfile_close(&f);
        }
    }
    data_partition_free(&part);
    data_imageset_free(&train);
    data_imageset_free(&test);
    return status;
}
