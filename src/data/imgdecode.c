/* Image decoding and geometry for the image sources: JPEG through libjpeg-turbo (with its DCT scaling as
 * shrink-on-load), PNG through libpng, resizing through libswscale (docs/data.md says why these and not
 * libvips). No codec or resampler of our own: this file only drives the libraries. */
#include "imgsrc_internal.h"
#include "fedhet/core.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <libswscale/swscale.h>
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
        if (!p) FH_FAIL(FH_ERR_MEMORY, "out of memory for a %dx%dx%d image", w, h, c);
        b->pixels = p;
        b->capacity = need;
    }
    b->w = w, b->h = h, b->c = c;
    return FH_OK;
}

static int is_jpeg(const uint8_t *d, size_t len) { return len >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }
static int is_png(const uint8_t *d, size_t len) { return len >= 8 && !png_sig_cmp((png_const_bytep)d, 0, 8); }

/* ITU-R 601-2 luma of an RGB pixel, as PIL's convert("L"): (19595 R + 38470 G + 7471 B + 2^15) >> 16 */
static uint8_t luma(const uint8_t *p) { return (uint8_t)((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 0x8000u) >> 16); }

/* n RGB pixels to grey in place (pixel i's output lies before pixel i + 1's input): colour images are decoded to
 * RGB and then made grey here, as PIL does, not by the codec's own conversion (libjpeg's luma plane, libpng's
 * coefficients), which differs from PIL's by one here and there */
static void rgb_to_grey(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = luma(p + 3 * i);
}

/* Largest side we accept: 2^15 keeps every size product far from overflow. */
#define IMG_MAX_SIDE 32768

/* The size a header announces, against the side limit and the pixel budget (max_pixels): checked before anything
 * is decoded, so that a small file announcing a huge image (a 30000 x 30000 PNG of zeros is 854 KB) costs nothing */
static int check_size(const char *name, unsigned w, unsigned h, const DataImageOptions *o)
{
    if (w > IMG_MAX_SIDE || h > IMG_MAX_SIDE)
        FH_FAIL(FH_ERR_DATA, "%s: %ux%u pixels (at most %d per side)", name, w, h, IMG_MAX_SIDE);
    const int64_t pixels = (int64_t)w * h;
    if (o && o->max_pixels > 0 && pixels > o->max_pixels)
        FH_FAIL(FH_ERR_DATA, "%s: %ux%u is %lld pixels, more than max_pixels = %lld (decoding it would take about %lld "
                "MiB); if it is meant to be this large, raise the source option max_pixels", name, w, h,
                (long long)pixels, (long long)o->max_pixels, (long long)(pixels * 6 >> 20));
    return FH_OK;
}

/* ==== EXIF orientation ================================================================================ */

/* The orientation tag (0x0112) of IFD0 of a TIFF structure (an EXIF block after its "Exif\0\0", a PNG's eXIf
 * chunk): 1..8, or 1 when absent or unreadable, as PIL's getexif() gives it to ImageOps.exif_transpose */
