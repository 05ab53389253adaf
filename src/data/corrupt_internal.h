/* Private to src/data/corrupt.c and its unit test (tests/unit/test_corrupt.c); not part of the fedhet API.
 *
 * The stream tags below are the first Philox counter word of every corruption draw: the stream of one
 * image is fh_rng_init(seed, FH_RNG_PARTITION, tag, group, index). The partitioner shares the purpose
 * FH_RNG_PARTITION, so its first counter word must stay below 0xC0000000 (counts, class ids and attempt
 * numbers always do); then no corruption stream can coincide with a partition stream. */
#ifndef FEDHET_DATA_CORRUPT_INTERNAL_H
#define FEDHET_DATA_CORRUPT_INTERNAL_H

#include <stdint.h>

#define DATA_CORRUPT_TAG_NOISE 0xC0000001u /* Gaussian noise: sigma * N(0, 1) per stored value */
#define DATA_CORRUPT_TAG_BLUR 0xC0000002u  /* motion blur: one U[0, 1) for the angle */

/* Radii above this are treated as this (kernel width 2 * 512 + 1 on the stack); B.7 uses at most 20. */
#define DATA_BLUR_MAX_RADIUS 512

/* Motion blur of docs/methods/partitions.md B.7 steps 1-5 at an explicit angle theta_deg (degrees; 0 = trail towards +x, i.e.
 * each output pixel averages the pixels to its right; positive angles turn the trail towards +y, the
 * rows below). Applied to each of the c planes of image [c, h, w] in place, without allocating.
 * radius <= 0 leaves the image unchanged; sigma <= 0 gives the kernel (1, 0, ...), also the identity. */
void data_motion_blur_at_angle(uint8_t *image, int c, int h, int w, double radius, double sigma, double theta_deg);

#endif
