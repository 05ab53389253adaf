/* What a user reads when something fails (src/core/error.c fh_error_format, printed by src/app/main.c): a
 * user's mistake (config, key, value, file, data, I/O) is one line naming it, its hint after "; "; the call
 * chain ("  at file:line" frames) is printed only for internal errors (a bug: a status passed up with no
 * message, an MPI failure) and for every error under FEDHET_TRACE=1. Exit codes stay 1 usage/config,
 * 2 input data, 4 I/O. One sample of each class through the real bin/fedhet, and the formatter alone.
 *   make bin/fedhet build/tests/test_messages && build/tests/test_messages [test_name] */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* popen, pclose, setenv, mkdtemp */
#endif

#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "onnx.pb-c.h" /* an ONNX file of our own making (build/gen, protoc-c) */
#include "test_bin.h"
#include "test_tmp.h"

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* one sample run: exit code, exactly `lines` output lines, no frame, and the needles */
#define EXPECT_LINES(r, code, lines, ...)                                                                     \
    do {                                                                                                      \
        RunResult *rr_ = (r);                                                                                 \
        EXPECT(rr_, code, __VA_ARGS__);                                                                       \
        CHECK_MSG(count_lines(rr_->out) == (lines), "%s: %d lines, expected %d:\n%s", rr_->cmd,               \
                  count_lines(rr_->out), lines, rr_->out);                                                    \
        CHECK_MSG(strstr(rr_->out, "  at src/") == NULL, "%s: a call chain for a user's mistake:\n%s",        \
                  rr_->cmd, rr_->out);                                                                        \
    } while (0)

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
    tmp_record(path);
}

/* ---- the formatter ---- */

static void test_format_user_error(void)
{
    char out[512];
    unsetenv("FEDHET_TRACE");
    fh_error_raise(FH_ERR_USAGE, "src/core/config.c", 227, "x.ini:4: unknown key 'roundz' in [fl]; did you mean 'rounds'?");
    fh_error_trace(FH_ERR_USAGE, "src/fl/run.c", 34, "fl_config_load(...)");
    fh_error_format(FH_ERR_USAGE, fh_error_message(), out, sizeof out);
    CHECK_MSG(!strcmp(out, "x.ini:4: unknown key 'roundz' in [fl]; did you mean 'rounds'?"), "got '%s'", out);
    CHECK(!strcmp(fh_error_text(FH_ERR_USAGE), out));
    /* the whole chain stays available (log.txt, bug reports) */
    CHECK(strstr(fh_error_message(), "  at src/fl/run.c:34") != NULL);
    /* a chain adopted from another rank keeps its prefix and loses its frames */
    fh_error_format(FH_ERR_DATA, "rank 2: bad label 12 in x.h5\n  at src/data/loader.c:10", out, sizeof out);
    CHECK_MSG(!strcmp(out, "rank 2: bad label 12 in x.h5"), "got '%s'", out);
    /* a message of two lines (a hint line) keeps both */
    fh_error_format(FH_ERR_IO, "cannot write x\n  hint: the disk is full\n  at src/core/files.c:3", out, sizeof out);
    CHECK_MSG(!strcmp(out, "cannot write x\n  hint: the disk is full"), "got '%s'", out);
    fh_error_clear();
}

