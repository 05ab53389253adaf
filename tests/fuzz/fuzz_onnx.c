/* libFuzzer target: ONNX files, through the importer `[model] onnx` uses (onnx_net_parse: protobuf-c over
 * onnx.proto, then the graph walk, constant folding and pattern matching of onnx_net_build). Property: a file
 * either is refused with an error or gives a model whose forward pass runs (a batch of two) and whose weights
 * copy in. Graphs whose input asks for more than 4096 values per sample are only parsed: the fuzzer looks for
 * crashes, not for large allocations. */
#include "fuzz.h"

#include "fedhet/nn.h"
#include "fedhet/onnx.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    OnnxNet *net = NULL;
    if (onnx_net_parse(&net, data, size, "fuzz.onnx") != FH_OK) {
        fh_error_clear();
        return 0;
    }
    NnShape s;
    const int classes = onnx_net_classes(net);
    if (onnx_net_input_shape(net, &s) && (int64_t)s.c * s.h * s.w <= 4096 && classes >= 2 && classes <= 1000) {
        NnModel m;
        memset(&m, 0, sizeof m);
        if (onnx_net_build(net, &m, s, classes, 2, NULL) == FH_OK) {
            nn_model_init_params(&m, 1);
            if (onnx_net_copy_weights(net, &m, m.state) == FH_OK) {
                float *x = calloc((size_t)2 * s.c * s.h * s.w, sizeof *x);
                nn_model_set_training(&m, 0);
                (void)nn_model_forward(&m, x, 2);
                free(x);
            }
        }
        nn_model_free(&m);
    }
    fh_error_clear();
    onnx_net_free(net);
    return 0;
}
