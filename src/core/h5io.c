/* HDF5 helpers: checked opens and reads with messages naming the file, attributes, atomic writes. */
#include "fedhet/h5io.h"
#include "fedhet/core.h"

#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define H5_FAIL(f, ...) return fh_error_raise((f)->fail_status, __FILE__, __LINE__, __VA_ARGS__)

void fh_h5_quiet_begin(FhH5Quiet *saved)
{
    H5Eget_auto2(H5E_DEFAULT, &saved->func, &saved->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void fh_h5_quiet_end(const FhH5Quiet *saved)
{
    H5Eset_auto2(H5E_DEFAULT, saved->func, saved->data);
}

static herr_t walk_cb(unsigned n, const H5E_error2_t *err, void *data)
{
    if (err && err->desc) snprintf((char *)data, 256, "%s", err->desc);
    return 0;
}

const char *fh_h5_message(char buf[256])
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, buf);
    return buf;
}

const char *fh_h5_type_text(hid_t type, char buf[64])
{
    size_t size = H5Tget_size(type);
    switch (H5Tget_class(type)) {
    case H5T_INTEGER:
        snprintf(buf, 64, "%zu-byte %s integer", size, H5Tget_sign(type) == H5T_SGN_NONE ? "unsigned" : "signed");
        break;
    case H5T_FLOAT: snprintf(buf, 64, "%zu-byte float", size); break;
    case H5T_STRING: snprintf(buf, 64, "string"); break;
    case H5T_COMPOUND: snprintf(buf, 64, "compound type"); break;
    case H5T_ENUM: snprintf(buf, 64, "enum type"); break;
    default: snprintf(buf, 64, "a non-numeric type"); break;
    }
    return buf;
}

int fh_h5_open(FhH5File *f, const char *path, int fail_status)
{
    f->path = path;
    f->id = H5I_INVALID_HID;
    f->fail_status = fail_status;
    f->tmp_path[0] = '\0';
    f->write_errno = 0;
    if (!path || !*path) FH_FAIL(fail_status, "HDF5 file path is empty");
    errno = 0;
    FILE *probe = fopen(path, "rb");
    /* a file that is missing or unreadable is input data for every caller (exit 2); fail_status is for what is
     * wrong inside one */
    if (!probe) FH_FAIL(FH_ERR_DATA, "%s: cannot open: %s", path, errno ? strerror(errno) : "unknown error");
    fclose(probe);
    char msg[256];
#if H5_VERSION_GE(1, 12, 0)
    htri_t is_hdf5 = H5Fis_accessible(path, H5P_DEFAULT);
#else
    htri_t is_hdf5 = H5Fis_hdf5(path);
#endif
    if (is_hdf5 == 0) H5_FAIL(f, "%s: not an HDF5 file (no HDF5 signature found)", path);
    if (is_hdf5 < 0) H5_FAIL(f, "%s: not an HDF5 file, or unreadable (HDF5: %s)", path, fh_h5_message(msg));
    f->id = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f->id < 0) H5_FAIL(f, "%s: cannot open as HDF5 (HDF5: %s)", path, fh_h5_message(msg));
    return FH_OK;
}

int fh_h5_close(FhH5File *f)
{
    if (f->id < 0) return FH_OK;
    herr_t rc = H5Fclose(f->id);
    f->id = H5I_INVALID_HID;
    if (rc < 0) {
        char msg[256];
        H5_FAIL(f, "%s: closing the file failed (HDF5: %s)", f->path, fh_h5_message(msg));
    }
    return FH_OK;
}

int fh_h5_exists(const FhH5File *f, const char *name, int *exists)
{
    char part[256];
    *exists = 0;
    size_t len = strlen(name);
    if (len >= sizeof part) H5_FAIL(f, "%s: object name %s is too long", f->path, name);
    for (size_t i = 1; i <= len; i++) {
        if (i < len && name[i] != '/') continue;
        memcpy(part, name, i);
        part[i] = '\0';
        htri_t e = H5Lexists(f->id, part, H5P_DEFAULT);
        if (e < 0) {
            char msg[256];
            H5_FAIL(f, "%s: cannot look up %s (is a parent of it not a group?) (HDF5: %s)", f->path, part,
                    fh_h5_message(msg));
        }
        if (e == 0) return FH_OK;
    }
    *exists = 1;
    return FH_OK;
}

int fh_h5_open_dataset(const FhH5File *f, const char *name, hid_t *dset)
{
    int exists;
    *dset = H5I_INVALID_HID;
    FH_CHECK(fh_h5_exists(f, name, &exists));
    if (!exists) H5_FAIL(f, "%s: dataset %s is missing", f->path, name);
    *dset = H5Dopen2(f->id, name, H5P_DEFAULT);
    if (*dset < 0) {
        char msg[256];
        H5_FAIL(f, "%s: %s is not a readable dataset (HDF5: %s)", f->path, name, fh_h5_message(msg));
    }
    return FH_OK;
}