static int tiff_orientation(const uint8_t *p, size_t n)
{
    if (n < 8 || !((p[0] == 'I' && p[1] == 'I') || (p[0] == 'M' && p[1] == 'M'))) return 1;
    const int le = p[0] == 'I';
#define TIFF16(o) (le ? (uint32_t)p[o] | (uint32_t)p[(o) + 1] << 8 : (uint32_t)p[o] << 8 | (uint32_t)p[(o) + 1])
#define TIFF32(o) (le ? TIFF16(o) | TIFF16((o) + 2) << 16 : TIFF16(o) << 16 | TIFF16((o) + 2))
    if (TIFF16(2) != 42) return 1;
    const size_t ifd = TIFF32(4);
    if (ifd > n - 2) return 1;
    const size_t count = TIFF16(ifd);
    for (size_t i = 0; i < count && ifd + 2 + 12 * (i + 1) <= n; i++) {
        const size_t e = ifd + 2 + 12 * i;
        if (TIFF16(e) == 0x0112 && TIFF16(e + 2) == 3 /* SHORT */) {
            const uint32_t v = TIFF16(e + 8);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
#undef TIFF16
#undef TIFF32
    return 1;
}

/* orientations 5..8 turn the image a quarter, swapping its sides */
static int swaps_sides(int orientation) { return orientation >= 5; }

/* in turned upright by an EXIF orientation into out, as PIL's exif_transpose: 2 flips left-right, 3 turns 180
 * degrees, 4 flips top-bottom, 5 transposes, 6 turns 90 clockwise, 7 transverses, 8 turns 90 anticlockwise */
static int orient(const ImgBuf *in, int orientation, ImgBuf *out)
{
    const int W = in->w, H = in->h, c = in->c, ow = swaps_sides(orientation) ? H : W, oh = swaps_sides(orientation) ? W : H;
    FH_CHECK(img_buf_reserve(out, ow, oh, c));
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int sx = x, sy = y;
            switch (orientation) {
            case 2: sx = W - 1 - x; break;
            case 3: sx = W - 1 - x, sy = H - 1 - y; break;
            case 4: sy = H - 1 - y; break;
            case 5: sx = y, sy = x; break;
            case 6: sx = y, sy = H - 1 - x; break;
            case 7: sx = W - 1 - y, sy = H - 1 - x; break;
            case 8: sx = W - 1 - y, sy = x; break;
            default: break;
            }
            memcpy(out->pixels + ((size_t)y * ow + x) * c, in->pixels + ((size_t)sy * W + sx) * c, (size_t)c);
        }
    return FH_OK;
}

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

/* the orientation of the first EXIF block (APP1 "Exif\0\0"), the one PIL reads */
static int jpeg_orientation(j_decompress_ptr cinfo)
{
    for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && !memcmp(m->data, "Exif\0\0", 6))
            return tiff_orientation(m->data + 6, m->data_length - 6);
    return 1;
}

/* n pixels of libjpeg's CMYK to RGB in place, as PIL gives them: PIL reads every 4-channel JPEG as Adobe's inverted
 * CMYK (its raw mode "CMYK;I": C' = 255 - C, ...; libjpeg's YCCK decoding yields the same) and converts with its
 * cmyk2rgb: R = (255 - K') - C' (255 - K') / 255, the division rounded as its MULDIV255 (PIL's grey goes through RGB
 * too). Pixel i's output ends before pixel i + 1's input starts. */
static void cmyk_to_rgb(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned k = p[4 * i + 3];
        uint8_t rgb[3];
        for (int j = 0; j < 3; j++) {
            const unsigned t = (255u - p[4 * i + j]) * k + 128;
            rgb[j] = (uint8_t)(k - (((t >> 8) + t) >> 8));
        }
        memcpy(p + 3 * i, rgb, 3);
    }
}

