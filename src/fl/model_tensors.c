/* The model as named tensors in PyTorch's names and shapes (/model/conv1.weight, /model/bn1.running_mean,
 * ...) beside the flat state of run.h5 and checkpoints, and reading them back for [model] init.
 *   /model              attributes: arch, norm, groups, input [C, H, W], classes, tensors (the names in
 *                       layer order, each layer's weight, bias, running_mean, running_var,
 *                       num_batches_tracked: the order of a torch state_dict); for a model imported from ONNX
 *                       also sources, aligned with tensors: the initializer each started from, or empty
 *   /model/<name>       float32 in the view's shape
 *   /model/<bn>.num_batches_tracked   int64 scalar 0: fedhet's BatchNorm always uses momentum 0.1, as
 *                       torch does whenever momentum is set, so the count never matters; it is written
 *                       so that torch's load_state_dict(strict=True) finds every key it expects. */
#include "fl_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/buf.h"
#include "fedhet/core.h"
#include "fedhet/h5io.h"

#define NBT_SUFFIX ".num_batches_tracked"

static const char *const role_order_suffix[] = { "weight", "bias", "running_mean", "running_var" };

/* The views of layer li in state_dict order (weight, bias, running_mean, running_var). */
static int layer_views(const NnModel *m, int li, const NnParamView **out)
{
    int n = 0;
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < m->n_views; v++) {
            const NnParamView *pv = &m->views[v];
            const char *dot = strrchr(pv->name, '.');
            if (pv->layer == li && dot && !strcmp(dot + 1, role_order_suffix[r])) out[n++] = pv;
        }
    return n;
}

/* The texts of messages below ignore fh_text_add's status: memory running out only shortens them, and the error they
 * are part of is raised after them. */
