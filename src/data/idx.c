/* IDX dataset reader (the MNIST / Fashion-MNIST file format) and the uint8 -> float normalisation.
 *
 * An IDX file is a 4-byte big-endian magic (0x0000 TT DD: TT = element type, 0x08 = uint8; DD = number of
 * dims), DD big-endian uint32 dimensions, then the row-major payload. Files are read through zlib's gzread,
 * which decompresses gzip and passes raw files through unchanged, so both forms work whatever their name.
 * Everything read from the file is distrusted: magic, dims, payload length and trailing bytes are checked,
 * and every failure is FH_ERR_DATA (exit code 2, bad input data) with a message naming the file. */
#include "fedhet/data.h"
#include "fedhet/core.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAX_N (UINT64_C(1) << 31)
#define IDX_MAX_SIDE 65536u
/* gzread takes an unsigned length and returns an int, so no single call may ask for more than INT_MAX. */
#define IDX_READ_CHUNK (1u << 30)
/* The payload buffer starts at most this big and doubles: a forged header claiming terabytes on a
 * tiny file is then reported as truncated instead of failing (or aborting under ASan) in the allocator. */
#define IDX_FIRST_ALLOC ((size_t)16 << 20)

/* gzerror's text without the "path: " zlib puts in front, since our messages already start with it. */
static const char *idx_gz_message(gzFile f, const char *path, int *zerr)
{
    const char *msg = gzerror(f, zerr);
    if (!msg) return "";
    size_t len = strlen(path);
    if (strncmp(msg, path, len) == 0 && msg[len] == ':' && msg[len + 1] == ' ') msg += len + 2;
    return msg;
}

/* zlib's note on why a stream ended early ("unexpected end of file" for a cut-off gzip file), or "". */
static const char *idx_gz_note(gzFile f, const char *path)
{
    int zerr = Z_OK;
    const char *msg = idx_gz_message(f, path, &zerr);
    return zerr != Z_OK ? msg : "";
}

/* gzread loop: reads up to want bytes, stopping only at end of file; *got says how many arrived. */
static int idx_gzread_full(gzFile f, const char *path, void *buf, size_t want, size_t *got)
{
    unsigned char *p = buf;
    *got = 0;
    while (*got < want) {
        size_t ask = want - *got;
        if (ask > IDX_READ_CHUNK) ask = IDX_READ_CHUNK;
        int r = gzread(f, p + *got, (unsigned)ask);
        if (r < 0) {
            int zerr = Z_OK;
            const char *msg = idx_gz_message(f, path, &zerr);
            if (zerr == Z_ERRNO) msg = strerror(errno);
            FH_FAIL(FH_ERR_DATA, "%s: read error: %s (corrupt gzip stream or unreadable file?)", path, msg);
        }
        if (r == 0) break;
        *got += (size_t)r;
    }
    return FH_OK;
}


static int idx_open(const char *path, gzFile *out)
{
    *out = NULL;
    if (!path || !*path) FH_FAIL(FH_ERR_DATA, "IDX file path is empty");
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f && !errno) FH_FAIL(FH_ERR_MEMORY, "%s: out of memory in zlib opening it", path);
    if (!f) FH_FAIL(FH_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
    /* the 8 KiB default buffer makes a 47 MB image file take thousands of read() calls */
    gzbuffer(f, 1u << 18);
    *out = f;
    return FH_OK;
}

/* Reads the magic and the dims; the element type must be uint8 and the dim count must match. */
static int idx_read_header(gzFile f, const char *path, uint32_t magic_expected, const char *what,
                           uint32_t *dims, int ndims)
{
    unsigned char hdr[4 + 4 * 3];
    size_t want = 4 + 4 * (size_t)ndims, got = 0;
    assert(ndims >= 1 && ndims <= 3);
    FH_CHECK(idx_gzread_full(f, path, hdr, want, &got));
    if (got < 4)
        FH_FAIL(FH_ERR_DATA, "%s: truncated: file ends after %zu bytes, before the 4-byte IDX magic number%s%s",
                path, got, *idx_gz_note(f, path) ? "; zlib: " : "", idx_gz_note(f, path));
    uint32_t magic = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
    if (magic != magic_expected) {
        const char *hint = "";
        if (magic == IDX_MAGIC_LABELS) hint = "; this looks like an IDX labels file";
        else if (magic == IDX_MAGIC_IMAGES) hint = "; this looks like an IDX images file";
        else if ((magic >> 16) != 0) hint = "; not an IDX file";
        FH_FAIL(FH_ERR_DATA, "%s: wrong magic number 0x%08x (expected 0x%08x for %s)%s", path, (unsigned)magic,
                (unsigned)magic_expected, what, hint);
    }
    if (got < want)
        FH_FAIL(FH_ERR_DATA, "%s: truncated: header needs %zu bytes, found %zu%s%s", path, want, got,
                *idx_gz_note(f, path) ? "; zlib: " : "", idx_gz_note(f, path));
    for (int i = 0; i < ndims; i++) {
        const unsigned char *d = hdr + 4 + 4 * i;
        dims[i] = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
    }
    return FH_OK;
}

