/* fedhet HDF5 helpers shared by dataset files, run files and checkpoints.
 *
 * Reading: FhH5File carries the path (every message starts with it) and the status a failure maps to
 * (FH_ERR_DATA for input data, FH_ERR_IO for checkpoints). HDF5's own stderr dump is switched off
 * between fh_h5_quiet_begin/end; the innermost message of its error stack is appended to ours instead.
 *
 * Writing is atomic: fh_h5_create writes PATH.tmp-<pid>; fh_h5_commit flushes, fsyncs and renames it
 * over PATH (then fsyncs the folder); fh_h5_discard removes it. A crash at any point leaves either the
 * old PATH or the new one, never a partial file. */
#ifndef FEDHET_H5IO_H
#define FEDHET_H5IO_H

#include <hdf5.h>
#include <stdint.h>

#define FH_H5_PATH_MAX 4096

typedef struct {
    hid_t id;
    const char *path;       /* for messages (the final path when writing) */
    int fail_status;        /* status of every failure */
    char tmp_path[FH_H5_PATH_MAX]; /* writing only */
    int write_errno;        /* writing: errno of the first failed write (the file is then discarded) */
} FhH5File;

typedef struct {
    H5E_auto2_t func;
    void *data;
} FhH5Quiet;

void fh_h5_quiet_begin(FhH5Quiet *saved);
void fh_h5_quiet_end(const FhH5Quiet *saved);
/* The deepest description on HDF5's current error stack, or "". Call right after the failing call. */
const char *fh_h5_message(char buf[256]);

/* Opens path read-only, telling a missing file, a non-HDF5 file and an unreadable one apart. */
int fh_h5_open(FhH5File *f, const char *path, int fail_status);
int fh_h5_close(FhH5File *f); /* closes if open; a failing close is an error */

/* *exists = whether "/a/b" resolves (a missing parent is "missing", not an error). */
int fh_h5_exists(const FhH5File *f, const char *name, int *exists);
int fh_h5_open_dataset(const FhH5File *f, const char *name, hid_t *dset);
/* Opens name and checks its class (H5T_INTEGER / H5T_FLOAT), element size and rank; dims (rank entries)
 * receive the extents. A mismatch names the dataset and what was found. */
int fh_h5_open_checked(const FhH5File *f, const char *name, H5T_class_t cls, size_t size, int rank, hsize_t *dims,
                       hid_t *dset);
/* Reads a whole dataset of `count` elements into buf as mem_type (after fh_h5_open_checked). */
int fh_h5_read_all(const FhH5File *f, const char *name, hid_t mem_type, void *buf);
/* Reads rows [first, first + rows) of a dataset whose rows are `row_elems` elements each (rank >= 1). */
int fh_h5_read_rows(const FhH5File *f, hid_t dset, const char *name, hid_t mem_type, hsize_t first, hsize_t rows,
                    void *buf);

/* "4-byte signed integer", "8-byte float", ... */
const char *fh_h5_type_text(hid_t type, char buf[64]);

/* ---- attributes on an object (the file root: f->id) ---- */
int fh_h5_attr_exists(const FhH5File *f, hid_t obj, const char *name, int *exists);
/* *out malloc'd; free() it */
int fh_h5_attr_read_string(const FhH5File *f, hid_t obj, const char *name, char **out);
/* exactly n numeric values, converted to double / int64 */
int fh_h5_attr_read_doubles(const FhH5File *f, hid_t obj, const char *name, double *out, int n);
int fh_h5_attr_read_int64s(const FhH5File *f, hid_t obj, const char *name, int64_t *out, int n);
int fh_h5_attr_write_string(const FhH5File *f, hid_t obj, const char *name, const char *value);
int fh_h5_attr_write_doubles(const FhH5File *f, hid_t obj, const char *name, const double *v, int n);
int fh_h5_attr_write_int64s(const FhH5File *f, hid_t obj, const char *name, const int64_t *v, int n);

/* ---- atomic writing ---- */
int fh_h5_create(FhH5File *f, const char *path, int fail_status);
int fh_h5_commit(FhH5File *f);
void fh_h5_discard(FhH5File *f);
int fh_h5_group(const FhH5File *f, const char *name, hid_t *group); /* creates; caller H5Gclose */

typedef struct {
    hsize_t chunk_rows; /* 0: contiguous */
    int deflate;        /* 0..9, 0 = off (needs chunk_rows) */
    int fletcher32;     /* checksum every chunk (needs chunk_rows) */
} FhH5Layout;

/* Creates dataset `name` of file_type with dims, without writing; caller H5Dclose. */
int fh_h5_create_dataset(const FhH5File *f, const char *name, hid_t file_type, int rank, const hsize_t *dims,
                         const FhH5Layout *layout, hid_t *dset);
/* Writes rows [first, first + rows) (rows run along dim 0). */
int fh_h5_write_rows(const FhH5File *f, hid_t dset, const char *name, hid_t mem_type, hsize_t first, hsize_t rows,
                     const void *buf);
/* create + write everything + close */
int fh_h5_write(const FhH5File *f, const char *name, hid_t mem_type, hid_t file_type, int rank, const hsize_t *dims,
                const FhH5Layout *layout, const void *buf);

/* ---- strings ---- */
/* A 1-D dataset of n UTF-8 strings at(ctx, 0 .. n-1), stored as fixed-length strings as long as the longest
 * (zero-padded, chunked, deflated at level deflate), gathered a block at a time: memory stays a few MiB whatever
 * n. h5py reads them as bytes. */
int fh_h5_write_strings(const FhH5File *f, const char *name, int64_t n, const char *(*at)(const void *ctx, int64_t i),
                        const void *ctx, int deflate);
/* A 1-D dataset of strings, fixed or variable length, into *out [*n] (each malloc'd: fh_h5_strings_free) */
int fh_h5_read_strings(const FhH5File *f, const char *name, char ***out, int64_t *n);
void fh_h5_strings_free(char ***strings, int64_t n);

#endif