static int jpeg_run(const char *name, const uint8_t *data, size_t len, int header_only, int c,
                    const DataImageOptions *o, ImgBuf *out, int *w, int *h, int *native_c, int *orientation)
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
    if (o && o->exif_orientation) jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    if (check_size(name, cinfo.image_width, cinfo.image_height, o) != FH_OK) {
        jpeg_destroy_decompress(&cinfo);
        return FH_ERR_DATA;
    }
    const int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    *w = (int)cinfo.image_width;
    *h = (int)cinfo.image_height;
    *native_c = cinfo.num_components == 1 ? 1 : 3;
    *orientation = o && o->exif_orientation ? jpeg_orientation(&cinfo) : 1;
    if (header_only || err.warned) {
        jpeg_destroy_decompress(&cinfo);
        if (err.warned) FH_FAIL(FH_ERR_DATA, "%s: corrupt JPEG header: %s", name, err.message);
        return FH_OK;
    }
    cinfo.out_color_space = cmyk ? JCS_CMYK : *native_c == 1 && c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    int min_w = 0, min_h = 0;
    if (o && swaps_sides(*orientation)) img_min_decode(o, *h, *w, &min_h, &min_w); /* the upright image's needs */
    else if (o) img_min_decode(o, *w, *h, &min_w, &min_h);
    /* shrink-on-load: the smallest 1/d scale whose output still covers what the resize needs, among those that
     * divide both sides: where d does not, libjpeg rounds the output up and its last row and column come from
     * the encoder's padding of the partial block, so the decoded image would span more than the original and
     * the resize would stretch it by up to (d - 1) / side (0.7 px at the far edge of a 250-px side at 1/8) */
    for (int d = 8; d >= 1; d /= 2) {
        cinfo.scale_num = 1;
        cinfo.scale_denom = (unsigned)d;
        jpeg_calc_output_dimensions(&cinfo);
        if (d == 1 || (min_w > 0 && min_h > 0 && *w % d == 0 && *h % d == 0 && (int)cinfo.output_width >= min_w &&
                       (int)cinfo.output_height >= min_h))
            break;
    }
    jpeg_start_decompress(&cinfo);
    /* CMYK is decoded 4 bytes a pixel, colour 3 (also for grey output), and converted in place */
    const int stored_c = cmyk ? 4 : cinfo.out_color_space == JCS_RGB ? 3 : 1;
    if (img_buf_reserve(out, (int)cinfo.output_width, (int)cinfo.output_height, stored_c) != FH_OK) {
        jpeg_destroy_decompress(&cinfo);
        return FH_ERR_IO;
    }
    const size_t stride = (size_t)cinfo.output_width * stored_c;
    /* several rows per call: libjpeg-turbo then converts colours in longer runs */
    JSAMPROW rows[16];
    while (cinfo.output_scanline < cinfo.output_height) {
        const JDIMENSION first = cinfo.output_scanline;
        const int n = cinfo.output_height - first < 16 ? (int)(cinfo.output_height - first) : 16;
        for (int i = 0; i < n; i++) rows[i] = out->pixels + (size_t)(first + i) * stride;
        jpeg_read_scanlines(&cinfo, rows, (JDIMENSION)n);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    if (err.warned) FH_FAIL(FH_ERR_DATA, "%s: corrupt or truncated JPEG: %s", name, err.message);
    if (cmyk) cmyk_to_rgb(out->pixels, (size_t)out->w * out->h);
    if (c == 1 && stored_c > 1) rgb_to_grey(out->pixels, (size_t)out->w * out->h);
    out->c = c;
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

/* the orientation in an eXIf chunk before the image data (where PIL reads it) */
static int png_orientation(png_structp png, png_infop info)
{
    png_uint_32 n = 0;
    png_bytep exif = NULL;
    return png_get_eXIf_1(png, info, &n, &exif) && exif ? tiff_orientation(exif, n) : 1;
}

static int png_run(const char *name, const uint8_t *data, size_t len, int header_only, int c,
                   const DataImageOptions *o, ImgBuf *out, int *w, int *h, int *native_c, int *orientation)
{
    PngSrc src = { data, len, 0, "" };
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_warn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        FH_FAIL(FH_ERR_MEMORY, "%s: out of memory starting libpng", name);
    }
    png_bytep *volatile rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(rows);
        FH_FAIL(FH_ERR_DATA, "%s: not a readable PNG: %s", name, src.message);
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_read_info(png, info);
    png_uint_32 pw = png_get_image_width(png, info), ph = png_get_image_height(png, info);
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    if (check_size(name, (unsigned)pw, (unsigned)ph, o) != FH_OK) {
        png_destroy_read_struct(&png, &info, NULL);
        return FH_ERR_DATA;
    }
    *w = (int)pw, *h = (int)ph;
    *native_c = (color & PNG_COLOR_MASK_COLOR) ? 3 : 1;
    *orientation = o && o->exif_orientation ? png_orientation(png, info) : 1;
    if (header_only) {
        png_destroy_read_struct(&png, &info, NULL);
        return FH_OK;
    }
    /* everything to 8-bit grey or RGB without alpha (alpha dropped, as PIL's convert does); 16 bits to their high
     * byte, as PIL reads 16-bit colour (its grey 16-bit mode I is clipped at 255 instead, which we do not copy) */
    if (depth == 16) png_set_strip_16(png);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    /* a palette's transparency (tRNS) is expanded to an alpha channel with the palette: dropped as well */
    if ((color & PNG_COLOR_MASK_ALPHA) || (color == PNG_COLOR_TYPE_PALETTE && png_get_valid(png, info, PNG_INFO_tRNS)))
        png_set_strip_alpha(png);
    if (*native_c == 1 && c == 3) png_set_gray_to_rgb(png);
    const int stored_c = *native_c == 3 ? 3 : c; /* colour made grey after decoding */
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if ((int)png_get_channels(png, info) != stored_c || png_get_bit_depth(png, info) != 8) {
        png_destroy_read_struct(&png, &info, NULL);
        FH_FAIL(FH_ERR_DATA, "%s: PNG of an unsupported kind (colour type %d, depth %d)", name, color, depth);
    }
    if (img_buf_reserve(out, (int)pw, (int)ph, stored_c) != FH_OK || !(rows = malloc(ph * sizeof *rows))) {
        png_destroy_read_struct(&png, &info, NULL);
        FH_FAIL(FH_ERR_MEMORY, "%s: out of memory for a %ux%u image", name, (unsigned)pw, (unsigned)ph);
    }
    for (png_uint_32 y = 0; y < ph; y++) rows[y] = out->pixels + (size_t)y * pw * stored_c;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    if (stored_c != c) rgb_to_grey(out->pixels, (size_t)pw * ph);
    out->c = c;
    return FH_OK;
}