int fh_h5_open_checked(const FhH5File *f, const char *name, H5T_class_t cls, size_t size, int rank, hsize_t *dims,
                       hid_t *dset)
{
    FH_CHECK(fh_h5_open_dataset(f, name, dset));
    char msg[256], tbuf[64];
    int status = FH_OK;
    hid_t type = H5Dget_type(*dset), space = H5Dget_space(*dset);
    if (type < 0 || space < 0) {
        status = fh_error_raise(f->fail_status, __FILE__, __LINE__, "%s: cannot query %s (HDF5: %s)", f->path, name,
                                fh_h5_message(msg));
    } else if (H5Tget_class(type) != cls || (size && H5Tget_size(type) != size)) {
        char want[32] = ""; /* size 0: any size of that class */
        if (size) snprintf(want, sizeof want, "%zu-byte ", size);
        const char *kind = cls == H5T_INTEGER ? (size ? "integer" : "an integer")
                         : cls == H5T_STRING  ? "strings"
                                              : (size ? "float" : "a float");
        status = fh_error_raise(f->fail_status, __FILE__, __LINE__, "%s: %s must be %s%s%s (found %s)", f->path, name,
                                size ? "a " : "", want, kind, fh_h5_type_text(type, tbuf));
    } else if (H5Sget_simple_extent_ndims(space) != rank) {
        status = fh_error_raise(f->fail_status, __FILE__, __LINE__, "%s: %s must have rank %d (found %d)", f->path, name,
                                rank, H5Sget_simple_extent_ndims(space));
    } else {
        H5Sget_simple_extent_dims(space, dims, NULL);
    }
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (status != FH_OK) {
        H5Dclose(*dset);
        *dset = H5I_INVALID_HID;
    }
    return status;
}

int fh_h5_read_all(const FhH5File *f, const char *name, hid_t mem_type, void *buf)
{
    hid_t dset;
    FH_CHECK(fh_h5_open_dataset(f, name, &dset));
    herr_t rc = H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    char msg[256];
    if (rc < 0) fh_h5_message(msg);
    H5Dclose(dset);
    if (rc < 0) H5_FAIL(f, "%s: reading %s failed (HDF5: %s)", f->path, name, msg);
    return FH_OK;
}

/* Selects rows [first, first + rows) of dset's dataspace; *mspace and *fspace are the caller's to close. */
static int select_rows(const FhH5File *f, hid_t dset, const char *name, hsize_t first, hsize_t rows, hid_t *fspace,
                       hid_t *mspace)
{
    hsize_t dims[8], start[8] = { 0 };
    char msg[256];
    *mspace = H5I_INVALID_HID;
    *fspace = H5Dget_space(dset);
    int rank = *fspace >= 0 ? H5Sget_simple_extent_ndims(*fspace) : -1;
    if (rank < 1 || rank > 8) H5_FAIL(f, "%s: cannot query %s (HDF5: %s)", f->path, name, fh_h5_message(msg));
    H5Sget_simple_extent_dims(*fspace, dims, NULL);
    if (first + rows > dims[0])
        H5_FAIL(f, "%s: rows %llu..%llu of %s requested but it has %llu", f->path, (unsigned long long)first,
                (unsigned long long)(first + rows), name, (unsigned long long)dims[0]);
    start[0] = first;
    dims[0] = rows;
    *mspace = H5Screate_simple(rank, dims, NULL);
    if (*mspace < 0 || H5Sselect_hyperslab(*fspace, H5S_SELECT_SET, start, NULL, dims, NULL) < 0)
        H5_FAIL(f, "%s: selecting rows of %s failed (HDF5: %s)", f->path, name, fh_h5_message(msg));
    return FH_OK;
}

/* A chunked dataset with whole rows per chunk and the file type equal to mem_type: 0 when it has no filter, the
 * level when its one filter is deflate; -1 for any other dataset. *chunk_rows and *row_bytes describe its chunks. */
