/* The model zoo of docs/methods/models.md, built layer by layer on the engine's builder. */
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/nn.h"

typedef struct {
    NnModel *m;
    int use_gn;
    int gn_groups;
    int proj_dim; /* NnZooOptions.proj_dim */
} ZooCtx;

/* The classifier on representation x, which becomes the model's features; with a projection head (MOON's
 * ModelFedCon: Linear(f, f), ReLU, Linear(f, proj_dim)) the classifier and the features move onto its output. */
static int zoo_classifier(ZooCtx *z, int x, int classes, int *features)
{
    if (z->proj_dim > 0) {
        const int f = z->m->status == FH_OK ? (int)z->m->tensors[x].size : 1;
        x = nn_linear(z->m, x, f, 1, NN_ACT_RELU);
        x = nn_linear(z->m, x, z->proj_dim, 1, NN_ACT_NONE);
    }
    *features = x;
    return nn_linear(z->m, x, classes, 1, NN_ACT_NONE);
}

static int zoo_norm(ZooCtx *z, int x, NnAct act)
{
    return z->use_gn ? nn_groupnorm(z->m, x, z->gn_groups, act) : nn_batchnorm(z->m, x, act);
}

/* BasicBlock(a -> b, s): conv3x3-norm-relu, conv3x3-norm, + shortcut, relu */
static int basic_block(ZooCtx *z, int x, int b, int stride)
{
    int a = z->m->status == FH_OK ? z->m->tensors[x].shape.c : 0;
    int y = nn_conv2d(z->m, x, b, 3, stride, 1, 1, 0, NN_ACT_NONE);
    y = zoo_norm(z, y, NN_ACT_RELU);
    y = nn_conv2d(z->m, y, b, 3, 1, 1, 1, 0, NN_ACT_NONE);
    y = zoo_norm(z, y, NN_ACT_NONE);
    int shortcut = x;
    if (stride != 1 || a != b) {
        shortcut = nn_conv2d(z->m, x, b, 1, stride, 0, 1, 0, NN_ACT_NONE);
        shortcut = zoo_norm(z, shortcut, NN_ACT_NONE);
    }
    return nn_add(z->m, y, shortcut, NN_ACT_RELU);
}

static int build_mlp(ZooCtx *z, int x, int classes, int *features)
{
    x = nn_flatten(z->m, x);
    x = nn_linear(z->m, x, 200, 1, NN_ACT_RELU);
    x = nn_linear(z->m, x, 200, 1, NN_ACT_RELU);
    return zoo_classifier(z, x, classes, features);
}

static int build_cnn(ZooCtx *z, int x, int classes, int *features)
{
    x = nn_conv2d(z->m, x, 32, 5, 1, 2, 1, 1, NN_ACT_RELU);
    x = nn_maxpool(z->m, x, 2, 2, 0);
    x = nn_conv2d(z->m, x, 64, 5, 1, 2, 1, 1, NN_ACT_RELU);
    x = nn_maxpool(z->m, x, 2, 2, 0);
    x = nn_flatten(z->m, x);
    x = nn_linear(z->m, x, 512, 1, NN_ACT_RELU);
    return zoo_classifier(z, x, classes, features);
}

static int build_lenet(ZooCtx *z, int x, int classes, int *features)
{
    x = nn_conv2d(z->m, x, 64, 5, 1, 0, 1, 1, NN_ACT_RELU);
    x = nn_maxpool(z->m, x, 2, 2, 0);
    x = nn_conv2d(z->m, x, 64, 5, 1, 0, 1, 1, NN_ACT_RELU);
    x = nn_maxpool(z->m, x, 2, 2, 0);
    x = nn_flatten(z->m, x);
    x = nn_linear(z->m, x, 384, 1, NN_ACT_RELU);
    x = nn_linear(z->m, x, 192, 1, NN_ACT_RELU);
    return zoo_classifier(z, x, classes, features);
}

