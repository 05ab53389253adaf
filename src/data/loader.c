/* Batch loader: a rank's clients' rows in memory, shuffled per (seed, client, round, epoch), normalised
 * with the file's mean/std, augmented as docs/methods/partitions.md B.1 for 32 x 32 colour images. */
#include "fedhet/data.h"
#include "fedhet/core.h"
#include "fedhet/rng.h"
#include "imgsrc_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOADER_PAD 4 /* B.1: crop 32 from the image zero-padded by 4 */

void data_normal_lut(float *lut, const DataPartFile *f)
{
    for (int ch = 0; ch < f->c; ch++)
        for (int v = 0; v < 256; v++)
            lut[ch * 256 + v] = (float)(((double)v / 255.0 - f->mean[ch]) / f->std[ch]);
}

int data_normalise_set(DataPartFile *f, const char *mode)
{
    static const double imagenet_mean[3] = { 0.485, 0.456, 0.406 }, imagenet_std[3] = { 0.229, 0.224, 0.225 };
    if (!strcmp(mode, "file")) return FH_OK;
    if (strcmp(mode, "imagenet") && strcmp(mode, "none"))
        FH_FAIL(FH_ERR_USAGE, "normalise = %s is not one of file, imagenet, none", mode);
    for (int ch = 0; ch < f->c; ch++) {
        if (!strcmp(mode, "none")) f->mean[ch] = 0.0, f->std[ch] = 1.0;
        else if (f->c == 3) f->mean[ch] = imagenet_mean[ch], f->std[ch] = imagenet_std[ch];
        else f->mean[ch] = (0.485 + 0.456 + 0.406) / 3, f->std[ch] = (0.229 + 0.224 + 0.225) / 3;
    }
    return FH_OK;
}

void data_loader_set_crop(DataLoader *L, const DataCropParams *p) { L->crop = *p; }

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int loader_read(DataLoader *L, DataPartFile *f, const int *clients, int n_owned)
{
    FH_CHECK(fh_calloc(&L->clients, (size_t)(n_owned > 0 ? n_owned : 1), sizeof *L->clients, "owned clients"));
    memcpy(L->clients, clients, (size_t)n_owned * sizeof *clients);
    qsort(L->clients, (size_t)n_owned, sizeof *L->clients, cmp_int);
    for (int i = 0; i < n_owned; i++) {
        if (L->clients[i] < 0 || L->clients[i] >= f->n_clients)
            FH_FAIL(FH_ERR_USAGE, "%s: client %d does not exist (the file has %d)", f->path, L->clients[i], f->n_clients);
        if (i > 0 && L->clients[i] == L->clients[i - 1])
            FH_FAIL(FH_ERR_USAGE, "client %d is assigned twice to one loader", L->clients[i]);
    }
    FH_CHECK(fh_calloc(&L->first, (size_t)n_owned + 1, sizeof *L->first, "owned client offsets"));
    int64_t largest = 1;
    for (int i = 0; i < n_owned; i++) {
        int64_t rows = f->offsets[L->clients[i] + 1] - f->offsets[L->clients[i]];
        L->first[i + 1] = L->first[i] + rows;
        if (rows > largest) largest = rows;
    }
    const size_t row_bytes = (size_t)f->c * f->h * f->w, total = (size_t)L->first[n_owned];
    FH_CHECK(fh_calloc(&L->images, total ? total : 1, row_bytes, "client images"));
    FH_CHECK(fh_calloc(&L->labels, total ? total : 1, sizeof *L->labels, "client labels"));
    FH_CHECK(fh_calloc(&L->order, (size_t)largest, sizeof *L->order, "epoch order"));
    FH_CHECK(fh_calloc(&L->lut, (size_t)f->c * 256, sizeof *L->lut, "normalisation table"));
    data_normal_lut(L->lut, f);
    const int64_t before = f->bytes_read;
    for (int i = 0; i < n_owned; i++) {
        int k = L->clients[i];
        FH_CHECK(data_partfile_read_rows(f, DATA_ROWS_CLIENTS, f->offsets[k], f->offsets[k + 1] - f->offsets[k],
                                         L->images + (size_t)L->first[i] * row_bytes, L->labels + L->first[i]));
    }
    L->bytes_read = f->bytes_read - before;
    return FH_OK;
}

int data_loader_init(DataLoader *L, DataPartFile *f, const int *clients, int n_owned, int augment)
{
    memset(L, 0, sizeof *L);
    L->n_owned = n_owned;
    L->c = f->c;
    L->h = f->h;
    L->w = f->w;
    L->n_clients = f->n_clients;
    L->augment = augment >= 0 ? augment : ((f->c == 3 && f->h == 32 && f->w == 32) || f->h > 32 || f->w > 32);
    L->crop = (DataCropParams){ 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, 0.5f }; /* torchvision's defaults */
    int status = n_owned < 0 ? fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "negative client count %d", n_owned)
                             : loader_read(L, f, clients, n_owned);
    /* the crop's resizer, made here; libswscale remakes its scaler inside it when the window's size changes */
    if (status == FH_OK && L->augment && (f->h > 32 || f->w > 32)) {
        status = fh_calloc(&L->crop_resizer, 1, sizeof(ImgResizer), "crop resizer");
        if (status == FH_OK) status = fh_calloc(&L->crop_out, (size_t)f->c * f->h * f->w, 1, "crop");
    }
    if (status != FH_OK) {
        data_loader_free(L);
        return fh_error_trace(status, __FILE__, __LINE__, "data_loader_init");
    }
    return FH_OK;
}