static int whole_row_chunks(hid_t dset, hid_t mem_type, hsize_t *dims0, hsize_t *chunk_rows, size_t *row_bytes)
{
    hid_t dcpl = H5Dget_create_plist(dset), ftype = H5Dget_type(dset), space = H5Dget_space(dset);
    hsize_t dims[8], chunk[8];
    unsigned flags, config, cd[4];
    size_t n_cd = 4;
    char filter_name[8];
    int level = -1, rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    if (dcpl >= 0 && ftype >= 0 && rank >= 1 && rank <= 8 && H5Sget_simple_extent_dims(space, dims, NULL) == rank &&
        H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, rank, chunk) == rank && H5Tequal(ftype, mem_type) > 0) {
        const int n_filters = H5Pget_nfilters(dcpl);
        if (n_filters == 0) level = 0;
        else if (n_filters == 1 &&
                 H5Pget_filter2(dcpl, 0, &flags, &n_cd, cd, sizeof filter_name, filter_name, &config) == H5Z_FILTER_DEFLATE &&
                 n_cd >= 1 && cd[0] >= 1 && cd[0] <= 9)
            level = (int)cd[0];
        size_t bytes = H5Tget_size(ftype);
        for (int k = 1; k < rank; k++) {
            if (chunk[k] != dims[k]) level = -1;
            bytes *= dims[k];
        }
        *dims0 = dims[0];
        *chunk_rows = chunk[0];
        *row_bytes = bytes;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (ftype >= 0) H5Tclose(ftype);
    if (space >= 0) H5Sclose(space);
    return level;
}

/* Rows that fill whole chunks of a dataset without filters or with deflate alone are written as chunks
 * (H5Dwrite_chunk), past HDF5's chunk cache; deflated ones compressed by libdeflate first: the zlib stream HDF5's
 * own filter writes, which every HDF5 reader reads, at 2-3 times zlib's speed (image rows barely compress, and
 * zlib was most of a partition's time). 1: written; 0: the rows do not qualify (HDF5 writes them); -1: an HDF5
 * or memory failure. */
static int write_whole_chunks(hid_t dset, hid_t mem_type, hsize_t first, hsize_t rows, const void *buf)
{
    static struct libdeflate_compressor *compressors[10]; /* one per level, kept: HDF5 writes from one thread */
    hsize_t dims0 = 0, chunk_rows = 1;
    size_t row_bytes = 0;
    const int level = whole_row_chunks(dset, mem_type, &dims0, &chunk_rows, &row_bytes);
    if (level < 0 || first % chunk_rows || (rows % chunk_rows && first + rows != dims0)) return 0;
    if (level && !compressors[level] && !(compressors[level] = libdeflate_alloc_compressor(level))) return -1;
    struct libdeflate_compressor *c = compressors[level];
    const size_t chunk_bytes = chunk_rows * row_bytes, bound = c ? libdeflate_zlib_compress_bound(c, chunk_bytes) : 0;
    uint8_t *out = c ? malloc(bound) : NULL, *padded = NULL;
    int result = out || !c ? 1 : -1;
    for (hsize_t r = first; result == 1 && r < first + rows; r += chunk_rows) {
        const uint8_t *src = (const uint8_t *)buf + (r - first) * row_bytes;
        const hsize_t n = first + rows - r < chunk_rows ? first + rows - r : chunk_rows;
        if (n < chunk_rows) { /* the dataset's last chunk: stored whole, its rows past the end as zeros */
            if (!(padded = calloc(1, chunk_bytes))) {
                result = -1;
                break;
            }
            memcpy(padded, src, n * row_bytes);
            src = padded;
        }
        const size_t len = c ? libdeflate_zlib_compress(c, src, chunk_bytes, out, bound) : chunk_bytes;
        hsize_t offset[8] = { r };
        if (!len || H5Dwrite_chunk(dset, H5P_DEFAULT, 0, offset, len, c ? out : src) < 0) result = -1;
    }
    free(padded);
    free(out);
    return result;
}

static int rows_io(const FhH5File *f, hid_t dset, const char *name, hid_t mem_type, hsize_t first, hsize_t rows,
                   void *buf, int writing)
{
    if (rows == 0) return FH_OK;
    hid_t fspace, mspace;
    int status = select_rows(f, dset, name, first, rows, &fspace, &mspace);
    if (status == FH_OK) {
        herr_t rc;
        if (!writing) rc = H5Dread(dset, mem_type, mspace, fspace, H5P_DEFAULT, buf);
        else {
            const int direct = write_whole_chunks(dset, mem_type, first, rows, buf);
            rc = direct > 0 ? 0 : direct < 0 ? -1 : H5Dwrite(dset, mem_type, mspace, fspace, H5P_DEFAULT, buf);
        }
        if (rc < 0) {
            char msg[256];
            status = fh_error_raise(f->fail_status, __FILE__, __LINE__, "%s: %s rows %llu..%llu of %s failed (HDF5: %s)",
                                    f->path, writing ? "writing" : "reading", (unsigned long long)first,
                                    (unsigned long long)(first + rows - 1), name, fh_h5_message(msg));
        }
    }
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    return status;
}

int fh_h5_read_rows(const FhH5File *f, hid_t dset, const char *name, hid_t mem_type, hsize_t first, hsize_t rows,
                    void *buf)
{
    return rows_io(f, dset, name, mem_type, first, rows, buf, 0);
}

int fh_h5_write_rows(const FhH5File *f, hid_t dset, const char *name, hid_t mem_type, hsize_t first, hsize_t rows,
                     const void *buf)
{
    return rows_io(f, dset, name, mem_type, first, rows, (void *)buf, 1);
}