static void text_dims(FhText *b, int ndim, const hsize_t *dims)
{
    fh_text_add(b, "[");
    for (int i = 0; i < ndim; i++) fh_text_add(b, "%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
    fh_text_add(b, "]");
}

static void view_dims(const NnParamView *pv, hsize_t *dims)
{
    for (int i = 0; i < pv->ndim; i++) dims[i] = (hsize_t)pv->dims[i];
}

/* The model's tensors in state_dict order: each layer's views (weight, bias, running_mean, running_var), then
 * a BatchNorm layer's num_batches_tracked (pv NULL). The walk ends at fn's first error. */
static int each_tensor(const NnModel *m, int (*fn)(void *env, const char *name, const NnParamView *pv), void *env)
{
    int status = FH_OK;
    for (int li = 0; li < m->n_layers && status == FH_OK; li++) {
        const NnParamView *views[4];
        const int n = layer_views(m, li, views);
        for (int i = 0; i < n && status == FH_OK; i++) status = fn(env, views[i]->name, views[i]);
        if (m->layers[li].type == NN_OP_BATCHNORM && status == FH_OK) {
            char path[128];
            snprintf(path, sizeof path, "/model/%s" NBT_SUFFIX, m->layers[li].name);
            status = fn(env, path + strlen("/model/"), NULL);
        }
    }
    return status;
}

static int add_name(void *env, const char *name, const NnParamView *pv)
{
    FhText *names = env;
    return fh_text_add(names, "%s%s", names->len ? "," : "", name);
}

typedef struct {
    FhText text;
    int n;
} SourceList;

/* where each tensor's starting values came from (an imported model's initializer names), "" where nowhere */
static int add_source(void *env, const char *name, const NnParamView *pv)
{
    SourceList *list = env;
    return fh_text_add(&list->text, "%s%s", list->n++ ? "," : "", pv ? pv->source : "");
}

int fl_model_tensor_names(const NnModel *m, char **names_out)
{
    *names_out = NULL;
    FhText names = { 0 };
    int status = each_tensor(m, add_name, &names);
    if (status == FH_OK) status = fh_text_append(&names, "", 0); /* a string for a model without tensors too */
    if (status != FH_OK) {
        free(names.s);
        return fh_error_trace(status, __FILE__, __LINE__, "each_tensor(m, add_name, &names)");
    }
    *names_out = names.s;
    return FH_OK;
}

typedef struct {
    const FhH5File *f;
    const float *state;
} TensorWrite;

static int write_tensor(void *env, const char *name, const NnParamView *pv)
{
    const TensorWrite *w = env;
    char path[128];
    snprintf(path, sizeof path, "/model/%s", name);
    if (!pv) {
        const int64_t zero = 0;
        const hsize_t one = 1;
        return fh_h5_write(w->f, path, H5T_NATIVE_INT64, H5T_STD_I64LE, 0, &one, NULL, &zero);
    }
    hsize_t dims[4];
    view_dims(pv, dims);
    /* one chunk per tensor, for the Fletcher32 checksum every checkpoint dataset carries */
    const FhH5Layout layout = { dims[0], 0, 1 };
    return fh_h5_write(w->f, path, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, pv->ndim, dims, &layout, w->state + pv->offset);
}

int fl_model_tensors_write(const FhH5File *f, const NnModel *m, const FlSettings *s, const char *names,
                           const float *state)
{
    hid_t g;
    FH_CHECK(fh_h5_group(f, "/model", &g));
    TensorWrite w = { f, state };
    int status = each_tensor(m, write_tensor, &w);
    const int64_t input[3] = { m->tensors[m->input].shape.c, m->tensors[m->input].shape.h,
                               m->tensors[m->input].shape.w };
    const int64_t classes = m->classes, groups = s->groups;
    if (status == FH_OK) status = fh_h5_attr_write_string(f, g, "arch", s->model);
    if (status == FH_OK) status = fh_h5_attr_write_string(f, g, "norm", s->norm);
    if (status == FH_OK) status = fh_h5_attr_write_int64s(f, g, "groups", &groups, 1);
    if (status == FH_OK) status = fh_h5_attr_write_int64s(f, g, "input", input, 3);
    if (status == FH_OK) status = fh_h5_attr_write_int64s(f, g, "classes", &classes, 1);
    if (status == FH_OK) status = fh_h5_attr_write_string(f, g, "tensors", names);
    int any_source = 0;
    for (int v = 0; v < m->n_views; v++) any_source |= m->views[v].source[0] != 0;
    if (status == FH_OK && any_source) { /* an imported model: its tensors' initializer names, aligned with tensors */
        SourceList sources = { { 0 }, 0 };
        status = each_tensor(m, add_source, &sources);
        if (status == FH_OK) status = fh_h5_attr_write_string(f, g, "sources", sources.text.s ? sources.text.s : "");
        free(sources.text.s);
    }
    H5Gclose(g);
    return status;
}

/* ---- reading ---- */

typedef struct {
    const NnModel *m;
    FhText extra;
    int n_extra;
} ExtraScan;

/* A BatchNorm layer's num_batches_tracked is accepted (and ignored: see the top of this file). */
static int is_known_name(const NnModel *m, const char *name)
{
    if (nn_model_view(m, name)) return 1;
    size_t len = strlen(name), sl = strlen(NBT_SUFFIX);
    if (len <= sl || strcmp(name + len - sl, NBT_SUFFIX)) return 0;
    for (int li = 0; li < m->n_layers; li++)
        if (m->layers[li].type == NN_OP_BATCHNORM && strlen(m->layers[li].name) == len - sl &&
            !strncmp(m->layers[li].name, name, len - sl))
            return 1;
    return 0;
}

static herr_t scan_extra(hid_t group, const char *name, const H5L_info_t *info, void *data)
{
    ExtraScan *x = data;
    if (!is_known_name(x->m, name)) {
        fh_text_add(&x->extra, "\n  extra      %s", name);
        x->n_extra++;
    }
    return 0;
}

/* Reads view pv from the file into dst; a missing, misshapen or non-finite tensor goes to `problems`. */
static int read_view(const FhH5File *f, const NnParamView *pv, float *dst, FhText *problems, int *n_problems)
{
    char path[128];
    snprintf(path, sizeof path, "/model/%s", pv->name);
    hsize_t want[4];
    view_dims(pv, want);
    int exists = 0;
    FH_CHECK(fh_h5_exists(f, path, &exists));
    if (!exists) {
        fh_text_add(problems, "\n  missing    %s ", pv->name);
        text_dims(problems, pv->ndim, want);
        ++*n_problems;
        return FH_OK;
    }
    hid_t d;
    FH_CHECK(fh_h5_open_dataset(f, path, &d));
    hid_t type = H5Dget_type(d), space = H5Dget_space(d);
    const int ndim = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    hsize_t have[8] = { 0 };
    if (ndim > 0 && ndim <= 8) H5Sget_simple_extent_dims(space, have, NULL);
    const int is_float = type >= 0 && H5Tget_class(type) == H5T_FLOAT;
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    H5Dclose(d);
    int same = is_float && ndim == pv->ndim;
    for (int i = 0; same && i < ndim; i++) same = have[i] == want[i];
    if (!same) {
        fh_text_add(problems, "\n  misshapen  %s: ", pv->name);
        if (!is_float) fh_text_add(problems, "not floating point");
        else if (ndim < 0 || ndim > 8) fh_text_add(problems, "unreadable shape");
        else text_dims(problems, ndim, have);
        fh_text_add(problems, ", the model has ");
        text_dims(problems, pv->ndim, want);
        ++*n_problems;
        return FH_OK;
    }
    FH_CHECK(fh_h5_read_all(f, path, H5T_NATIVE_FLOAT, dst));
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < pv->count; i++) nonfinite += !isfinite(dst[i]);
    if (nonfinite) {
        fh_text_add(problems, "\n  nonfinite  %s: %lld of %lld values are NaN or infinite", pv->name, (long long)nonfinite,
                 (long long)pv->count);
        ++*n_problems;
    }
    return FH_OK;
}

