/* A raw data set -> a partition file, with the summary `fedhet partition` prints (also used by `fedhet run`
 * when its data file does not exist yet). */
#include "fedhet/data.h"
#include "fedhet/core.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

int data_partition_make(const char *src, const DataSourceOptions *o, const char *dst, DataPartFileSpec *spec,
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
    DataSource *source = NULL;
    const char *format_used = NULL;
    FH_CHECK(data_source_open(&source, &train, &test, src, o, &format_used));
    printf("source      %s (%s): %lld train, %lld test, %dx%dx%d, %d classes%s (%s in %.1f s)\n", src, format_used,
           (long long)train.n, (long long)test.n, train.c, train.h, train.w, train.classes,
           train.n_groups ? ", domains" : "", train.images ? "read" : "listed", fh_time_now() - t0);
    const char *skipped_names;
    int64_t skipped = data_source_skipped(source, &skipped_names);
    if (skipped) printf("skipped     %lld unreadable images (on_error=skip): %s%s\n", (long long)skipped, skipped_names,
                        skipped > 5 ? "; ..." : "");
    if (train.n_groups) {
        printf("domains    ");
        for (int g = 0; g < train.n_groups; g++) printf(" %s", train.group_names[g]);
        printf("\n");
    }
    spec->partition.groups = train.groups;
    spec->partition.n_groups = train.n_groups;

    double mean[256], std[256];
    int status = FH_OK;
    if (train.c > 256) status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %d channels (at most 256)", src, train.c);
    if (status == FH_OK && mean_text) status = parse_channels("mean", mean_text, train.c, -1e30, mean);
    if (status == FH_OK && std_text) status = parse_channels("std", std_text, train.c, 0.0, std);
    if (status == FH_OK && o->normalise && strcmp(o->normalise, "file")) {
        /* named constants; mean= / std= still override them */
        static const double imagenet_mean[3] = { 0.485, 0.456, 0.406 }, imagenet_std[3] = { 0.229, 0.224, 0.225 };
        int imagenet = !strcmp(o->normalise, "imagenet");
        if (imagenet && train.c != 3)
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "normalise=imagenet needs RGB images (these have "
                                    "%d channel%s: set channels=3)", train.c, train.c == 1 ? "" : "s");
        for (int ch = 0; status == FH_OK && ch < train.c; ch++) {
            if (!mean_text) mean[ch] = imagenet ? imagenet_mean[ch] : 0.0;
            if (!std_text) std[ch] = imagenet ? imagenet_std[ch] : 1.0;
        }
        mean_text = std_text = "";
    }
    spec->mean = mean_text ? mean : NULL;
    spec->std = std_text ? std : NULL;
    spec->source = src;
    spec->source_format = format_used;

    DataPartition part = {0};
    double t1 = fh_time_now();
    if (status == FH_OK) status = data_partition(&part, train.labels, train.n, train.classes, &spec->partition);
    if (status == FH_OK && spec->n_corrupted < 0) {
        /* natural partitions: K is known only now (docs/methods/partitions.md B.7: m = round(ratio K)) */
        spec->n_corrupted = (int)lround(spec->corrupted_ratio * part.n_clients);
        spec->partition.n_corrupted = spec->n_corrupted;
    }
    if (status == FH_OK && spec->n_corrupted > part.n_clients)
        status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%d corrupted clients but the partition has %d",
                                spec->n_corrupted, part.n_clients);
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
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            printf("\nwrote       %s (%.1f MiB) in %.1f s; %.1f s in all; peak memory %.1f MiB\n", dst,
                   (double)st.st_size / 1048576.0, fh_time_now() - t2, fh_time_now() - t0, (double)ru.ru_maxrss / 1024.0);
            data_partfile_close(&f);
        }
    }
    data_partition_free(&part);
    data_imageset_free(&train);
    data_imageset_free(&test);
    data_source_close(&source);
    return status;
}
