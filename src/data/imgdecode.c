/* Image decoding and geometry for the image sources: JPEG through libjpeg-turbo (with its DCT scaling as
 * shrink-on-load), PNG through libpng, resizing and cropping through pixman (docs/data.md says why these
 * and not libvips). No codec or resampler of our own: this file only drives the libraries. */
#include "imgsrc_internal.h"
#include "fedhet/core.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <pixman.h>
#include <png.h>

void img_buf_free(ImgBuf *b)
{
    free(b->pixels);
    memset(b, 0, sizeof *b);
}

int img_buf_reserve(ImgBuf *b, int w, int h, int c)
{
    size_t need = (size_t)w * h * c + 16;
    if (need > b->capacity) {
        uint8_t *p = realloc(b->pixels, need);
        if (!p) FH_FAIL(FH_ERR_IO, "out of memory for a %dx%dx%d image", w, h, c);
        b->pixels = p;
        b->capacity = need;
    }
    b->w = w, b->h = h, b->c = c;
    return FH_OK;
}

static int is_jpeg(const uint8_t *d, size_t len) { return len >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }
static int is_png(const uint8_t *d, size_t len) { return len >= 8 && !png_sig_cmp((png_const_bytep)d, 0, 8); }

/* Largest side we accept: 2^15 keeps every size product far from overflow. */
#define IMG_MAX_SIDE 32768

/* ==== JPEG ============================================================================================ */

/* libjpeg reports errors through a longjmp; warnings (corrupt data, premature end of file) are errors
 * here too: libjpeg would fill the rest of a truncated image with grey and carry on. */
typedef struct {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    int warned;
} JpegErr;

static void jpeg_fail(j_common_ptr cinfo)
{
    JpegErr *e = (JpegErr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->message);
    longjmp(e->jump, 1);
}

static void jpeg_message(j_common_ptr cinfo, int level)
{
    JpegErr *e = (JpegErr *)cinfo->err;
    if (level < 0 && !e->warned) {
        e->warned = 1;
        (*cinfo->err->format_message)(cinfo, e->message);
    }
}

static int jpeg_run(const char *name, const uint8_t *data, size_t len, int header_only, int c,
                    const DataImageOptions *o, ImgBuf *out, int *w, int *h, int *native_c)
{
    struct jpeg_decompress_struct cinfo;
    JpegErr err;
    memset(&err, 0, sizeof err);
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_fail;
    err.mgr.emit_message = jpeg_message;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        FH_FAIL(FH_ERR_DATA, "%s: not a readable JPEG: %s", name, err.message);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.image_width > IMG_MAX_SIDE || cinfo.image_height > IMG_MAX_SIDE) {
        jpeg_destroy_decompress(&cinfo);
        FH_FAIL(FH_ERR_DATA, "%s: %ux%u pixels (at most %d per side)", name, cinfo.image_width, cinfo.image_height,
                IMG_MAX_SIDE);
    }
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&cinfo);
        FH_FAIL(FH_ERR_DATA, "%s: a CMYK JPEG (convert it to RGB first)", name);
    }
    *w = (int)cinfo.image_width;
    *h = (int)cinfo.image_height;
    *native_c = cinfo.num_components == 1 ? 1 : 3;
    if (header_only || err.warned) {
        jpeg_destroy_decompress(&cinfo);
        if (err.warned) FH_FAIL(FH_ERR_DATA, "%s: corrupt JPEG header: %s", name, err.message);
        return FH_OK;
    }
    cinfo.out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    int min_w = 0, min_h = 0;
    if (o) img_min_decode(o, *w, *h, &min_w, &min_h);
    /* shrink-on-load: the smallest 1/d scale whose output still covers what the resize needs */
    for (int d = 8; d >= 1; d /= 2) {
        cinfo.scale_num = 1;
        cinfo.scale_denom = (unsigned)d;
        jpeg_calc_output_dimensions(&cinfo);
        if (d == 1 || (min_w > 0 && min_h > 0 && (int)cinfo.output_width >= min_w && (int)cinfo.output_height >= min_h))
            break;
    }
    jpeg_start_decompress(&cinfo);
    if (img_buf_reserve(out, (int)cinfo.output_width, (int)cinfo.output_height, c) != FH_OK) {
        jpeg_destroy_decompress(&cinfo);
        return FH_ERR_IO;
    }
    const size_t stride = (size_t)cinfo.output_width * c;
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = out->pixels + (size_t)cinfo.output_scanline * stride;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    if (err.warned) FH_FAIL(FH_ERR_DATA, "%s: corrupt or truncated JPEG: %s", name, err.message);
    return FH_OK;
}

