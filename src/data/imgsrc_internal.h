/* Internal interface of the image sources (imgdecode.c: decoding and geometry; imgsource.c: layouts). */
#ifndef FEDHET_IMGSRC_INTERNAL_H
#define FEDHET_IMGSRC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fedhet/data.h"

/* An interleaved image [h, w, c] (c = 1 or 3) with a reusable buffer. */
typedef struct {
    int w, h, c;
    uint8_t *pixels;
    size_t capacity;
} ImgBuf;

void img_buf_free(ImgBuf *b);
int img_buf_reserve(ImgBuf *b, int w, int h, int c);

/* A reusable resampler: libswscale's bilinear filter, one plane at a time, whose support widens with the
 * shrink (antialiased, as PIL's and torchvision's bilinear resize), bit-exact on every CPU; the scaler is
 * kept while the geometry repeats. */
typedef struct ImgResizer {
    struct SwsContext *sws;
    ImgBuf planes, resized;
} ImgResizer;

void img_resizer_free(ImgResizer *r);

/* The header of a JPEG or PNG in memory: size (upright when o asks for the EXIF orientation) and native
 * channels (1 grey, 3 colour, CMYK included). FH_ERR_DATA naming `name` for anything that is neither, has a broken
 * header, or is larger than o's max_pixels (o may be NULL: no budget, orientation ignored). */
int img_probe(const char *name, const uint8_t *data, size_t len, const DataImageOptions *o, int *w, int *h, int *c);

/* Decodes a JPEG or PNG into out with c channels (1 or 3: colour made grey as PIL's convert("L"), CMYK as PIL converts
 * it); *orig_w, *orig_h the stored size, or the upright size when o->exif_orientation turns it (through scratch,
 * whose buffer out may then take). A JPEG is decoded at the smallest DCT scale (1/8 .. 1) that still covers what
 * the resize of o needs and divides its sides (shrink-on-load; o NULL: full size). A truncated or corrupt file,
 * or one larger than max_pixels, is FH_ERR_DATA (the size checked before decoding). */
int img_decode(const char *name, const uint8_t *data, size_t len, int c, const DataImageOptions *o, ImgBuf *out,
               ImgBuf *scratch, int *orig_w, int *orig_h);

/* The output size for a source of w x h under the options; FH_ERR_DATA naming `name` when the source
 * cannot give it (smaller than size with resize = none). */
int img_target(const DataImageOptions *o, const char *name, int w, int h, int *out_w, int *out_h);
/* The decoded size a JPEG needs at least, for the shrink-on-load above. */
void img_min_decode(const DataImageOptions *o, int w, int h, int *min_w, int *min_h);

/* in (decoded from an original of orig_w x orig_h) -> out [c, out_h, out_w] planar, resized (the whole
 * image, by r) and then cropped as the options say, as torchvision's Resize + CenterCrop; channels converted
 * to c. An identity geometry copies the pixels unchanged. */
int img_fit(const DataImageOptions *o, const ImgBuf *in, int orig_w, int orig_h, int c, int out_w, int out_h,
            uint8_t *out, ImgResizer *r);

/* The window (x0, y0, cw, ch) of a planar image [c, h, w] resized to [c, out_h, out_w] by r. */
int img_crop_resize(const uint8_t *planar, int c, int h, int w, int x0, int y0, int cw, int ch, int out_w, int out_h,
                    uint8_t *out, ImgResizer *r);

/* Channel conversion of an interleaved image: grey -> RGB repeats, RGB -> grey is ITU-R 601-2 luma
 * (L = (19595 R + 38470 G + 7471 B + 2^15) >> 16, as PIL's convert("L")). */
int img_convert(const ImgBuf *in, int c, ImgBuf *out);

#endif
