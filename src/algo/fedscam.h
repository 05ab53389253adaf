/* FedSCAM's pieces (src/algo/fedscam.c), internal to src/algo and its unit tests. */
#ifndef FEDHET_ALGO_FEDSCAM_H
#define FEDHET_ALGO_FEDSCAM_H

#include <stddef.h>
#include <stdint.h>

#include "fedhet/algo.h"

/* rho_i = rho_max / (1 + alpha_rho h_adj) (docs/methods/sam.md §10 step 7; the pilot radius is half of it at h_i) */
double fedscam_radius(double rho_max, double alpha_rho, double h_adj);

/* S_i = n_i / (1 + gamma_h h_adj) * max(0, 1 + beta c) * q (server step 3, before the fallback) */
double fedscam_weight(double n, double gamma_h, double h_adj, double beta, double c, double q);

/* out[0..d) = scale * Proj_d(a - b) over a[0..n) (b NULL: a alone), accumulated in double. Proj_d: the signed
 * count sketch (gaussian = 0: coordinate k goes to bucket(k) with sign(k)) or dense N(0, 1/d) entries (gaussian
 * = 1), drawn from Philox (seed, projection) with the coordinate k as counter: the same on every rank and call. */
void fedscam_project(uint64_t seed, int gaussian, const float *a, const float *b, int64_t n, double scale, int d,
                     double *out);

/* k-means of the m rows of x [m, d] into k clusters (k <= m): k-means++ seeding from Philox (seed, projection)
 * with counter (round, tag), then Lloyd iterations until the assignments stop changing or 50 iterations;
 * ties go to the lower cluster index. assign[m]: the cluster of each row; work: fedscam_kmeans_scratch(m, d, k)
 * bytes. */
void fedscam_kmeans(const double *x, int m, int d, int k, uint64_t seed, uint32_t round, int *assign,
                    AlgoScratch work);
size_t fedscam_kmeans_scratch(int m, int d, int k);

#endif