/* ==== PNG ============================================================================================= */

typedef struct {
    const uint8_t *data;
    size_t len, pos;
    char message[256];
} PngSrc;

static void png_read_mem(png_structp png, png_bytep out, png_size_t n)
{
    PngSrc *s = png_get_io_ptr(png);
    if (n > s->len - s->pos) png_error(png, "file ends early (truncated)");
    memcpy(out, s->data + s->pos, n);
    s->pos += n;
}

static void png_fail(png_structp png, png_const_charp msg)
{
    PngSrc *s = png_get_error_ptr(png);
    snprintf(s->message, sizeof s->message, "%s", msg);
    png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static int png_run(const char *name, const uint8_t *data, size_t len, int header_only, int c, ImgBuf *out, int *w,
                   int *h, int *native_c)
{
    PngSrc src = { data, len, 0, "" };
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_warn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        FH_FAIL(FH_ERR_IO, "%s: out of memory starting libpng", name);
    }
    png_bytep *rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(rows);
        FH_FAIL(FH_ERR_DATA, "%s: not a readable PNG: %s", name, src.message);
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_read_info(png, info);
    png_uint_32 pw = png_get_image_width(png, info), ph = png_get_image_height(png, info);
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    if (pw > IMG_MAX_SIDE || ph > IMG_MAX_SIDE) {
        png_destroy_read_struct(&png, &info, NULL);
        FH_FAIL(FH_ERR_DATA, "%s: %ux%u pixels (at most %d per side)", name, (unsigned)pw, (unsigned)ph, IMG_MAX_SIDE);
    }
    *w = (int)pw, *h = (int)ph;
    *native_c = (color & PNG_COLOR_MASK_COLOR) ? 3 : 1;
    if (header_only) {
        png_destroy_read_struct(&png, &info, NULL);
        return FH_OK;
    }
    /* everything to 8-bit grey or RGB without alpha (alpha dropped, as PIL's convert does) */
    if (depth == 16) png_set_scale_16(png);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    if (*native_c == 1 && c == 3) png_set_gray_to_rgb(png);
    if (*native_c == 3 && c == 1) png_set_rgb_to_gray_fixed(png, 1, 29900, 58700); /* ITU-R 601-2 luma */
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if ((int)png_get_channels(png, info) != c || png_get_bit_depth(png, info) != 8) {
        png_destroy_read_struct(&png, &info, NULL);
        FH_FAIL(FH_ERR_DATA, "%s: PNG of an unsupported kind (colour type %d, depth %d)", name, color, depth);
    }
    if (img_buf_reserve(out, (int)pw, (int)ph, c) != FH_OK || !(rows = malloc(ph * sizeof *rows))) {
        png_destroy_read_struct(&png, &info, NULL);
        FH_FAIL(FH_ERR_IO, "%s: out of memory for a %ux%u image", name, (unsigned)pw, (unsigned)ph);
    }
    for (png_uint_32 y = 0; y < ph; y++) rows[y] = out->pixels + (size_t)y * pw * c;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    return FH_OK;
}

/* ==== dispatch ======================================================================================== */

static int not_an_image(const char *name, size_t len)
{
    if (len == 0) FH_FAIL(FH_ERR_DATA, "%s: empty file (not an image)", name);
    FH_FAIL(FH_ERR_DATA, "%s: neither a JPEG nor a PNG image (by its first bytes)", name);
}

int img_probe(const char *name, const uint8_t *data, size_t len, int *w, int *h, int *c)
{
    if (is_jpeg(data, len)) return jpeg_run(name, data, len, 1, 0, NULL, NULL, w, h, c);
    if (is_png(data, len)) return png_run(name, data, len, 1, 0, NULL, w, h, c);
    return not_an_image(name, len);
}

int img_decode(const char *name, const uint8_t *data, size_t len, int c, const DataImageOptions *o, ImgBuf *out,
               int *orig_w, int *orig_h)
{
    int native;
    if (is_jpeg(data, len)) return jpeg_run(name, data, len, 0, c, o, out, orig_w, orig_h, &native);
    if (is_png(data, len)) return png_run(name, data, len, 0, c, out, orig_w, orig_h, &native);
    return not_an_image(name, len);
}

/* ==== geometry ======================================================================================== */

/* torchvision's Resize(size) for an int size: the shorter side becomes size, the longer one
 * int(size * long / short) */
static void shorter_size(int size, int w, int h, int *rw, int *rh)
{
    if (w <= h) *rw = size, *rh = (int)((int64_t)size * h / w);
    else *rh = size, *rw = (int)((int64_t)size * w / h);
}

