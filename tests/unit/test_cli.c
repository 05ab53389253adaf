/* Tests of the command line (src/app): runs the real binary bin/fedhet through popen with stderr folded
 * into stdout, and checks exit codes (docs/usage.md, The executable: 0 ok, 1 usage) and messages of `fedhet --help`,
 * `fedhet inspect` and `fedhet bench`, the errors for unknown models and commands, bad shapes, class
 * counts and options, and that nothing crashes (an exit code above 128 or a signal is a failure).
 *
 * The binary is looked up as bin/fedhet relative to the working directory (tests/run.sh runs from the
 * repository root), then relative to this program (build/tests/../../bin/fedhet). Build both first:
 *   make bin/fedhet build/tests/test_cli && build/tests/test_cli [test_name] */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* popen, pclose, setenv */
#endif

#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_bin.h"

/* runs `bin/fedhet <args>` and checks the exit code and that the output contains every needle */
#define EXPECT_RUN(args, expect_code, ...) EXPECT(run_fedhet("%s", args), expect_code, __VA_ARGS__)

/* ---- help and dispatch ---- */

static void test_help(void)
{
    EXPECT_RUN("--help", 0, "usage: fedhet", "inspect", "bench", "exit codes");
    EXPECT_RUN("-h", 0, "usage: fedhet");
    EXPECT_RUN("inspect --help", 0, "usage: fedhet inspect", "--model", "mobilenetv2");
    EXPECT_RUN("bench --help", 0, "usage: fedhet bench", "--batch", "samples_per_s");
    /* --help wins wherever it appears, even after other options */
    EXPECT_RUN("inspect --model cnn --help", 0, "usage: fedhet inspect");
}

static void test_no_command_and_unknown_command(void)
{
    EXPECT_RUN("", 1, "usage: fedhet");
    EXPECT_RUN("frobnicate", 1, "unknown command", "frobnicate", "usage");
    EXPECT_RUN("--model cnn", 1, "unknown command");
}

/* ---- inspect ---- */

static void test_inspect_counts(void)
{
    EXPECT_RUN("inspect --model cnn --input 1x28x28 --classes 10", 0, "1663370", "model cnn, input 1x28x28",
               "trainable parameters: 1663370", "buffers (BatchNorm running statistics): 0");
    /* defaults: 1x28x28 for cnn, 10 classes; the option order does not matter */
    EXPECT_RUN("inspect --model cnn", 0, "trainable parameters: 1663370");
    EXPECT_RUN("inspect --input 3x32x32 --model cnn", 0, "trainable parameters: 2156490");
    EXPECT_RUN("inspect --model resnet18", 0, "input 3x32x32", "trainable parameters: 11173962",
               "buffers (BatchNorm running statistics): 9600");
    /* (small inputs from here on: inspect allocates the activations of batch 256 to report their size;
     * the parameter counts of the ResNets do not depend on H x W) */
    EXPECT_RUN("inspect --model resnet18 --norm gn --input 3x8x8", 0, "trainable parameters: 11173962",
               "buffers (BatchNorm running statistics): 0");
    EXPECT_RUN("inspect --model smallcnn --input 3x32x32", 0, "357034", "448");
    EXPECT_RUN("inspect --model resnet18 --classes 100 --input 3x8x8", 0, "trainable parameters: 11220132");
    /* the layer table shows cnn's intermediate shapes */
    EXPECT_RUN("inspect --model cnn", 0, "32x28x28", "32x14x14", "64x14x14", "64x7x7");
}

static void test_inspect_errors(void)
{
    EXPECT_RUN("inspect --model nope", 1, "unknown model", "nope", "cnn", "mobilenetv2");
    EXPECT_RUN("inspect --input 1x3x3 --model cnn", 1, "cnn", "64x1x1", "too small");
    EXPECT_RUN("inspect --model lenet --input 1x8x8", 1, "lenet", "64x2x2");
    EXPECT_RUN("inspect --model cnn --input 0x28x28", 1, "0x28x28");
    EXPECT_RUN("inspect --model cnn --input 1x28", 1, "1x28");
    EXPECT_RUN("inspect --model cnn --input 1x28x28x3", 1, "--input");
    EXPECT_RUN("inspect --model cnn --input 1x-28x28", 1, "--input");
    EXPECT_RUN("inspect --model cnn --input axbxc", 1, "--input");
    EXPECT_RUN("inspect --model cnn --classes 1", 1, "class");
    EXPECT_RUN("inspect --model cnn --classes 0", 1, "class");
    EXPECT_RUN("inspect --model cnn --classes ten", 1, "--classes", "ten");
    EXPECT_RUN("inspect --model cnn --classes", 1, "--classes", "needs a value");
    EXPECT_RUN("inspect", 1, "--model", "required");
    EXPECT_RUN("inspect --model cnn --bogus", 1, "unknown option", "--bogus");
    EXPECT_RUN("inspect --model resnet18 --norm ln", 1, "ln");
    EXPECT_RUN("inspect --model resnet18 --norm gn --groups 3", 1, "groups");
}