void data_loader_free(DataLoader *L)
{
    if (L->crop_resizer) img_resizer_free(L->crop_resizer);
    fh_free(&L->crop_resizer);
    fh_free(&L->crop_out);
    fh_free(&L->clients);
    fh_free(&L->first);
    fh_free(&L->images);
    fh_free(&L->labels);
    fh_free(&L->lut);
    fh_free(&L->order);
    memset(L, 0, sizeof *L);
}

static int loader_slot(const DataLoader *L, int client)
{
    int lo = 0, hi = L->n_owned - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (L->clients[mid] == client) return mid;
        if (L->clients[mid] < client) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

int64_t data_loader_client_rows(const DataLoader *L, int client)
{
    int slot = loader_slot(L, client);
    return slot < 0 ? -1 : L->first[slot + 1] - L->first[slot];
}

static void loader_shuffle(DataLoader *L, const DataBatchIter *it)
{
    FhRng rng;
    fh_rng_init(&rng, it->seed, FH_RNG_SHUFFLE, it->client, it->round, it->epoch);
    fh_rng_permutation(&rng, L->order, it->n);
}

int data_loader_begin(DataLoader *L, DataBatchIter *it, int client, uint64_t seed, uint32_t round)
{
    int slot = loader_slot(L, client);
    if (slot < 0) FH_FAIL(FH_ERR_USAGE, "client %d is not held by this rank's loader", client);
    *it = (DataBatchIter){ slot, L->first[slot + 1] - L->first[slot], 0, seed, (uint32_t)client, round, 0 };
    loader_shuffle(L, it);
    return FH_OK;
}

int data_loader_begin_epoch(DataLoader *L, DataBatchIter *it, int client, uint64_t seed, uint32_t round,
                            uint32_t epoch)
{
    int slot = loader_slot(L, client);
    if (slot < 0) FH_FAIL(FH_ERR_USAGE, "client %d is not held by this rank's loader", client);
    *it = (DataBatchIter){ slot, L->first[slot + 1] - L->first[slot], 0, seed, (uint32_t)client, round, epoch };
    loader_shuffle(L, it);
    return FH_OK;
}

/* One image, normalised, optionally cropped (offsets dy, dx in 0..2*PAD into the padded image) and flipped. */
static void loader_emit(float *out, const uint8_t *img, const float *lut, int c, int h, int w, int dy, int dx, int flip)
{
    for (int ch = 0; ch < c; ch++) {
        const float *t = lut + ch * 256;
        const uint8_t *plane = img + (size_t)ch * h * w;
        float *o = out + (size_t)ch * h * w;
        if (dy == LOADER_PAD && dx == LOADER_PAD && !flip) {
            for (size_t i = 0; i < (size_t)h * w; i++) o[i] = t[plane[i]];
            continue;
        }
        for (int y = 0; y < h; y++) {
            int sy = y + dy - LOADER_PAD;
            for (int x = 0; x < w; x++) {
                int sx = (flip ? w - 1 - x : x) + dx - LOADER_PAD;
                uint8_t v = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? plane[sy * w + sx] : 0;
                o[y * w + x] = t[v];
            }
        }
    }
}

/* torchvision's RandomResizedCrop.get_params: up to 10 tries of an area share and a log-uniform aspect,
 * then the centre crop clamped to the aspect range. Block k of the counter (client, round, epoch | k << 24,
 * position) drives try k; block 10 the flip. */
static void rrc_window(const DataLoader *L, const DataBatchIter *it, uint32_t pos, int *top, int *left, int *ch,
                       int *cw, int *flip)
{
    const int H = L->h, W = L->w;
    const double area = (double)H * W, lr0 = log(L->crop.ratio_min), lr1 = log(L->crop.ratio_max);
    uint32_t b[4];
    int found = 0;
    for (uint32_t k = 0; k < 10 && !found; k++) {
        fh_rng_block(b, it->seed, FH_RNG_AUGMENT, it->client, it->round, it->epoch ^ ((k + 1) << 24), pos);
        const double u0 = b[0] * 0x1p-32, u1 = b[1] * 0x1p-32;
        const double target = area * (L->crop.scale_min + u0 * (L->crop.scale_max - L->crop.scale_min));
        const double aspect = exp(lr0 + u1 * (lr1 - lr0));
        const int w = (int)lround(sqrt(target * aspect)), h = (int)lround(sqrt(target / aspect));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            *top = (int)(((uint64_t)b[2] * (uint64_t)(H - h + 1)) >> 32);
            *left = (int)(((uint64_t)b[3] * (uint64_t)(W - w + 1)) >> 32);
            *ch = h, *cw = w;
            found = 1;
        }
    }
    if (!found) {
        const double in_ratio = (double)W / H;
        int w = W, h = H;
        if (in_ratio < L->crop.ratio_min) h = (int)lround(w / L->crop.ratio_min);
        else if (in_ratio > L->crop.ratio_max) w = (int)lround(h * L->crop.ratio_max);
        *top = (H - h) / 2, *left = (W - w) / 2, *ch = h, *cw = w;
    }
    fh_rng_block(b, it->seed, FH_RNG_AUGMENT, it->client, it->round, it->epoch ^ (11u << 24), pos);
    *flip = b[0] * 0x1p-32 < L->crop.flip;
}