/* ---- attributes ---- */

int fh_h5_attr_exists(const FhH5File *f, hid_t obj, const char *name, int *exists)
{
    htri_t e = H5Aexists(obj, name);
    if (e < 0) {
        char msg[256];
        H5_FAIL(f, "%s: cannot check for attribute %s (HDF5: %s)", f->path, name, fh_h5_message(msg));
    }
    *exists = e > 0;
    return FH_OK;
}

/* Opens attribute `name` of obj with its type and dataspace; missing → error naming it. */
static int attr_open(const FhH5File *f, hid_t obj, const char *name, hid_t *attr, hid_t *type, hid_t *space)
{
    int exists = 0;
    *attr = *type = *space = H5I_INVALID_HID;
    FH_CHECK(fh_h5_attr_exists(f, obj, name, &exists));
    if (!exists) H5_FAIL(f, "%s: attribute %s is missing", f->path, name);
    *attr = H5Aopen(obj, name, H5P_DEFAULT);
    *type = *attr >= 0 ? H5Aget_type(*attr) : H5I_INVALID_HID;
    *space = *attr >= 0 ? H5Aget_space(*attr) : H5I_INVALID_HID;
    if (*attr < 0 || *type < 0 || *space < 0) {
        char msg[256];
        H5_FAIL(f, "%s: cannot open attribute %s (HDF5: %s)", f->path, name, fh_h5_message(msg));
    }
    return FH_OK;
}

static void attr_close(hid_t attr, hid_t type, hid_t space)
{
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
}

int fh_h5_attr_read_string(const FhH5File *f, hid_t obj, const char *name, char **out)
{
    hid_t attr, type, space, mtype = H5I_INVALID_HID;
    char msg[256], tbuf[64];
    *out = NULL;
    int status = attr_open(f, obj, name, &attr, &type, &space);
    if (status != FH_OK) goto done;
    if (H5Tget_class(type) != H5T_STRING || H5Sget_simple_extent_npoints(space) != 1) {
        status = fh_error_raise(f->fail_status, __FILE__, __LINE__, "%s: attribute %s must be one string (found %s)",
                                f->path, name, H5Tget_class(type) != H5T_STRING ? fh_h5_type_text(type, tbuf)
                                                                                : "several values");
        goto done;
    }
    mtype = H5Tcopy(H5T_C_S1);
    herr_t rd = -1;
    if (H5Tis_variable_str(type) > 0) {
        char *s = NULL;
        if (H5Tset_size(mtype, H5T_VARIABLE) >= 0 && H5Tset_cset(mtype, H5Tget_cset(type)) >= 0 &&
            (rd = H5Aread(attr, mtype, &s)) >= 0) {
            *out = strdup(s ? s : "");
            H5free_memory(s);
        }
    } else {
        size_t size = H5Tget_size(type);
        status = fh_calloc(out, size + 1, 1, name);
        if (status != FH_OK) goto done;
        if (H5Tset_size(mtype, size + 1) >= 0 && H5Tset_strpad(mtype, H5T_STR_NULLTERM) >= 0 &&
            H5Tset_cset(mtype, H5Tget_cset(type)) >= 0)
            rd = H5Aread(attr, mtype, *out);
    }
    if (rd < 0 || !*out) {
        free(*out);
        *out = NULL;
        status = fh_error_raise(f->fail_status, __FILE__, __LINE__, "%s: cannot read attribute %s (HDF5: %s)", f->path,
                                name, fh_h5_message(msg));
    }
done:
    if (mtype >= 0) H5Tclose(mtype);
    attr_close(attr, type, space);
    return status;
}

static int attr_read_numbers(const FhH5File *f, hid_t obj, const char *name, hid_t mem_type, void *out, int n)
{
    hid_t attr, type, space;
    char msg[256], tbuf[64];
    int status = attr_open(f, obj, name, &attr, &type, &space);
    if (status == FH_OK) {
        H5T_class_t cls = H5Tget_class(type);
        hssize_t count = H5Sget_simple_extent_npoints(space);
        if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || count != n)
            status = fh_error_raise(f->fail_status, __FILE__, __LINE__,
                                    "%s: attribute %s must be %d number%s (found %lld of %s)", f->path, name, n,
                                    n == 1 ? "" : "s", (long long)count, fh_h5_type_text(type, tbuf));
        else if (H5Aread(attr, mem_type, out) < 0)
            status = fh_error_raise(f->fail_status, __FILE__, __LINE__, "%s: cannot read attribute %s (HDF5: %s)",
                                    f->path, name, fh_h5_message(msg));
    }
    attr_close(attr, type, space);
    return status;
}

int fh_h5_attr_read_doubles(const FhH5File *f, hid_t obj, const char *name, double *out, int n)
{
    return attr_read_numbers(f, obj, name, H5T_NATIVE_DOUBLE, out, n);
}