static void test_format_internal_and_trace(void)
{
    char out[512];
    unsetenv("FEDHET_TRACE");
    /* a status passed up without a message is a bug: the chain is what a report needs */
    fh_error_clear();
    fh_error_trace(FH_ERR_IO, "src/fl/run.c", 99, "step()");
    fh_error_format(FH_ERR_IO, fh_error_message(), out, sizeof out);
    CHECK_MSG(strstr(out, "no message recorded") && strstr(out, "  at src/fl/run.c:99"), "got '%s'", out);
    /* MPI failures and statuses outside the exit codes */
    fh_error_format(FH_ERR_MPI, "MPI_Bcast failed\n  at src/fl/comm.c:5", out, sizeof out);
    CHECK_MSG(strstr(out, "  at src/fl/comm.c:5") != NULL, "got '%s'", out);
    fh_error_format(7, "odd\n  at a.c:1", out, sizeof out);
    CHECK_MSG(strstr(out, "  at a.c:1") != NULL, "got '%s'", out);
    /* FEDHET_TRACE=1 asks for the chain of any error; 0 or empty does not */
    setenv("FEDHET_TRACE", "1", 1);
    fh_error_format(FH_ERR_USAGE, "bad\n  at a.c:1", out, sizeof out);
    CHECK_MSG(!strcmp(out, "bad\n  at a.c:1"), "got '%s'", out);
    setenv("FEDHET_TRACE", "0", 1);
    fh_error_format(FH_ERR_USAGE, "bad\n  at a.c:1", out, sizeof out);
    CHECK_MSG(!strcmp(out, "bad"), "got '%s'", out);
    unsetenv("FEDHET_TRACE");
    /* a tiny buffer is cut, never overrun */
    char small[4];
    fh_error_format(FH_ERR_USAGE, "abcdef\n  at a.c:1", small, sizeof small);
    CHECK_MSG(!strcmp(small, "abc"), "got '%s'", small);
    fh_error_clear();
}

/* ---- one sample of each class through bin/fedhet ---- */

static void test_config_key_and_value(void)
{
    char ini[256], clean[256];
    snprintf(ini, sizeof ini, "%s/typo.ini", tmp_root);
    write_file(ini, "[data]\npath = p.h5\n[fl]\nroundz = 3\n");
    snprintf(clean, sizeof clean, "%s/clean.ini", tmp_root);
    write_file(clean, "[data]\npath = p.h5\n");
    /* a mistyped key in the file: its line, the key, the nearest key */
    EXPECT_LINES(run_fedhet("run '%s'", ini), 1, 1, "typo.ini:4: unknown key 'roundz' in [fl]",
                 "did you mean 'rounds'?");
    /* the same on the command line */
    EXPECT_LINES(run_fedhet("run '%s' fl.roundz=3", clean), 1, 1, "command line", "did you mean 'rounds'?");
    /* a bad value */
    EXPECT_LINES(run_fedhet("run '%s' fl.rounds=abc", clean), 1, 1, "not an integer");
    /* FEDHET_TRACE=1: the call chain too */
    RunResult *r = run_fedhet_env("FEDHET_TRACE=1", "run '%s'", ini);
    EXPECT(r, 1, "did you mean 'rounds'?", "  at src/core/config.c:");
}

static void test_usage_file_data_io(void)
{
    /* usage: an unknown model */
    EXPECT_LINES(run_fedhet("inspect --model nope"), 1, 1, "unknown model");
    /* a file that is not there: input data */
    EXPECT_LINES(run_fedhet("run '%s/absent.ini'", tmp_root), 2, 1, "absent.ini", "cannot open");
    /* input data: an IDX file with a wrong magic (exit 2) */
    char dir[256], path[320];
    snprintf(dir, sizeof dir, "%s/idx", tmp_root);
    CHECK(mkdir(dir, 0700) == 0);
    tmp_record(dir);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    write_file(path, "xxxxxxxxxxxxxxxxxxxxxxxx");
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
    write_file(path, "xxxxxxxxxxxxxxxxxxxxxxxx");
    EXPECT_LINES(run_fedhet("partition '%s' '%s/o.h5' format=idx", dir, tmp_root), 2, 1, "wrong magic number");
    /* a report of a folder that does not exist (exit 2: a missing input) and a checkpoint that is not HDF5
     * (exit 4) */
    EXPECT_LINES(run_fedhet("report '%s/nothing'", tmp_root), 2, 1, "no such folder");
    snprintf(path, sizeof path, "%s/run.h5", tmp_root);
    write_file(path, "not hdf5");
    RunResult *r = run_fedhet("landscape '%s'", path);
    CHECK_MSG(r->code == 1 || r->code == 4, "%s: exit %d:\n%s", r->cmd, r->code, r->out);
    CHECK_MSG(strstr(r->out, "  at src/") == NULL, "%s: a call chain for a user's mistake:\n%s", r->cmd, r->out);
}

/* ---- one exit-code table for every command ---- */

