/* fedhet inspect --model NAME: the layers of a zoo model, its parameter counts, FLOPs and memory. */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "fedhet/core.h"

static const char *op_name(NnOpType t)
{
    static const char *names[] = {"linear", "conv2d", "maxpool", "avgpool", "gap", "batchnorm",
                                  "groupnorm", "act", "dropout", "add", "flatten"};
    return names[t];
}

static const char *act_name(NnAct a) { return a == NN_ACT_RELU ? "-relu" : a == NN_ACT_RELU6 ? "-relu6" : ""; }

static void print_help(void)
{
    printf("usage: fedhet inspect --model NAME [--input CxHxW] [--classes K] [--norm bn|gn] [--groups G]\n"
           "  Prints the model's layers (output shape, parameters, forward FLOPs), its trainable and buffer\n"
           "  counts, forward FLOPs per sample and memory per client.\n"
           "  --model    %s\n"
           "  --input    input shape, default 1x28x28 for mlp/cnn/lenet/smallcnn, 3x32x32 otherwise\n"
           "  --classes  class count, default 10\n"
           "  --norm     resnet18 normalisation: bn (default) or gn; --groups: GroupNorm groups (default 2)\n",
           nn_zoo_names());
}

int app_cmd_inspect(int argc, char **argv)
{
    AppModelArgs a;
    app_model_args_default(&a);
    for (int i = 1; i < argc; i++) {
        int consumed = 0;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return FH_OK;
        }
        FH_CHECK(app_model_args_take(&a, argc, argv, &i, &consumed));
        if (!consumed) FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet inspect --help)", argv[i]);
    }
    if (!a.model) FH_FAIL(FH_ERR_USAGE, "--model NAME is required (one of %s)", nn_zoo_names());
    NnModel m;
    FH_CHECK(nn_zoo_build(&m, a.model, a.input, a.classes, 1, &a.zoo));
    printf("model %s, input %dx%dx%d, %d classes\n", a.model, a.input.c, a.input.h, a.input.w, a.classes);
    printf("%-4s %-12s %-16s %-16s %12s %14s\n", "#", "layer", "op", "output", "params", "fwd FLOPs");
    for (int i = 0; i < m.n_layers; i++) {
        const NnLayer *l = &m.layers[i];
        int64_t params = 0;
        for (int v = 0; v < m.n_views; v++)
            if (m.views[v].layer == i) params += m.views[v].count;
        char op[40], shape[40];
        if (l->type == NN_OP_CONV2D)
            snprintf(op, sizeof op, "conv%dx%d/%d%s%s", l->k, l->k, l->stride, l->groups > 1 ? "/g" : "", act_name(l->act));
        else snprintf(op, sizeof op, "%s%s", op_name(l->type), act_name(l->act));
        NnShape s = m.tensors[l->out].shape;
        snprintf(shape, sizeof shape, "%dx%dx%d", s.c, s.h, s.w);
        printf("%-4d %-12s %-16s %-16s %12lld %14lld\n", i, l->name, op, shape, (long long)params,
               (long long)l->flops);
    }
    int64_t flops = nn_model_flops_forward(&m);
    printf("trainable parameters: %lld\n", (long long)m.n_params);
    printf("buffers (BatchNorm running statistics): %lld\n", (long long)m.n_buffers);
    printf("state vector: %lld floats (%.2f MiB)\n", (long long)m.n_state, (double)m.n_state * 4.0 / 1048576.0);
    printf("forward FLOPs per sample: %lld (%.4f GFLOP); training step ~3x\n", (long long)flops, (double)flops / 1e9);
    printf("activations + gradients + workspace per model instance:");
    const int batches[] = {32, 64, 256};
    for (int b = 0; b < 3; b++)
        printf(" batch %d: %.1f MiB%s", batches[b], (double)nn_model_activation_bytes(&m, batches[b]) / 1048576.0,
               b < 2 ? "," : "\n");
    nn_model_free(&m);
    return FH_OK;
}