int fh_h5_attr_read_int64s(const FhH5File *f, hid_t obj, const char *name, int64_t *out, int n)
{
    return attr_read_numbers(f, obj, name, H5T_NATIVE_INT64, out, n);
}

static int attr_write(const FhH5File *f, hid_t obj, const char *name, hid_t file_type, hid_t mem_type, hsize_t n,
                      const void *buf)
{
    hid_t space = n == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, NULL);
    hid_t attr = space >= 0 ? H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT) : H5I_INVALID_HID;
    herr_t rc = attr >= 0 ? H5Awrite(attr, mem_type, buf) : -1;
    char msg[256];
    if (rc < 0) fh_h5_message(msg);
    if (attr >= 0) H5Aclose(attr);
    if (space >= 0) H5Sclose(space);
    if (rc < 0) H5_FAIL(f, "%s: writing attribute %s failed (HDF5: %s)", f->path, name, msg);
    return FH_OK;
}

int fh_h5_attr_write_string(const FhH5File *f, hid_t obj, const char *name, const char *value)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(value) + 1);
    H5Tset_strpad(type, H5T_STR_NULLTERM);
    H5Tset_cset(type, H5T_CSET_UTF8);
    int status = attr_write(f, obj, name, type, type, 0, value);
    H5Tclose(type);
    return status;
}

int fh_h5_attr_write_doubles(const FhH5File *f, hid_t obj, const char *name, const double *v, int n)
{
    return attr_write(f, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, (hsize_t)n, v);
}

int fh_h5_attr_write_int64s(const FhH5File *f, hid_t obj, const char *name, const int64_t *v, int n)
{
    return attr_write(f, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, (hsize_t)n, v);
}

/* ---- atomic writing ---- */

/* Files are written through a small POSIX driver of our own instead of HDF5's sec2 driver, for one
 * reason: a write that fails (ENOSPC, EFBIG, EIO) inside HDF5 leaves dirty metadata that H5Fclose then
 * cannot flush; with sec2 the close fails half-way and HDF5 1.10 keeps a dangling file ID that it closes
 * again at MPI_Finalize, where it crashes. Here the first failed write is recorded (errno, in the
 * FhH5File) and every later write of that file is dropped, so the close always succeeds, the temporary
 * is removed, and the error reaches the caller with the file's name. A file with a recorded failure is
 * never committed. The driver's struct is HDF5 1.10's (Debian's); later versions keep sec2. */
#if !H5_VERSION_GE(1, 11, 0)
#include <sys/stat.h>

typedef struct {
    int *failed; /* the FhH5File's write_errno */
} SafeFapl;

typedef struct {
    H5FD_t pub; /* first: HDF5 casts */
    int fd;
    haddr_t eoa, eof;
    dev_t dev;
    ino_t ino;
    int *failed;
    int in_use; /* a slot of safe_slots */
} SafeFile;

/* A run writes one file at a time: its checkpoints come from these slots, so that the round loop allocates
 * nothing (tests/unit/test_round_alloc.c); more files open at once are allocated. */
#define SAFE_SLOTS 4
static SafeFile safe_slots[SAFE_SLOTS];

static H5FD_t *safe_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
    (void)maxaddr;
    const SafeFapl *fa = H5Pget_driver_info(fapl);
    int o = (flags & H5F_ACC_RDWR) ? O_RDWR : O_RDONLY;
    if (flags & H5F_ACC_CREAT) o |= O_CREAT;
    if (flags & H5F_ACC_TRUNC) o |= O_TRUNC;
    if (flags & H5F_ACC_EXCL) o |= O_EXCL;
    int fd = open(name, o | O_CLOEXEC, 0666);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) close(fd);
        H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_FILE, H5E_CANTOPENFILE, "%s: %s", name,
                 strerror(errno));
        return NULL;
    }
    SafeFile *f = NULL;
    for (int i = 0; i < SAFE_SLOTS && !f; i++)
        if (!safe_slots[i].in_use) f = &safe_slots[i];
    if (!f) f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return NULL;
    }
    memset(f, 0, sizeof *f);
    f->in_use = 1;
    f->fd = fd;
    f->eof = (haddr_t)st.st_size;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->failed = fa ? fa->failed : NULL;
    return &f->pub;
}

static herr_t safe_close(H5FD_t *file)
{
    SafeFile *f = (SafeFile *)file;
    int rc = close(f->fd);
    if (rc != 0 && f->failed && !*f->failed) *f->failed = errno;
    if (f >= safe_slots && f < safe_slots + SAFE_SLOTS) f->in_use = 0;
    else free(f);
    return 0;
}

static int safe_cmp(const H5FD_t *a, const H5FD_t *b)
{
    const SafeFile *x = (const SafeFile *)a, *y = (const SafeFile *)b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return 0;
}

