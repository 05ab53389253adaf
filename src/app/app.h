/* fedhet command line: one function per subcommand, each returning an fh status (= exit code). */
#ifndef FEDHET_APP_H
#define FEDHET_APP_H

#include "fedhet/nn.h"

int app_cmd_run(int argc, char **argv);
int app_cmd_partition(int argc, char **argv);
int app_cmd_inspect(int argc, char **argv);
int app_cmd_bench(int argc, char **argv);
int app_cmd_report(int argc, char **argv);
int app_cmd_grid(int argc, char **argv);
int app_cmd_landscape(int argc, char **argv);
int app_cmd_methods(int argc, char **argv);
int app_cmd_export(int argc, char **argv);
int app_cmd_steps(int argc, char **argv);

/* "1x28x28" -> {1, 28, 28} */
int app_parse_shape(const char *text, NnShape *shape);
/* strict integer / float parsing; `what` names the option in the error */
int app_parse_int(const char *text, const char *what, long lo, long hi, int *out);
int app_parse_float(const char *text, const char *what, double lo, double hi, double *out);
/* argv[*i] is an option that needs a value: returns it and advances, or fails naming the option */
int app_option_value(int argc, char **argv, int *i, const char **value);

/* model options shared by inspect and bench: --model --input --classes --norm --groups --backend; --model FILE.onnx
 * reads the graph, whose input shape and class count become the defaults */
typedef struct {
    const char *model;
    NnShape input;
    int input_given;
    int classes;
    int classes_given;
    NnZooOptions zoo;
    struct OnnxNet *net; /* --model FILE.onnx: its graph (zoo.build builds it) */
} AppModelArgs;
void app_model_args_default(AppModelArgs *a);
/* consumes argv[*i] (and its value) if it is a model option: 1 consumed, 0 not ours, <0 never (errors are statuses) */
int app_model_args_take(AppModelArgs *a, int argc, char **argv, int *i, int *consumed);
/* after the options: an input shape from an ONNX file that --input would refuse is FH_ERR_DATA naming the file */
int app_model_args_check(const AppModelArgs *a);
/* mlp/cnn/lenet/smallcnn default to 1x28x28, the ResNets and MobileNetV2 to 3x32x32 */
NnShape app_default_input(const char *model);

#endif