/* Reads exactly `want` payload bytes into a new buffer, then insists on end of file. The buffer grows
 * geometrically so that memory follows the bytes actually present, not what the header claims. */
static int idx_read_payload_into(gzFile f, const char *path, uint64_t want, uint8_t **out)
{
    size_t cap = want < IDX_FIRST_ALLOC ? (size_t)want : IDX_FIRST_ALLOC, have = 0;
    FH_CHECK(fh_calloc(out, cap, 1, "IDX payload"));
    for (;;) {
        size_t got = 0;
        FH_CHECK(idx_gzread_full(f, path, *out + have, cap - have, &got));
        have += got;
        if (have < cap) break; /* end of file */
        if (have == want) break;
        size_t next = (uint64_t)cap * 2 < want ? cap * 2 : (size_t)want;
        uint8_t *grown = realloc(*out, next);
        if (!grown)
            FH_FAIL(FH_ERR_MEMORY, "%s: out of memory growing the payload buffer to %.1f MiB", path,
                    (double)next / 1048576.0);
        *out = grown;
        cap = next;
    }
    if (have < want)
        FH_FAIL(FH_ERR_DATA, "%s: truncated: expected %llu payload bytes, found %zu%s%s", path,
                (unsigned long long)want, have, *idx_gz_note(f, path) ? "; zlib: " : "", idx_gz_note(f, path));
    /* Anything after the payload means the header's dims disagree with the data: a wrong file or a
     * corrupt header, not something to ignore. (Bytes after the end of a gzip member are not seen: zlib
     * itself ignores them.) */
    unsigned char extra[4096];
    unsigned long long trailing = 0;
    for (;;) {
        size_t got = 0;
        FH_CHECK(idx_gzread_full(f, path, extra, sizeof extra, &got));
        if (got == 0) break;
        trailing += got;
    }
    if (trailing > 0)
        FH_FAIL(FH_ERR_DATA, "%s: %llu bytes of trailing data after the expected %llu payload bytes "
                "(dims in the header do not match the file)", path, trailing, (unsigned long long)want);
    return FH_OK;
}

/* On failure the partly filled buffer is freed here, so callers only ever see a full payload or NULL. */
static int idx_read_payload(gzFile f, const char *path, uint64_t want, uint8_t **out)
{
    int status = idx_read_payload_into(f, path, want, out);
    if (status != FH_OK) fh_free(out);
    return status;
}

int data_idx_read_images(const char *path, uint8_t **images, int64_t *n, int *h, int *w)
{
    *images = NULL;
    *n = 0;
    *h = *w = 0;
    gzFile f;
    FH_CHECK(idx_open(path, &f));
    uint32_t dims[3] = { 0, 0, 0 };
    int status = idx_read_header(f, path, IDX_MAGIC_IMAGES, "IDX images", dims, 3);
    if (status == FH_OK) {
        if (dims[0] == 0 || (uint64_t)dims[0] > IDX_MAX_N || dims[1] == 0 || dims[1] > IDX_MAX_SIDE ||
            dims[2] == 0 || dims[2] > IDX_MAX_SIDE)
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                    "%s: implausible image dims %u x %u x %u (need 1 <= n <= 2^31, "
                                    "1 <= height, width <= 65536)",
                                    path, (unsigned)dims[0], (unsigned)dims[1], (unsigned)dims[2]);
    }
    uint64_t bytes = (uint64_t)dims[0] * dims[1] * dims[2]; /* < 2^63 given the limits above */
    if (status == FH_OK && bytes > SIZE_MAX)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                "%s: %llu bytes of images do not fit in this machine's address space", path,
                                (unsigned long long)bytes);
    if (status == FH_OK) status = idx_read_payload(f, path, bytes, images);
    gzclose(f); /* nothing useful to report from closing a file opened for reading */
    if (status != FH_OK) return fh_error_trace(status, __FILE__, __LINE__, "data_idx_read_images");
    *n = (int64_t)dims[0];
    *h = (int)dims[1];
    *w = (int)dims[2];
    return FH_OK;
}