static herr_t safe_query(const H5FD_t *file, unsigned long *flags)
{
    (void)file;
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
    return 0;
}

static haddr_t safe_get_eoa(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const SafeFile *)file)->eoa;
}

static herr_t safe_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr)
{
    (void)type;
    ((SafeFile *)file)->eoa = addr;
    return 0;
}

static haddr_t safe_get_eof(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const SafeFile *)file)->eof;
}

static herr_t safe_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, void *buf)
{
    (void)type, (void)dxpl;
    SafeFile *f = (SafeFile *)file;
    char *p = buf;
    while (size > 0) {
        ssize_t n = pread(f->fd, p, size, (off_t)addr);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_IO, H5E_READERROR, "read failed: %s",
                     strerror(errno));
            return -1;
        }
        if (n == 0) { /* past the end (or dropped writes): zeros, as sec2 gives */
            memset(p, 0, size);
            break;
        }
        p += n, addr += (haddr_t)n, size -= (size_t)n;
    }
    return 0;
}

static herr_t safe_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, const void *buf)
{
    (void)type, (void)dxpl;
    SafeFile *f = (SafeFile *)file;
    if (f->failed && *f->failed) return 0; /* the file is lost already: let HDF5 close it */
    const char *p = buf;
    const haddr_t end = addr + size;
    while (size > 0) {
        ssize_t n = pwrite(f->fd, p, size, (off_t)addr);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EIO;
            if (f->failed) *f->failed = err;
            H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_IO, H5E_WRITEERROR, "%s",
                     strerror(err));
            return -1;
        }
        p += n, addr += (haddr_t)n, size -= (size_t)n;
    }
    if (end > f->eof) f->eof = end;
    return 0;
}

static herr_t safe_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing)
{
    (void)dxpl, (void)closing;
    SafeFile *f = (SafeFile *)file;
    if ((f->failed && *f->failed) || f->eoa == f->eof) return 0;
    if (ftruncate(f->fd, (off_t)f->eoa) != 0) {
        if (f->failed) *f->failed = errno;
        H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_IO, H5E_SEEKERROR, "%s", strerror(errno));
        return -1;
    }
    f->eof = f->eoa;
    return 0;
}

static const H5FD_class_t safe_class = {
    .name = "fedhet-posix",
    .maxaddr = (haddr_t)INT64_MAX,
    .fc_degree = H5F_CLOSE_WEAK,
    .fapl_size = sizeof(SafeFapl),
    .open = safe_open,
    .close = safe_close,
    .cmp = safe_cmp,
    .query = safe_query,
    .get_eoa = safe_get_eoa,
    .set_eoa = safe_set_eoa,
    .get_eof = safe_get_eof,
    .read = safe_read,
    .write = safe_write,
    .truncate = safe_truncate,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

static int set_safe_driver(hid_t fapl, FhH5File *f)
{
    static hid_t driver = H5I_INVALID_HID;
    if (driver < 0 || H5Iis_valid(driver) <= 0) driver = H5FDregister(&safe_class);
    const SafeFapl info = { &f->write_errno };
    return driver >= 0 && H5Pset_driver(fapl, driver, &info) >= 0 ? 0 : -1;
}
#else
static int set_safe_driver(hid_t fapl, FhH5File *f)
{
    (void)fapl, (void)f;
    return 0;
}
#endif

/* "No space left on device" and the like, when the driver saw a write fail; else HDF5's message */
static const char *write_failure(const FhH5File *f, char msg[256])
{
    if (f->write_errno) snprintf(msg, 256, "%s", strerror(f->write_errno));
    else fh_h5_message(msg);
    return msg;
}

int fh_h5_create(FhH5File *f, const char *path, int fail_status)
{
    f->path = path;
    f->fail_status = fail_status;
    f->id = H5I_INVALID_HID;
    f->tmp_path[0] = '\0';
    f->write_errno = 0;
    if (!path || !*path) FH_FAIL(fail_status, "output file path is empty");
    FH_CHECK(fh_atomic_tmp_path(f->tmp_path, sizeof f->tmp_path, path));
    fh_atomic_sweep_stale(path);
    /* fixed file-space settings and no timestamps keep the bytes of equal content equal */
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_obj_track_times(fcpl, 0); /* the root group too */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    /* the 1.10 format checksums object headers and chunk indexes too, not only chunk data (Fletcher32):
     * a damaged index is then refused instead of read as zeros or unchecked chunks */
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110);
    errno = 0;
    fh_tmp_register(f->tmp_path); /* before the file exists: a signal while HDF5 makes it still removes it */
    f->id = set_safe_driver(fapl, f) == 0 ? H5Fcreate(f->tmp_path, H5F_ACC_TRUNC, fcpl, fapl) : H5I_INVALID_HID;
    H5Pclose(fcpl);
    H5Pclose(fapl);
    if (f->id < 0) {
        char msg[256];
        fh_h5_message(msg);
        int err = errno;
        unlink(f->tmp_path);
        fh_tmp_forget(f->tmp_path);
        f->tmp_path[0] = '\0';
        H5_FAIL(f, "%s: cannot create the file (%s; HDF5: %s)", path, err ? strerror(err) : "unknown", msg);
    }
    return FH_OK;
}