static int build_smallcnn(ZooCtx *z, int x, int classes, int *features)
{
    static const int widths[3] = {32, 64, 128};
    for (int i = 0; i < 3; i++) {
        x = nn_conv2d(z->m, x, widths[i], 3, 1, 1, 1, 0, NN_ACT_NONE);
        x = nn_batchnorm(z->m, x, NN_ACT_RELU);
        x = nn_maxpool(z->m, x, 2, 2, 0);
    }
    x = nn_flatten(z->m, x);
    x = nn_linear(z->m, x, 128, 1, NN_ACT_RELU);
    return zoo_classifier(z, x, classes, features);
}

static int build_resnet_head(ZooCtx *z, int x, int classes, int *features)
{
    x = nn_gap(z->m, x);
    x = nn_flatten(z->m, x);
    return zoo_classifier(z, x, classes, features);
}

static int build_resnet8(ZooCtx *z, int x, int classes, int *features)
{
    x = nn_conv2d(z->m, x, 128, 3, 1, 1, 1, 0, NN_ACT_NONE);
    x = zoo_norm(z, x, NN_ACT_RELU);
    x = basic_block(z, x, 128, 1);
    x = basic_block(z, x, 256, 2);
    x = basic_block(z, x, 512, 2);
    return build_resnet_head(z, x, classes, features);
}

static int resnet18_layers(ZooCtx *z, int x)
{
    static const int widths[4] = {64, 128, 256, 512};
    for (int i = 0; i < 4; i++) {
        x = basic_block(z, x, widths[i], i == 0 ? 1 : 2);
        x = basic_block(z, x, widths[i], 1);
    }
    return x;
}

static int build_resnet18(ZooCtx *z, int x, int classes, int *features)
{
    x = nn_conv2d(z->m, x, 64, 3, 1, 1, 1, 0, NN_ACT_NONE);
    x = zoo_norm(z, x, NN_ACT_RELU);
    x = resnet18_layers(z, x);
    return build_resnet_head(z, x, classes, features);
}

static int build_resnet18_gn(ZooCtx *z, int x, int classes, int *features)
{
    z->use_gn = 1;
    x = nn_conv2d(z->m, x, 64, 7, 2, 3, 1, 0, NN_ACT_NONE);
    x = zoo_norm(z, x, NN_ACT_RELU);
    x = nn_maxpool(z->m, x, 3, 2, 1);
    x = resnet18_layers(z, x);
    return build_resnet_head(z, x, classes, features);
}

/* InvertedResidual(a -> b, s, t): 1x1 expand, 3x3 depthwise, 1x1 project (every conv with bias: the
 * docs/methods/models.md writes no `nobias` for this model) */
static int inverted_residual(ZooCtx *z, int x, int b, int stride, int t)
{
    int a = z->m->status == FH_OK ? z->m->tensors[x].shape.c : 0;
    int y = nn_conv2d(z->m, x, a * t, 1, 1, 0, 1, 1, NN_ACT_NONE);
    y = nn_batchnorm(z->m, y, NN_ACT_RELU6);
    y = nn_conv2d(z->m, y, a * t, 3, stride, 1, a * t, 1, NN_ACT_NONE);
    y = nn_batchnorm(z->m, y, NN_ACT_RELU6);
    y = nn_conv2d(z->m, y, b, 1, 1, 0, 1, 1, NN_ACT_NONE);
    y = nn_batchnorm(z->m, y, NN_ACT_NONE);
    return (stride == 1 && a == b) ? nn_add(z->m, y, x, NN_ACT_NONE) : y;
}