/* ==== dispatch ======================================================================================== */

static int not_an_image(const char *name, size_t len)
{
    if (len == 0) FH_FAIL(FH_ERR_DATA, "%s: empty file (not an image)", name);
    FH_FAIL(FH_ERR_DATA, "%s: neither a JPEG nor a PNG image (by its first bytes)", name);
}

int img_probe(const char *name, const uint8_t *data, size_t len, const DataImageOptions *o, int *w, int *h, int *c)
{
    int orientation = 1, status;
    if (is_jpeg(data, len)) status = jpeg_run(name, data, len, 1, 0, o, NULL, w, h, c, &orientation);
    else if (is_png(data, len)) status = png_run(name, data, len, 1, 0, o, NULL, w, h, c, &orientation);
    else return not_an_image(name, len);
    if (status == FH_OK && swaps_sides(orientation)) {
        const int t = *w;
        *w = *h, *h = t;
    }
    return status;
}

int img_decode(const char *name, const uint8_t *data, size_t len, int c, const DataImageOptions *o, ImgBuf *out,
               ImgBuf *scratch, int *orig_w, int *orig_h)
{
    int native, orientation = 1;
    if (is_jpeg(data, len)) FH_CHECK(jpeg_run(name, data, len, 0, c, o, out, orig_w, orig_h, &native, &orientation));
    else if (is_png(data, len)) FH_CHECK(png_run(name, data, len, 0, c, o, out, orig_w, orig_h, &native, &orientation));
    else return not_an_image(name, len);
    if (orientation == 1) return FH_OK;
    FH_CHECK(orient(out, orientation, scratch));
    const ImgBuf t = *out;
    *out = *scratch, *scratch = t;
    if (swaps_sides(orientation)) {
        const int side = *orig_w;
        *orig_w = *orig_h, *orig_h = side;
    }
    return FH_OK;
}

/* ==== geometry ======================================================================================== */

/* torchvision's Resize(size) for an int size: the shorter side becomes size, the longer one
 * int(size * long / short) */
static void shorter_size(int size, int w, int h, int *rw, int *rh)
{
    if (w <= h) *rw = size, *rh = (int)((int64_t)size * h / w);
    else *rh = size, *rw = (int)((int64_t)size * w / h);
}

/* torchvision's CenterCrop corner, int(round((extent - size) / 2.0)) for extent >= size: Python's round takes a
 * half to the even neighbour (0.5 -> 0, 1.5 -> 2, 2.5 -> 2), where C's lround would take it away from zero */
static int centre_offset(int extent, int size)
{
    const int d = extent - size, half = d / 2;
    return d % 2 && half % 2 ? half + 1 : half;
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
        for (size_t i = 0; i < n; i++) out->pixels[i] = luma(in->pixels + 3 * i);
    return FH_OK;
}