int img_target(const DataImageOptions *o, const char *name, int w, int h, int *out_w, int *out_h)
{
    if (o->size <= 0) {
        *out_w = w, *out_h = h;
        return FH_OK;
    }
    if (o->resize == DATA_RESIZE_EXACT || o->crop_center) {
        *out_w = *out_h = o->size;
        if (o->resize == DATA_RESIZE_NONE && (w < o->size || h < o->size))
            FH_FAIL(FH_ERR_DATA, "%s: %dx%d is smaller than the %dx%d centre crop (set resize=shorter to scale it)", name,
                    w, h, o->size, o->size);
        return FH_OK;
    }
    if (o->resize == DATA_RESIZE_NONE) *out_w = w, *out_h = h;
    else shorter_size(o->size, w, h, out_w, out_h);
    return FH_OK;
}

void img_min_decode(const DataImageOptions *o, int w, int h, int *min_w, int *min_h)
{
    *min_w = *min_h = 0; /* full size */
    if (o->size <= 0 || o->resize == DATA_RESIZE_NONE || !o->shrink_on_load) return;
    if (o->resize == DATA_RESIZE_EXACT) *min_w = *min_h = o->size;
    else shorter_size(o->size, w, h, min_w, min_h);
}

int img_convert(const ImgBuf *in, int c, ImgBuf *out)
{
    FH_CHECK(img_buf_reserve(out, in->w, in->h, c));
    const size_t n = (size_t)in->w * in->h;
    if (in->c == c) memcpy(out->pixels, in->pixels, n * c);
    else if (c == 3)
        for (size_t i = 0; i < n; i++) out->pixels[3 * i] = out->pixels[3 * i + 1] = out->pixels[3 * i + 2] = in->pixels[i];
    else
        for (size_t i = 0; i < n; i++) {
            const uint8_t *p = in->pixels + 3 * i;
            out->pixels[i] = (uint8_t)((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 0x8000u) >> 16);
        }
    return FH_OK;
}

/* interleaved [h, w, c] window (x0, y0, out_w, out_h) -> planar [c, out_h, out_w] */
static void copy_window(const ImgBuf *in, int x0, int y0, int out_w, int out_h, uint8_t *out)
{
    const int c = in->c;
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < out_h; y++) {
            const uint8_t *src = in->pixels + ((size_t)(y + y0) * in->w + x0) * c + ch;
            uint8_t *dst = out + ((size_t)ch * out_h + y) * out_w;
            for (int x = 0; x < out_w; x++) dst[x] = src[(size_t)x * c];
        }
}