/* one random-resized-crop of img, normalised and maybe flipped, into out [c, h, w] */
static int loader_emit_rrc(DataLoader *L, const DataBatchIter *it, uint32_t pos, float *out, const uint8_t *img)
{
    int top, left, ch, cw, flip;
    rrc_window(L, it, pos, &top, &left, &ch, &cw, &flip);
    FH_CHECK(img_crop_resize(img, L->c, L->h, L->w, left, top, cw, ch, L->w, L->h, L->crop_out, L->crop_resizer));
    const size_t plane = (size_t)L->h * L->w;
    for (int c = 0; c < L->c; c++) {
        const float *t = L->lut + c * 256;
        const uint8_t *p = L->crop_out + c * plane;
        float *o = out + c * plane;
        for (int y = 0; y < L->h; y++)
            for (int x = 0; x < L->w; x++) o[y * L->w + x] = t[p[y * L->w + (flip ? L->w - 1 - x : x)]];
    }
    return FH_OK;
}

int64_t data_loader_next(DataLoader *L, DataBatchIter *it, int64_t batch_size, float *x, int32_t *y)
{
    if (it->n == 0 || batch_size < 1) return 0;
    if (it->pos >= it->n) {
        it->epoch++;
        it->pos = 0;
        loader_shuffle(L, it);
    }
    int64_t count = it->n - it->pos < batch_size ? it->n - it->pos : batch_size;
    const size_t row = (size_t)L->c * L->h * L->w;
    const int64_t base = L->first[it->slot];
    for (int64_t i = 0; i < count; i++) {
        int64_t r = base + L->order[it->pos + i];
        const uint8_t *img = L->images + (size_t)r * row;
        float *out = x + (size_t)i * row;
        if (L->augment && L->crop_resizer) {
            /* a resampler failure can only be memory, reserved at init: the image goes unaugmented then */
            if (loader_emit_rrc(L, it, (uint32_t)(it->pos + i), out, img) != FH_OK) {
                fh_error_clear();
                loader_emit(out, img, L->lut, L->c, L->h, L->w, LOADER_PAD, LOADER_PAD, 0);
            }
        } else if (L->augment) {
            uint32_t bits[4];
            fh_rng_block(bits, it->seed, FH_RNG_AUGMENT, it->client, it->round, it->epoch, (uint32_t)(it->pos + i));
            /* crop offsets uniform in 0..8 (x 9 values), flip with p = 1/2 */
            int dy = (int)(((uint64_t)bits[0] * (2 * LOADER_PAD + 1)) >> 32);
            int dx = (int)(((uint64_t)bits[1] * (2 * LOADER_PAD + 1)) >> 32);
            loader_emit(out, img, L->lut, L->c, L->h, L->w, dy, dx, (int)(bits[2] >> 31));
        } else {
            loader_emit(out, img, L->lut, L->c, L->h, L->w, LOADER_PAD, LOADER_PAD, 0);
        }
        y[i] = L->labels[r];
    }
    it->pos += count;
    return count;
}

int data_test_read(DataPartFile *f, const float *lut, DataRowGroup group, int64_t first, int64_t count, float *x,
                   int32_t *y, uint8_t *scratch)
{
    FH_CHECK(data_partfile_read_rows(f, group, first, count, scratch, y));
    const size_t row = (size_t)f->c * f->h * f->w;
    for (int64_t i = 0; i < count; i++)
        loader_emit(x + (size_t)i * row, scratch + (size_t)i * row, lut, f->c, f->h, f->w, LOADER_PAD, LOADER_PAD, 0);
    return FH_OK;
}

int64_t data_loader_rows(const DataLoader *L, int client, int64_t first, int64_t count, float *x, int32_t *y)
{
    const int slot = loader_slot(L, client);
    if (slot < 0 || first < 0) return 0;
    const int64_t n = L->first[slot + 1] - L->first[slot];
    if (first + count > n) count = n - first;
    const size_t row = (size_t)L->c * L->h * L->w;
    for (int64_t i = 0; i < count; i++) {
        const int64_t r = L->first[slot] + first + i;
        loader_emit(x + (size_t)i * row, L->images + (size_t)r * row, L->lut, L->c, L->h, L->w, LOADER_PAD, LOADER_PAD, 0);
        y[i] = L->labels[r];
    }
    return count > 0 ? count : 0;
}