/* ---- bench ---- */

static void test_bench_errors(void)
{
    EXPECT_RUN("bench --model cnn", 1, "--batch");
    EXPECT_RUN("bench --model cnn --batch 4 --mode adam", 1, "--mode", "adam");
    EXPECT_RUN("bench --batch 4", 1, "--model");
    EXPECT_RUN("bench --model nope --batch 4", 1, "unknown model");
    EXPECT_RUN("bench --model cnn --batch 0", 1, "--batch");
    EXPECT_RUN("bench --model cnn --batch 4 --reps 0", 1, "--reps");
    EXPECT_RUN("bench --model cnn --batch 4 --seconds fast", 1, "--seconds");
    EXPECT_RUN("bench --model cnn --batch 4 --input 1x3x3", 1, "too small");
    EXPECT_RUN("bench --model cnn --batch 4 --frob 1", 1, "unknown option", "--frob");
}

/* the output is exactly one CSV line `model,batch,threads,mode,samples_per_s,gflops` */
static void check_csv_line(const char *args, const char *prefix)
{
    RunResult *r = run_fedhet("%s", args);
    CHECK_MSG(!r->crashed && r->code == 0, "fedhet %s: exit %d:\n%s", args, r->code, r->out);
    int lines = 0;
    for (const char *c = r->out; *c; c++) lines += *c == '\n';
    CHECK_MSG(lines == 1, "fedhet %s: %d lines, expected one:\n%s", args, lines, r->out);
    CHECK_MSG(strncmp(r->out, prefix, strlen(prefix)) == 0, "fedhet %s: '%s' does not start with '%s'", args, r->out,
              prefix);
    int commas = 0;
    for (const char *c = r->out; *c && *c != '\n'; c++) commas += *c == ',';
    CHECK_MSG(commas == 5, "fedhet %s: %d fields, expected 6: %s", args, commas + 1, r->out);
    /* the last two fields are positive numbers */
    const char *f5 = r->out;
    for (int i = 0; i < 4 && f5; i++) {
        f5 = strchr(f5, ',');
        if (f5) f5++;
    }
    if (f5) {
        char *end = NULL;
        double rate = strtod(f5, &end);
        CHECK_MSG(end && *end == ',' && rate > 0.0, "fedhet %s: samples_per_s field '%s'", args, f5);
        if (end && *end == ',') {
            double gflops = strtod(end + 1, &end);
            CHECK_MSG(end && (*end == '\n' || *end == '\0') && gflops > 0.0, "fedhet %s: gflops field", args);
        }
    }
}

static void test_bench_csv(void)
{
    check_csv_line("bench --model mlp --batch 8 --reps 1 --seconds 0.05", "mlp,8,1,sgd,");
    check_csv_line("bench --model mlp --batch 4 --reps 1 --seconds 0.05 --mode sam", "mlp,4,1,sam,");
    check_csv_line("bench --model cnn --input 1x8x8 --batch 2 --reps 1 --seconds 0.02", "cnn,2,1,sgd,");
    EXPECT_RUN("bench --model mlp --batch 8 --reps 1 --seconds 0.02 --header", 0,
               "model,batch,threads,mode,samples_per_s,gflops\nmlp,8,1,sgd,");
    /* both steps in turns: a line for each, SGD first */
    EXPECT_RUN("bench --model mlp --batch 4 --reps 2 --seconds 0.02 --mode both", 0, "mlp,4,1,sgd,", "\nmlp,4,1,sam,");
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (test_bin_locate(argv[0]) != 0) return 1;
    RUN(test_help);
    RUN(test_no_command_and_unknown_command);
    RUN(test_inspect_counts);
    RUN(test_inspect_errors);
    RUN(test_bench_errors);
    RUN(test_bench_csv);
    return test_summary();
}