/* pixman resample: output pixel (u, v) samples the source at (x0 + (u + 1/2) sx, y0 + (v + 1/2) sy) */
static int resample(const ImgBuf *in, double x0, double y0, double sx, double sy, int out_w, int out_h, uint8_t *out,
                    ImgBuf *scratch)
{
    const int c = in->c;
    const int src_stride = c == 1 ? ((in->w + 3) & ~3) : in->w * 4, dst_stride = c == 1 ? ((out_w + 3) & ~3) : out_w * 4;
    const size_t src_bytes = (size_t)src_stride * in->h, dst_bytes = (size_t)dst_stride * out_h;
    FH_CHECK(img_buf_reserve(scratch, (int)(src_bytes + dst_bytes), 1, 1));
    uint8_t *sp = scratch->pixels, *dp = scratch->pixels + src_bytes;
    for (int y = 0; y < in->h; y++) {
        const uint8_t *row = in->pixels + (size_t)y * in->w * c;
        if (c == 1) memcpy(sp + (size_t)y * src_stride, row, (size_t)in->w);
        else {
            uint32_t *o = (uint32_t *)(sp + (size_t)y * src_stride);
            for (int x = 0; x < in->w; x++)
                o[x] = 0xFF000000u | (uint32_t)row[3 * x] << 16 | (uint32_t)row[3 * x + 1] << 8 | row[3 * x + 2];
        }
    }
    const pixman_format_code_t fmt = c == 1 ? PIXMAN_a8 : PIXMAN_x8r8g8b8;
    pixman_image_t *src = pixman_image_create_bits(fmt, in->w, in->h, (uint32_t *)sp, src_stride);
    pixman_image_t *dst = pixman_image_create_bits(fmt, out_w, out_h, (uint32_t *)dp, dst_stride);
    if (!src || !dst) {
        if (src) pixman_image_unref(src);
        if (dst) pixman_image_unref(dst);
        FH_FAIL(FH_ERR_IO, "out of memory resizing a %dx%d image", in->w, in->h);
    }
    pixman_transform_t t;
    pixman_transform_init_identity(&t);
    t.matrix[0][0] = pixman_double_to_fixed(sx);
    t.matrix[1][1] = pixman_double_to_fixed(sy);
    t.matrix[0][2] = pixman_double_to_fixed(x0);
    t.matrix[1][2] = pixman_double_to_fixed(y0);
    pixman_image_set_transform(src, &t);
    pixman_image_set_repeat(src, PIXMAN_REPEAT_PAD);
    /* bilinear reconstruction; when shrinking, a box prefilter as wide as the shrink (antialiasing) */
    int n_params = 0;
    pixman_fixed_t *params = pixman_filter_create_separable_convolution(
        &n_params, pixman_double_to_fixed(sx > 1 ? sx : 1), pixman_double_to_fixed(sy > 1 ? sy : 1),
        PIXMAN_KERNEL_LINEAR, PIXMAN_KERNEL_LINEAR, sx > 1 ? PIXMAN_KERNEL_BOX : PIXMAN_KERNEL_IMPULSE,
        sy > 1 ? PIXMAN_KERNEL_BOX : PIXMAN_KERNEL_IMPULSE, 4, 4);
    if (params) pixman_image_set_filter(src, PIXMAN_FILTER_SEPARABLE_CONVOLUTION, params, n_params);
    else pixman_image_set_filter(src, PIXMAN_FILTER_BILINEAR, NULL, 0);
    free(params);
    pixman_image_composite32(PIXMAN_OP_SRC, src, NULL, dst, 0, 0, 0, 0, 0, 0, out_w, out_h);
    pixman_image_unref(src);
    pixman_image_unref(dst);
    const size_t plane = (size_t)out_w * out_h;
    for (int y = 0; y < out_h; y++) {
        if (c == 1) {
            memcpy(out + (size_t)y * out_w, dp + (size_t)y * dst_stride, (size_t)out_w);
            continue;
        }
        const uint32_t *row = (const uint32_t *)(dp + (size_t)y * dst_stride);
        for (int x = 0; x < out_w; x++) {
            out[(size_t)y * out_w + x] = (uint8_t)(row[x] >> 16);
            out[plane + (size_t)y * out_w + x] = (uint8_t)(row[x] >> 8);
            out[2 * plane + (size_t)y * out_w + x] = (uint8_t)row[x];
        }
    }
    return FH_OK;
}

int img_fit(const DataImageOptions *o, const ImgBuf *in, int orig_w, int orig_h, int c, int out_w, int out_h,
            uint8_t *out, ImgBuf *scratch)
{
    const ImgBuf *src = in;
    ImgBuf converted = { 0 };
    if (in->c != c) {
        FH_CHECK(img_convert(in, c, &converted));
        src = &converted;
    }
    /* the geometry in the original's pixels: the resized size (rw, rh) and the crop's corner in it */
    int rw = orig_w, rh = orig_h;
    if (o->size > 0 && o->resize == DATA_RESIZE_SHORTER) shorter_size(o->size, orig_w, orig_h, &rw, &rh);
    else if (o->size > 0 && o->resize == DATA_RESIZE_EXACT) rw = rh = o->size;
    /* torchvision's CenterCrop corner: int(round((rw - size) / 2)) */
    const int left = (int)lround((rw - out_w) / 2.0), top = (int)lround((rh - out_h) / 2.0);
    /* decoded pixels per resized pixel (the decode may be a DCT-scaled original) */
    const double sx = (double)src->w / rw, sy = (double)src->h / rh;
    int status;
    if (src->w == rw && src->h == rh) {
        copy_window(src, left, top, out_w, out_h, out);
        status = FH_OK;
    } else {
        status = resample(src, left * sx, top * sy, sx, sy, out_w, out_h, out, scratch);
    }
    img_buf_free(&converted);
    return status;
}

int img_crop_resize(const uint8_t *planar, int c, int h, int w, double x0, double y0, double cw, double ch, int out_w,
                    int out_h, uint8_t *out, ImgBuf *in_buf, ImgBuf *scratch)
{
    FH_CHECK(img_buf_reserve(in_buf, w, h, c));
    const size_t plane = (size_t)w * h;
    for (int k = 0; k < c; k++)
        for (size_t i = 0; i < plane; i++) in_buf->pixels[i * c + k] = planar[k * plane + i];
    return resample(in_buf, x0, y0, cw / out_w, ch / out_h, out_w, out_h, out, scratch);
}
