/* Small strict parsers for command-line options: a typo is an error naming the option, never a default. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/onnx.h"

int app_parse_int(const char *text, const char *what, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0')
        FH_FAIL(FH_ERR_USAGE, "%s: '%s' is not an integer", what, text);
    if (v < lo || v > hi) FH_FAIL(FH_ERR_USAGE, "%s: %ld is outside %ld..%ld", what, v, lo, hi);
    *out = (int)v;
    return FH_OK;
}

int app_parse_float(const char *text, const char *what, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end != '\0') FH_FAIL(FH_ERR_USAGE, "%s: '%s' is not a number", what, text);
    if (!(v >= lo && v <= hi)) FH_FAIL(FH_ERR_USAGE, "%s: %g is outside %g..%g", what, v, lo, hi);
    *out = v;
    return FH_OK;
}

int app_parse_shape(const char *text, NnShape *shape)
{
    int dims[3], n = 0;
    const char *p = text;
    while (n < 3) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 1 || v > 65536) break;
        dims[n++] = (int)v;
        if (*end == '\0') {
            p = end;
            break;
        }
        if (*end != 'x' || n == 3) {
            n = -1;
            break;
        }
        p = end + 1;
    }
    if (n != 3 || *p != '\0')
        FH_FAIL(FH_ERR_USAGE, "--input: '%s' is not C x H x W with positive sizes, e.g. 1x28x28", text);
    *shape = (NnShape){dims[0], dims[1], dims[2]};
    return FH_OK;
}

int app_option_value(int argc, char **argv, int *i, const char **value)
{
    if (*i + 1 >= argc) FH_FAIL(FH_ERR_USAGE, "option %s needs a value", argv[*i]);
    *value = argv[++*i];
    return FH_OK;
}

void app_model_args_default(AppModelArgs *a)
{
    memset(a, 0, sizeof *a);
    a->zoo.backend = NN_BACKEND_DEFAULT;
    a->classes = 10;
}

int app_model_args_check(const AppModelArgs *a)
{
    /* a size --input would refuse, taken from the file (2^31 reads back as a negative int): named here, with the
     * whole file name, instead of as a negative size under a shortened name by the model builder */
    const NnShape in = a->input;
    if (a->net && !a->input_given &&
        (in.c < 1 || in.h < 1 || in.w < 1 || in.c > 65536 || in.h > 65536 || in.w > 65536))
        FH_FAIL(FH_ERR_DATA, "%s: the graph's input shape has a dimension outside 1..65536: give the shape with --input "
                "CxHxW", a->model);
    return FH_OK;
}

NnShape app_default_input(const char *model)
{
    static const char *greyscale[] = {"mlp", "cnn", "lenet", "smallcnn"};
    for (size_t i = 0; i < sizeof greyscale / sizeof greyscale[0]; i++)
        if (model && !strcmp(model, greyscale[i])) return (NnShape){1, 28, 28};
    return (NnShape){3, 32, 32};
}

int app_model_args_take(AppModelArgs *a, int argc, char **argv, int *i, int *consumed)
{
    const char *opt = argv[*i], *value = NULL;
    *consumed = 1;
    if (!strcmp(opt, "--model")) {
        FH_CHECK(app_option_value(argc, argv, i, &a->model));
    } else if (!strcmp(opt, "--input")) {
        FH_CHECK(app_option_value(argc, argv, i, &value));
        FH_CHECK(app_parse_shape(value, &a->input));
        a->input_given = 1;
    } else if (!strcmp(opt, "--classes")) {
        FH_CHECK(app_option_value(argc, argv, i, &value));
        FH_CHECK(app_parse_int(value, "--classes", -1000000, 1000000, &a->classes));
        a->classes_given = 1;
    } else if (!strcmp(opt, "--norm")) {
        FH_CHECK(app_option_value(argc, argv, i, &a->zoo.norm));
    } else if (!strcmp(opt, "--groups")) {
        FH_CHECK(app_option_value(argc, argv, i, &value));
        FH_CHECK(app_parse_int(value, "--groups", 1, 4096, &a->zoo.gn_groups));
    } else if (!strcmp(opt, "--backend")) {
        NnBackend backend;
        FH_CHECK(app_option_value(argc, argv, i, &a->zoo.backend));
        FH_CHECK(nn_backend_parse(a->zoo.backend, &backend));
    } else {
        *consumed = 0;
    }
    if (*consumed && a->model && onnx_is_path(a->model) && !a->net) {
        FH_CHECK(fh_check_readable(a->model));
        FH_CHECK(onnx_net_read(&a->net, a->model));
        a->zoo.build = onnx_zoo_options(a->net, NULL).build;
        a->zoo.build_ctx = a->net;
    }
    if (*consumed && a->model && !a->input_given) a->input = app_default_input(a->model);
    if (*consumed && a->net && !a->input_given && !onnx_net_input_shape(a->net, &a->input))
        a->input = (NnShape){ 3, 32, 32 }; /* symbolic in the file: --input decides */
    if (*consumed && a->net && !a->classes_given && onnx_net_classes(a->net) > 1) a->classes = onnx_net_classes(a->net);
    return FH_OK;
}