int data_idx_read_labels(const char *path, int32_t **labels, int64_t *n)
{
    *labels = NULL;
    *n = 0;
    gzFile f;
    FH_CHECK(idx_open(path, &f));
    uint32_t count = 0;
    uint8_t *raw = NULL;
    int status = idx_read_header(f, path, IDX_MAGIC_LABELS, "IDX labels", &count, 1);
    if (status == FH_OK && (count == 0 || (uint64_t)count > IDX_MAX_N))
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                "%s: implausible label count %u (need 1 <= n <= 2^31)", path, (unsigned)count);
    if (status == FH_OK) status = idx_read_payload(f, path, count, &raw);
    gzclose(f);
    /* widened to int32 because the rest of fedhet indexes classes with int32 labels */
    if (status == FH_OK) status = fh_calloc(labels, count, sizeof **labels, "IDX labels");
    if (status == FH_OK)
        for (uint32_t i = 0; i < count; i++) (*labels)[i] = raw[i];
    fh_free(&raw);
    if (status != FH_OK) return fh_error_trace(status, __FILE__, __LINE__, "data_idx_read_labels");
    *n = (int64_t)count;
    return FH_OK;
}

/* Picks <dir>/<prefix>-<kind>-<suffix>.gz, else the name without .gz. A .gz that exists but cannot be
 * opened is still chosen, so the reader reports the real reason (permissions) instead of "not found". */
static int idx_find(char *path, size_t size, const char *dir, const char *prefix, const char *stem)
{
    int len = snprintf(path, size, "%s/%s-%s.gz", dir, prefix, stem);
    if (len < 0 || (size_t)len >= size)
        FH_FAIL(FH_ERR_DATA, "data path %s/%s-%s.gz is too long (limit %zu bytes)", dir, prefix, stem, size - 1);
    errno = 0;
    FILE *probe = fopen(path, "rb");
    if (probe) {
        fclose(probe);
        return FH_OK;
    }
    if (errno != ENOENT) return FH_OK;
    path[len - 3] = '\0';
    probe = fopen(path, "rb");
    if (probe) fclose(probe);
    else if (errno == ENOENT)
        FH_FAIL(FH_ERR_DATA, "%s/%s-%s.gz: not found (nor %s/%s-%s without .gz)", dir, prefix, stem, dir, prefix,
                stem);
    return FH_OK;
}

static int idx_read_set_into(DataImageSet *set, const char *dir, const char *prefix, int classes)
{
    if (!dir || !prefix) FH_FAIL(FH_ERR_USAGE, "data_idx_read_set: dir and prefix must be given");
    if (classes < 1 || classes > 256)
        FH_FAIL(FH_ERR_USAGE, "data_idx_read_set: classes = %d, need 1..256 (IDX labels are bytes)", classes);
    char images_path[4096], labels_path[4096];
    FH_CHECK(idx_find(images_path, sizeof images_path, dir, prefix, "images-idx3-ubyte"));
    FH_CHECK(idx_find(labels_path, sizeof labels_path, dir, prefix, "labels-idx1-ubyte"));

    int64_t n_labels = 0;
    FH_CHECK(data_idx_read_images(images_path, &set->images, &set->n, &set->h, &set->w));
    FH_CHECK(data_idx_read_labels(labels_path, &set->labels, &n_labels));
    if (n_labels != set->n)
        FH_FAIL(FH_ERR_DATA, "%s has %lld images but %s has %lld labels", images_path, (long long)set->n,
                labels_path, (long long)n_labels);
    for (int64_t i = 0; i < n_labels; i++)
        if (set->labels[i] >= classes)
            FH_FAIL(FH_ERR_DATA, "%s: label %d at index %lld is out of range for %d classes (need 0..%d)",
                    labels_path, (int)set->labels[i], (long long)i, classes, classes - 1);
    set->c = 1;
    set->classes = classes;
    return FH_OK;
}

int data_idx_read_set(DataImageSet *set, const char *dir, const char *prefix, int classes)
{
    memset(set, 0, sizeof *set);
    int status = idx_read_set_into(set, dir, prefix, classes);
    if (status != FH_OK) {
        data_imageset_free(set);
        return fh_error_trace(status, __FILE__, __LINE__, "data_idx_read_set");
    }
    return FH_OK;
}

void data_imageset_free(DataImageSet *set)
{
    if (!set) return;
    fh_free(&set->images);
    fh_free(&set->labels);
    fh_free(&set->groups);
    fh_free(&set->source_index);
    fh_free(&set->paths);
    memset(set, 0, sizeof *set);
}

void data_images_to_float(float *out, const DataImageSet *set, int64_t first, int64_t count, float mean, float std)
{
    assert(first >= 0 && count >= 0 && first + count <= set->n && std != 0.0f);
    /* A pixel has only 256 values: a table computed once in double is both faster and more exact than
     * doing the division per pixel. */
    float table[256];
    for (int v = 0; v < 256; v++) table[v] = (float)(((double)v / 255.0 - (double)mean) / (double)std);
    size_t row = (size_t)set->c * (size_t)set->h * (size_t)set->w;
    size_t total = (size_t)count * row;
    if (total == 0) return; /* set->images may be NULL; even a zero offset from NULL is undefined */
    const uint8_t *src = set->images + (size_t)first * row;
    for (size_t i = 0; i < total; i++) out[i] = table[src[i]];
}