static void test_exit_code_table(void)
{
    /* --help prints the table (the man page takes it from there) */
    EXPECT(run_fedhet("--help"), 0, "exit codes (every command)", "\n  1      usage or config", "\n  2      input data",
           "\n  3      numerical divergence", "\n  4      I/O", "\n  5      MPI", "\n  6      out of memory",
           "\n  10+N   fedhet grid");
    CHECK(!strcmp(fh_status_name(FH_ERR_MEMORY), "out of memory"));
    /* an out-of-memory error is a user-facing one of its own code, not an internal error */
    char out[256];
    unsetenv("FEDHET_TRACE");
    fh_error_format(FH_ERR_MEMORY, "out of memory allocating 9.0 MiB for x\n  at src/core/error.c:1", out, sizeof out);
    CHECK_MSG(!strcmp(out, "out of memory allocating 9.0 MiB for x"), "got '%s'", out);
    void *p = NULL;
    CHECK(fh_calloc(&p, SIZE_MAX / 2, 4, "too much") == FH_ERR_MEMORY);
    fh_error_clear();
    /* a grid's failed members: a summary for the user, not a call chain */
    fh_error_format(12, "2 of 3 members failed\n  at src/grid/run.c:614", out, sizeof out);
    CHECK_MSG(!strcmp(out, "2 of 3 members failed"), "got '%s'", out);
}

/* a missing input file is input data (2) for every command */
static void test_missing_input_is_data(void)
{
    char ini[256], cfg[256], plain[256];
    snprintf(ini, sizeof ini, "%s/nodata.ini", tmp_root);
    write_file(ini, "[data]\npath = /nonexistent/p.h5\n");
    snprintf(plain, sizeof plain, "%s/plain", tmp_root);
    CHECK(mkdir(plain, 0700) == 0);
    tmp_record(plain);
    snprintf(cfg, sizeof cfg, "%s/plain/notes.txt", tmp_root);
    write_file(cfg, "not a run\n");
    const char *absent = "/nonexistent/fedhet-absent";
    EXPECT_LINES(run_fedhet("run %s.ini", absent), 2, 1, "absent.ini", "cannot open");
    EXPECT_LINES(run_fedhet("run '%s'", ini), 2, 1, "nodata.ini:2: [data] path = /nonexistent/p.h5 does not exist");
    EXPECT_LINES(run_fedhet("run --resume %s", absent), 2, 1, "no such folder");
    EXPECT_LINES(run_fedhet("run --resume '%s'", plain), 2, 1, "plain: not a run folder");
    CHECK(strstr(run_fedhet("run --resume '%s'", plain)->out, "config.ini: cannot open") == NULL);
    EXPECT_LINES(run_fedhet("grid %s.ini", absent), 2, 1, "cannot open");
    EXPECT_LINES(run_fedhet("export %s x.onnx", absent), 2, 1, "no such folder");
    EXPECT_LINES(run_fedhet("export '%s' x.onnx", plain), 2, 1, "not a run folder");
    EXPECT_LINES(run_fedhet("partition %s x.h5", absent), 2, 1, "fedhet-absent");
    EXPECT_LINES(run_fedhet("landscape %s.h5", absent), 2, 1, "cannot open");
    EXPECT_LINES(run_fedhet("inspect %s.h5", absent), 2, 1, "cannot open");
    EXPECT_LINES(run_fedhet("inspect --model %s.onnx", absent), 2, 1, "cannot open");
    EXPECT_LINES(run_fedhet("report %s", absent), 2, 1, "no such folder");
}

/* the hint a typo or a malformed line gets */
static void test_hints(void)
{
    char ini[256];
    snprintf(ini, sizeof ini, "%s/noeq.ini", tmp_root);
    write_file(ini, "[data]\npath = p.h5\n[fl]\nrounds\n");
    EXPECT_LINES(run_fedhet("run '%s'", ini), 1, 1, "noeq.ini:4: syntax error: 'rounds' has no '='",
                 "key = value");
    /* commands and methods: the nearest name */
    EXPECT(run_fedhet("rn"), 1, "unknown command 'rn'; did you mean 'run'?");
    EXPECT_LINES(run_fedhet("methods fedsamm"), 1, 1, "no method named 'fedsamm'; did you mean 'fedsam'?");
    /* a key given on the command line is the command line's, not the file's */
    snprintf(ini, sizeof ini, "%s/fedavg.ini", tmp_root);
    write_file(ini, "[data]\npath = p.h5\n[algo]\nmethod = fedavg\n");
    RunResult *r = run_fedhet("run '%s' algo.rho=0.1", ini);
    EXPECT_LINES(r, 1, 1, "command line: [algo] rho is a key of");
    CHECK_MSG(strstr(r->out, "fedavg.ini: [algo] rho") == NULL, "blamed on the file:\n%s", r->out);
    write_file(ini, "[data]\npath = p.h5\n[algo]\nmethod = fedavg\nrho = 0.1\n");
    EXPECT_LINES(run_fedhet("run '%s'", ini), 1, 1, "fedavg.ini:5: [algo] rho is a key of");
}