int fh_h5_commit(FhH5File *f)
{
    char msg[256];
    const int flushed = H5Fflush(f->id, H5F_SCOPE_GLOBAL) >= 0;
    if (!flushed) write_failure(f, msg);
    const int closed = H5Fclose(f->id) >= 0;
    if (flushed && !closed) write_failure(f, msg);
    f->id = H5I_INVALID_HID;
    if (!flushed || !closed || f->write_errno) {
        if (flushed && closed) write_failure(f, msg);
        fh_h5_discard(f);
        H5_FAIL(f, "%s: cannot write: %s (the previous %s, if any, is kept)", f->path, msg, f->path);
    }
    /* fh_atomic_replace removes the temporary itself on failure */
    const int status = fh_atomic_replace(f->tmp_path, f->path);
    f->tmp_path[0] = '\0';
    return status;
}

void fh_h5_discard(FhH5File *f)
{
    /* after a failed write the driver drops the rest, so this close succeeds and leaves no open ID */
    if (f->id >= 0) H5Fclose(f->id);
    f->id = H5I_INVALID_HID;
    if (f->tmp_path[0]) {
        unlink(f->tmp_path);
        fh_tmp_forget(f->tmp_path);
    }
    f->tmp_path[0] = '\0';
}

int fh_h5_group(const FhH5File *f, const char *name, hid_t *group)
{
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0);
    *group = H5Gcreate2(f->id, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    if (*group < 0) {
        char msg[256];
        H5_FAIL(f, "%s: cannot create group %s (HDF5: %s)", f->path, name, fh_h5_message(msg));
    }
    return FH_OK;
}

int fh_h5_create_dataset(const FhH5File *f, const char *name, hid_t file_type, int rank, const hsize_t *dims,
                         const FhH5Layout *layout, hid_t *dset)
{
    char msg[256];
    hid_t space = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int ok = space >= 0 && dcpl >= 0;
    /* no modification times: equal content gives equal bytes */
    if (ok) ok = H5Pset_obj_track_times(dcpl, 0) >= 0;
    if (ok && layout && layout->chunk_rows > 0 && dims[0] > 0) {
        hsize_t chunk[8];
        for (int i = 0; i < rank && i < 8; i++) chunk[i] = dims[i] > 0 ? dims[i] : 1;
        chunk[0] = layout->chunk_rows < dims[0] ? layout->chunk_rows : dims[0];
        ok = H5Pset_chunk(dcpl, rank, chunk) >= 0;
        if (ok && layout->fletcher32) ok = H5Pset_fletcher32(dcpl) >= 0;
        if (ok && layout->deflate > 0) ok = H5Pset_deflate(dcpl, (unsigned)layout->deflate) >= 0;
    }
    /* no fill pass: every element is written */
    if (ok) ok = H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0;
    *dset = ok ? H5Dcreate2(f->id, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT) : H5I_INVALID_HID;
    if (*dset < 0) fh_h5_message(msg);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    if (*dset < 0) H5_FAIL(f, "%s: cannot create dataset %s (HDF5: %s)", f->path, name, msg);
    return FH_OK;
}

int fh_h5_write(const FhH5File *f, const char *name, hid_t mem_type, hid_t file_type, int rank, const hsize_t *dims,
                const FhH5Layout *layout, const void *buf)
{
    hid_t dset;
    FH_CHECK(fh_h5_create_dataset(f, name, file_type, rank, dims, layout, &dset));
    herr_t rc = dims[0] > 0 ? H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) : 0;
    char msg[256];
    if (rc < 0) fh_h5_message(msg);
    H5Dclose(dset);
    if (rc < 0) H5_FAIL(f, "%s: writing %s failed (HDF5: %s)", f->path, name, msg);
    return FH_OK;
}

/* ---- strings ---- */

/* fixed-length UTF-8 strings of len bytes, zero-padded: unlike variable-length ones they go through the chunk
 * filters, and paths that share their beginnings deflate well */
static hid_t string_type(size_t len)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type >= 0 && (H5Tset_size(type, len) < 0 || H5Tset_strpad(type, H5T_STR_NULLPAD) < 0 ||
                      H5Tset_cset(type, H5T_CSET_UTF8) < 0)) {
        H5Tclose(type);
        type = H5I_INVALID_HID;
    }
    return type;
}

