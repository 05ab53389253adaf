/* Test helper of tests/mpi/test_sources.sh: a YCCK JPEG, the kind Photoshop writes for CMYK, which PIL cannot
 * write (it writes plain CMYK). usage: write_ycck W H IN.cmyk OUT.jpg
 * IN holds W x H pixels of 4 bytes, the CMYK values as the JPEG stores them (Adobe's inverted convention);
 * libjpeg turns them into YCCK and writes the Adobe marker with transform 2. Exit 0, or 1 naming the problem. */
#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: write_ycck W H IN.cmyk OUT.jpg\n");
        return 1;
    }
    const int w = atoi(argv[1]), h = atoi(argv[2]);
    unsigned char *pixels = w > 0 && h > 0 ? malloc((size_t)w * h * 4) : NULL;
    FILE *in = fopen(argv[3], "rb"), *out = fopen(argv[4], "wb");
    if (!pixels || !in || !out || fread(pixels, 4, (size_t)w * h, in) != (size_t)w * h) {
        fprintf(stderr, "write_ycck: cannot read %d x %d CMYK pixels from %s or write %s\n", w, h, argv[3], argv[4]);
        return 1;
    }
    fclose(in);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, out);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 4;
    c.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, JCS_YCCK);
    jpeg_set_quality(&c, 90, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = pixels + (size_t)c.next_scanline * w * 4;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(pixels);
    return fclose(out) == 0 ? 0 : 1;
}