/* interleaved [h, w, c] window (x0, y0, out_w, out_h) -> planar [c, out_h, out_w] */
static void copy_window(const ImgBuf *in, int x0, int y0, int out_w, int out_h, uint8_t *out)
{
    const int c = in->c;
    const size_t plane = (size_t)out_w * out_h;
    for (int y = 0; y < out_h; y++) {
        const uint8_t *src = in->pixels + ((size_t)(y + y0) * in->w + x0) * c;
        uint8_t *r = out + (size_t)y * out_w, *g = r + plane, *b = g + plane;
        if (c == 1) memcpy(r, src, (size_t)out_w);
        else /* one pass over each pixel */
            for (int x = 0; x < out_w; x++) r[x] = src[3 * x], g[x] = src[3 * x + 1], b[x] = src[3 * x + 2];
    }
}

void img_resizer_free(ImgResizer *r)
{
    sws_freeContext(r->sws);
    img_buf_free(&r->planes);
    img_buf_free(&r->resized);
    memset(r, 0, sizeof *r);
}

/* c planes of w x h, rows `stride` apart and planes `plane_step` apart, resized to c planes of out_w x out_h */
static int resize_planes(ImgResizer *r, const uint8_t *in, int c, int w, int h, int stride, size_t plane_step,
                         int out_w, int out_h, uint8_t *out)
{
    /* BITEXACT: the same pixels whichever SIMD path the CPU takes */
    r->sws = sws_getCachedContext(r->sws, w, h, AV_PIX_FMT_GRAY8, out_w, out_h, AV_PIX_FMT_GRAY8,
                                  SWS_BILINEAR | SWS_BITEXACT | SWS_ACCURATE_RND, NULL, NULL, NULL);
    if (!r->sws) FH_FAIL(FH_ERR_IO, "libswscale cannot resize %dx%d to %dx%d", w, h, out_w, out_h);
    for (int k = 0; k < c; k++) {
        const uint8_t *src[4] = { in + k * plane_step };
        uint8_t *dst[4] = { out + (size_t)k * out_w * out_h };
        const int src_stride[4] = { stride }, dst_stride[4] = { out_w };
        if (sws_scale(r->sws, src, src_stride, 0, h, dst, dst_stride) != out_h)
            FH_FAIL(FH_ERR_IO, "libswscale failed resizing %dx%d to %dx%d", w, h, out_w, out_h);
    }
    return FH_OK;
}

int img_fit(const DataImageOptions *o, const ImgBuf *in, int orig_w, int orig_h, int c, int out_w, int out_h,
            uint8_t *out, ImgResizer *r)
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
    const int left = centre_offset(rw, out_w), top = centre_offset(rh, out_h);
    int status = FH_OK;
    if (src->w == rw && src->h == rh) copy_window(src, left, top, out_w, out_h, out);
    else {
        /* planar copy of the decoded image, resized whole to (rw, rh), then the crop */
        const int cc = src->c;
        const size_t plane = (size_t)src->w * src->h, resized_plane = (size_t)rw * rh;
        status = img_buf_reserve(&r->planes, src->w, src->h, cc);
        if (status == FH_OK) status = img_buf_reserve(&r->resized, rw, rh, cc);
        if (status == FH_OK) {
            copy_window(src, 0, 0, src->w, src->h, r->planes.pixels);
            status = resize_planes(r, r->planes.pixels, cc, src->w, src->h, src->w, plane, rw, rh, r->resized.pixels);
        }
        for (int k = 0; status == FH_OK && k < cc; k++)
            for (int y = 0; y < out_h; y++)
                memcpy(out + ((size_t)k * out_h + y) * out_w,
                       r->resized.pixels + k * resized_plane + (size_t)(y + top) * rw + left, (size_t)out_w);
    }
    img_buf_free(&converted);
    return status;
}

int img_crop_resize(const uint8_t *planar, int c, int h, int w, int x0, int y0, int cw, int ch, int out_w, int out_h,
                    uint8_t *out, ImgResizer *r)
{
    return resize_planes(r, planar + (size_t)y0 * w + x0, c, cw, ch, w, (size_t)w * h, out_w, out_h, out);
}
