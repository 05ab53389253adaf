/* Test helper of tests/mpi/test_onnx.sh: an ONNX file through fedhet's importer, on raw float32 files.
 *   onnx_model logits FILE.onnx X.bin N C H W CLASSES OUT.bin [train]
 *       the imported model with the file's weights, logits of X [N, C, H, W] in evaluation mode (or training
 *       mode: batch statistics, dropout) into OUT.bin [N, CLASSES]
 *   onnx_model sgd FILE.onnx X.bin Y.bin N C H W CLASSES STEPS LR OUT.bin
 *       STEPS plain SGD steps (no momentum) in training mode, step s on rows [s*N, (s+1)*N) of X (Y: int32 labels),
 *       mean softmax cross-entropy; OUT.bin: each step's loss (float32)
 *   onnx_model node FILE.onnx X.bin OUT.bin [train]
 *       one of ONNX's node tests: input shape and output size from the file, evaluation mode (or training mode,
 *       for a training-mode dropout), batch from the file's first input dimension
 *   onnx_model roundtrip FILE.onnx X.bin N C H W CLASSES OUT.onnx
 *       import, export to OUT.onnx, import that, compare both models' logits bit for bit (exit 1 if not)
 * Exit status: fedhet's (1 for a refused graph, with its message on stderr). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/nn.h"
#include "fedhet/onnx.h"

static float *read_floats(const char *path, size_t n)
{
    float *x = malloc(n * sizeof *x + 1);
    FILE *f = fopen(path, "rb");
    if (!x || !f || fread(x, sizeof *x, n, f) != n) {
        fprintf(stderr, "%s: cannot read %zu floats\n", path, n);
        exit(4);
    }
    fclose(f);
    return x;
}

static void write_floats(const char *path, const float *x, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof *x, n, f) != n || fclose(f)) {
        fprintf(stderr, "%s: cannot write\n", path);
        exit(4);
    }
}

static int die(int status)
{
    fprintf(stderr, "%s\n", fh_error_message());
    return status;
}

static int load(OnnxNet **net, NnModel *m, const char *path, NnShape s, int classes, int batch)
{
    FH_CHECK(onnx_net_read(net, path));
    FH_CHECK(onnx_net_build(*net, m, s, classes, batch, NULL));
    nn_model_init_params(m, 1);
    return onnx_net_copy_weights(*net, m, m->state);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: see tests/mpi/onnx_model.c\n");
        return 1;
    }
    const char *cmd = argv[1];
    OnnxNet *net = NULL;
    NnModel m;
    memset(&m, 0, sizeof m);
    int status;
    if (!strcmp(cmd, "node")) {
        NnShape s;
        if ((status = onnx_net_read(&net, argv[2])) != FH_OK) return die(status);
        if (!onnx_net_input_shape(net, &s)) {
            fprintf(stderr, "%s: the input is not N x C x H x W with fixed sizes: not supported\n", argv[2]);
            return 1;
        }
        int classes = onnx_net_classes(net);
        /* a node test's output is any shape: try its element count per sample through a first build */
        int batch = 1;
        FILE *f = fopen(argv[3], "rb");
        if (!f) return 4;
        fseek(f, 0, SEEK_END);
        const long bytes = ftell(f);
        fclose(f);
        batch = (int)(bytes / 4 / ((long)s.c * s.h * s.w));
        if (batch < 1) batch = 1; /* no float input (another element type): the importer refuses the graph */
        if (!classes) classes = 2;
        status = onnx_net_build(net, &m, s, classes, batch, NULL);
        if (status != FH_OK) {
            /* the output's size per sample is in the message's "has N values": build again with it */
            const char *msg = fh_error_message();
            const char *p = strstr(msg, "' has ");
            if (!p || sscanf(p, "' has %d values", &classes) != 1) return die(status);
            if (classes < 2) { /* the engine's models have at least two outputs */
                fprintf(stderr, "%s: an output of %d value per sample is not supported\n", argv[2], classes);
                return 1;
            }
            status = onnx_net_build(net, &m, s, classes, batch, NULL);
            if (status != FH_OK) return die(status);
        }
        nn_model_init_params(&m, 1);
        if ((status = onnx_net_copy_weights(net, &m, m.state)) != FH_OK) return die(status);
        float *x = read_floats(argv[3], (size_t)batch * s.c * s.h * s.w);
        /* "train": a test whose reference is a training-mode dropout (its mask is the reference's own draw) */
        nn_model_set_training(&m, argc > 5 && !strcmp(argv[5], "train"));
        if ((status = nn_model_forward(&m, x, batch)) != FH_OK) return die(status);
        write_floats(argv[4], nn_model_logits(&m), (size_t)batch * classes);
        return 0;
    }
    if (argc < 10) return 1;
    const int o = !strcmp(cmd, "sgd"); /* sgd has Y.bin before the sizes */
    const int n = atoi(argv[4 + o]);
    const NnShape s = { atoi(argv[5 + o]), atoi(argv[6 + o]), atoi(argv[7 + o]) };
    const int classes = atoi(argv[8 + o]);
    if (!strcmp(cmd, "logits") || !strcmp(cmd, "roundtrip")) {
        if ((status = load(&net, &m, argv[2], s, classes, n)) != FH_OK) return die(status);
        float *x = read_floats(argv[3], (size_t)n * s.c * s.h * s.w);
        nn_model_set_training(&m, argc > 10 && !strcmp(argv[10], "train"));
        m.dropout_seed = 1;
        if ((status = nn_model_forward(&m, x, n)) != FH_OK) return die(status);
        if (!strcmp(cmd, "logits")) {
            write_floats(argv[9], nn_model_logits(&m), (size_t)n * classes);
            return 0;
        }
        if ((status = onnx_export(&m, m.state, argv[9])) != FH_OK) return die(status);
        OnnxNet *net2 = NULL;
        NnModel m2;
        if ((status = load(&net2, &m2, argv[9], s, classes, n)) != FH_OK) return die(status);
        nn_model_set_training(&m2, 0);
        if ((status = nn_model_forward(&m2, x, n)) != FH_OK) return die(status);
        int same = m.n_state == m2.n_state && !memcmp(m.state, m2.state, (size_t)m.n_state * sizeof(float)) &&
                   !memcmp(nn_model_logits(&m), nn_model_logits(&m2), (size_t)n * classes * sizeof(float));
        printf("roundtrip: %d layers, %lld state values, logits %s\n", m.n_layers, (long long)m.n_state,
               same ? "bit-identical" : "DIFFER");
        return same ? 0 : 1;
    }
    if (!strcmp(cmd, "sgd") && argc >= 13) {
        const int steps = atoi(argv[10]);
        const float lr = (float)atof(argv[11]);
        if (steps < 1) return 1;
        if ((status = load(&net, &m, argv[2], s, classes, n)) != FH_OK) return die(status);
        float *x = read_floats(argv[3], (size_t)steps * n * s.c * s.h * s.w);
        int32_t *y = (int32_t *)read_floats(argv[4], (size_t)steps * n);
        float *dl = malloc((size_t)n * classes * sizeof *dl), *losses = malloc((size_t)steps * sizeof *losses);
        NnSgd opt;
        if (!dl || !losses || nn_sgd_init(&opt, m.n_params, 0.0f, 0.0f, 0) != FH_OK) return 4;
        nn_model_set_training(&m, 1);
        for (int k = 0; k < steps; k++) {
            if ((status = nn_model_forward(&m, x + (size_t)k * n * s.c * s.h * s.w, n)) != FH_OK) return die(status);
            memset(dl, 0, (size_t)n * classes * sizeof *dl);
            losses[k] = nn_softmax_xent(dl, NULL, nn_model_logits(&m), y + (size_t)k * n, NULL, NULL, n, classes);
            nn_model_zero_grad(&m);
            nn_model_backward(&m, dl, NULL);
            nn_sgd_step(&opt, m.state, m.grad, lr);
        }
        write_floats(argv[12], losses, (size_t)steps);
        return 0;
    }
    fprintf(stderr, "unknown command %s\n", cmd);
    return 1;
}