/* Rows of strings are gathered this many bytes at a time */
#define FH_H5_STRING_BLOCK ((size_t)8 << 20)

int fh_h5_write_strings(const FhH5File *f, const char *name, int64_t n, const char *(*at)(const void *ctx, int64_t i),
                        const void *ctx, int deflate)
{
    size_t len = 1;
    for (int64_t i = 0; i < n; i++) {
        const size_t l = strlen(at(ctx, i));
        if (l > len) len = l;
    }
    hid_t type = string_type(len), dset = H5I_INVALID_HID;
    if (type < 0) {
        char msg[256];
        H5_FAIL(f, "%s: cannot make a string type of %zu bytes for %s (HDF5: %s)", f->path, len, name, fh_h5_message(msg));
    }
    const hsize_t dims = (hsize_t)n, chunk = (64u << 10) / len ? (64u << 10) / len : 1;
    const FhH5Layout layout = { chunk, deflate, 0 };
    /* whole chunks per block, so that fh_h5_write_rows writes them as chunks */
    const int64_t block = (int64_t)(FH_H5_STRING_BLOCK / len / chunk > 0 ? FH_H5_STRING_BLOCK / len / chunk * chunk : chunk);
    char *buf = NULL;
    int status = fh_h5_create_dataset(f, name, type, 1, &dims, &layout, &dset);
    if (status == FH_OK) status = fh_calloc(&buf, (size_t)(n < block ? (n ? n : 1) : block), len, name);
    for (int64_t first = 0; status == FH_OK && first < n; first += block) {
        const int64_t rows = n - first < block ? n - first : block;
        memset(buf, 0, (size_t)rows * len);
        for (int64_t i = 0; i < rows; i++) {
            const char *t = at(ctx, first + i);
            memcpy(buf + (size_t)i * len, t, strlen(t));
        }
        status = fh_h5_write_rows(f, dset, name, type, (hsize_t)first, (hsize_t)rows, buf);
    }
    fh_free(&buf);
    if (dset >= 0) H5Dclose(dset);
    H5Tclose(type);
    return status;
}

void fh_h5_strings_free(char ***strings, int64_t n)
{
    for (int64_t i = 0; *strings && i < n; i++) free((*strings)[i]);
    free(*strings);
    *strings = NULL;
}

int fh_h5_read_strings(const FhH5File *f, const char *name, char ***out, int64_t *n)
{
    hsize_t dims;
    hid_t dset, ftype = H5I_INVALID_HID, mtype = H5I_INVALID_HID;
    char *fixed = NULL, **variable = NULL;
    *out = NULL;
    *n = 0;
    FH_CHECK(fh_h5_open_checked(f, name, H5T_STRING, 0, 1, &dims, &dset));
    const int is_variable = (ftype = H5Dget_type(dset)) >= 0 && H5Tis_variable_str(ftype) > 0;
    const size_t len = ftype >= 0 ? H5Tget_size(ftype) : 0;
    const size_t count = dims ? (size_t)dims : 1;
    int status = fh_calloc(out, count, sizeof **out, name);
    /* fixed-length strings are read one byte longer, so that each ends in a zero */
    if (status == FH_OK) status = is_variable ? fh_calloc(&variable, count, sizeof *variable, name)
                                              : fh_calloc(&fixed, count, len + 1, name);
    if (status == FH_OK) {
        mtype = H5Tcopy(H5T_C_S1);
        herr_t rc = mtype < 0 || H5Tset_size(mtype, is_variable ? H5T_VARIABLE : len + 1) < 0 ||
                    H5Tset_cset(mtype, H5Tget_cset(ftype)) < 0 ||
                    (!is_variable && H5Tset_strpad(mtype, H5T_STR_NULLTERM) < 0) ? -1 : 0;
        if (rc >= 0 && dims) rc = H5Dread(dset, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, is_variable ? (void *)variable : fixed);
        if (rc < 0) {
            char msg[256];
            status = fh_error_raise(f->fail_status, __FILE__, __LINE__, "%s: reading the strings of %s failed (HDF5: %s)",
                                    f->path, name, fh_h5_message(msg));
        }
    }
    for (hsize_t i = 0; status == FH_OK && i < dims; i++) {
        const char *t = is_variable ? variable[i] : fixed + i * (len + 1);
        if (!((*out)[i] = strdup(t ? t : "")))
            status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory for the strings of %s", name);
    }
    if (variable && status == FH_OK && dims) {
        hid_t space = H5Dget_space(dset);
        H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, variable);
        H5Sclose(space);
    }
    free(variable);
    free(fixed);
    if (mtype >= 0) H5Tclose(mtype);
    if (ftype >= 0) H5Tclose(ftype);
    H5Dclose(dset);
    if (status != FH_OK) fh_h5_strings_free(out, (int64_t)count);
    else *n = (int64_t)dims;
    return status;
}