/* an ONNX file whose input has a side of 2^31 and a long name: the input in range or named, the name whole */
static void test_onnx_input_out_of_range(void)
{
    char path[400];
    snprintf(path, sizeof path, "%s/a-model-file-with-a-name-longer-than-thirty-two-characters.onnx", tmp_root);
    Onnx__TensorShapeProto__Dimension d[4] = { ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT,
                                               ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT,
                                               ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT,
                                               ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT };
    Onnx__TensorShapeProto__Dimension *dp[4];
    const int64_t dims[4] = { 1, 1, (int64_t)1 << 31, 4 };
    for (int i = 0; i < 4; i++) {
        d[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        d[i].dim_value = dims[i];
        dp[i] = &d[i];
    }
    Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 4;
    shape.dim = dp;
    Onnx__TypeProto__Tensor tensor = ONNX__TYPE_PROTO__TENSOR__INIT;
    tensor.has_elem_type = 1;
    tensor.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tensor.shape = &shape;
    Onnx__TypeProto type = ONNX__TYPE_PROTO__INIT;
    type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type.tensor_type = &tensor;
    Onnx__ValueInfoProto in = ONNX__VALUE_INFO_PROTO__INIT, out = ONNX__VALUE_INFO_PROTO__INIT;
    in.name = "x";
    in.type = &type;
    out.name = "y";
    Onnx__ValueInfoProto *ins[1] = { &in }, *outs[1] = { &out };
    char *node_in[1] = { "x" }, *node_out[1] = { "y" };
    Onnx__NodeProto node = ONNX__NODE_PROTO__INIT;
    node.op_type = "Flatten";
    node.n_input = node.n_output = 1;
    node.input = node_in, node.output = node_out;
    Onnx__NodeProto *nodes[1] = { &node };
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    graph.name = "big";
    graph.n_node = graph.n_input = graph.n_output = 1;
    graph.node = nodes, graph.input = ins, graph.output = outs;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    opset.has_version = 1;
    opset.version = 13;
    Onnx__OperatorSetIdProto *opsets[1] = { &opset };
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = 7;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.graph = &graph;
    size_t len = onnx__model_proto__get_packed_size(&model);
    uint8_t *buf = malloc(len);
    CHECK(buf != NULL);
    if (!buf) return;
    onnx__model_proto__pack(&model, buf);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, len, f) == len);
    if (f) fclose(f);
    free(buf);
    tmp_record(path);
    RunResult *r = run_fedhet("inspect --model '%s'", path);
    EXPECT_LINES(r, 2, 1, "a-model-file-with-a-name-longer-than-thirty-two-characters.onnx: the graph's input shape",
                 "--input");
    CHECK_MSG(strstr(r->out, "-2147483648") == NULL, "2^31 printed as a negative number:\n%s", r->out);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    /* bin/fedhet of a sanitized build: Open MPI's allocations at MPI_Init are never freed, and leak reports
     * would add lines to the one-line messages counted here (tests/mpi/lib.sh does the same for its runs) */
    setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
    if (test_bin_locate(argv[0]) != 0) return 1;
    if (tmp_init("messages") != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(test_format_user_error);
    RUN(test_format_internal_and_trace);
    RUN(test_config_key_and_value);
    RUN(test_usage_file_data_io);
    RUN(test_exit_code_table);
    RUN(test_missing_input_is_data);
    RUN(test_hints);
    RUN(test_onnx_input_out_of_range);
    tmp_cleanup();
    return test_summary();
}