static int build_mobilenetv2(ZooCtx *z, int x, int classes, int *features)
{
    static const int stages[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                     {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    x = nn_conv2d(z->m, x, 32, 3, 1, 1, 1, 1, NN_ACT_NONE);
    x = nn_batchnorm(z->m, x, NN_ACT_RELU6);
    for (int s = 0; s < 7; s++)
        for (int r = 0; r < stages[s][2]; r++)
            x = inverted_residual(z, x, stages[s][1], r == 0 ? stages[s][3] : 1, stages[s][0]);
    x = nn_conv2d(z->m, x, 1280, 1, 1, 0, 1, 1, NN_ACT_NONE);
    x = nn_batchnorm(z->m, x, NN_ACT_RELU6);
    x = *features = nn_gap(z->m, x);
    x = nn_conv2d(z->m, x, classes, 1, 1, 0, 1, 1, NN_ACT_NONE);
    return nn_flatten(z->m, x);
}

typedef int (*ZooBuildFn)(ZooCtx *z, int x, int classes, int *features);

static const struct {
    const char *name;
    ZooBuildFn build;
} zoo_table[] = {
    {"mlp", build_mlp},           {"cnn", build_cnn},           {"lenet", build_lenet},
    {"smallcnn", build_smallcnn}, {"resnet8", build_resnet8},   {"resnet18", build_resnet18},
    {"resnet18_gn", build_resnet18_gn}, {"mobilenetv2", build_mobilenetv2},
};

const char *nn_zoo_names(void) { return "mlp, cnn, lenet, smallcnn, resnet8, resnet18, resnet18_gn, mobilenetv2"; }

int nn_zoo_build(NnModel *m, const char *name, NnShape input, int classes, int max_batch, const NnZooOptions *opt)
{
    memset(m, 0, sizeof *m);
    ZooBuildFn build = NULL;
    for (size_t i = 0; i < sizeof zoo_table / sizeof zoo_table[0]; i++)
        if (strcmp(zoo_table[i].name, name) == 0) build = zoo_table[i].build;
    const int outside = opt && opt->build;
    if (!build && !outside) FH_FAIL(FH_ERR_USAGE, "unknown model '%s' (known: %s)", name, nn_zoo_names());
    if (classes < 2) FH_FAIL(FH_ERR_USAGE, "model %s: class count %d must be at least 2", name, classes);
    ZooCtx z = {m, 0, 2, 0};
    if (opt && opt->norm && strcmp(opt->norm, "bn") != 0) {
        if (strcmp(opt->norm, "gn") != 0)
            FH_FAIL(FH_ERR_USAGE, "model %s: norm '%s' must be bn or gn", name, opt->norm);
        z.use_gn = 1;
    }
    if (opt && opt->gn_groups) {
        if (opt->gn_groups < 1) FH_FAIL(FH_ERR_USAGE, "model %s: GroupNorm groups %d must be >= 1", name, opt->gn_groups);
        z.gn_groups = opt->gn_groups;
    }
    if (opt && opt->proj_dim) {
        if (opt->proj_dim < 0) FH_FAIL(FH_ERR_USAGE, "model %s: projection head width %d must be >= 0", name, opt->proj_dim);
        if (build == build_mobilenetv2)
            FH_FAIL(FH_ERR_USAGE, "model %s: a projection head needs a linear classifier (mobilenetv2's is a 1x1 "
                    "convolution): use another model or no head", name);
        z.proj_dim = opt->proj_dim;
    }
    NnBackend backend;
    FH_CHECK(nn_backend_parse(opt ? opt->backend : NULL, &backend));
    int status = nn_model_init(m, name, input, max_batch);
    if (status == FH_OK) {
        m->no_activation_reuse = opt && opt->no_activation_reuse;
        m->backend = backend;
        int features = -1;
        int logits = outside ? opt->build(opt->build_ctx, m, classes, z.proj_dim, &features) : build(&z, m->input, classes, &features);
        status = m->status != FH_OK ? m->status : logits < 0 ? FH_ERR_USAGE : nn_model_finalize(m, logits, features, classes);
    }
    if (status != FH_OK) {
        nn_model_free(m);
        return fh_error_trace(status, __FILE__, __LINE__, "nn_zoo_build");
    }
    return FH_OK;
}