static int read_tensors(const FhH5File *f, const NnModel *m, const char *what, float *state)
{
    int exists = 0;
    FH_CHECK(fh_h5_exists(f, "/model", &exists));
    if (!exists)
        FH_FAIL(FH_ERR_DATA, "[model] init = %s: no /model group of named tensors (write one with tools/fedhet-torch, or use a "
                "run.h5 or checkpoint.h5 of fedhet)", f->path);
    FhText problems = { 0 };
    int n_problems = 0, status = FH_OK;
    for (int v = 0; v < m->n_views && status == FH_OK; v++)
        status = read_view(f, &m->views[v], state + m->views[v].offset, &problems, &n_problems);
    ExtraScan scan = { m, { 0 }, 0 };
    if (status == FH_OK) {
        hid_t g = H5Gopen2(f->id, "/model", H5P_DEFAULT);
        char msg[256];
        if (g < 0 || H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, scan_extra, &scan) < 0)
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: cannot list /model (HDF5: %s)", f->path,
                                    fh_h5_message(msg));
        if (g >= 0) H5Gclose(g);
    }
    if (status == FH_OK && n_problems + scan.n_extra > 0)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                "[model] init = %s: /model does not fit %s (%d missing, misshapen or non-finite, %d extra tensors):%s%s", f->path,
                                what, n_problems, scan.n_extra, problems.s ? problems.s : "",
                                scan.extra.s ? scan.extra.s : "");
    free(problems.s);
    free(scan.extra.s);
    return status;
}

int fl_model_tensors_read(const char *path, const FlSettings *s, NnShape shape, int classes, int n_clients,
                          float **state_out)
{
    *state_out = NULL;
    NnModel m;
    FH_CHECK(fl_model_build(&m, s, shape, classes, n_clients, 1));
    char what[160];
    snprintf(what, sizeof what, "model %s on %dx%dx%d with %d classes", s->model, shape.c, shape.h, shape.w, classes);
    float *state = NULL;
    int status = fh_alloc_aligned(&state, (size_t)m.n_state * sizeof(float), "initial state");
    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    FhH5File f = { .id = H5I_INVALID_HID };
    if (status == FH_OK) status = fh_h5_open(&f, path, FH_ERR_DATA);
    if (status == FH_OK) status = read_tensors(&f, &m, what, state);
    if (f.id >= 0) {
        int closed = fh_h5_close(&f);
        if (status == FH_OK) status = closed;
    }
    fh_h5_quiet_end(&quiet);
    nn_model_free(&m);
    if (status != FH_OK) {
        fh_free(&state);
        return fh_error_trace(status, __FILE__, __LINE__, "fl_model_tensors_read");
    }
    *state_out = state;
    return FH_OK;
}
