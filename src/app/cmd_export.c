/* fedhet export: a run's global model (zoo or imported) as an ONNX inference graph (src/onnx/export.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/fl.h"
#include "fedhet/onnx.h"

static void print_help(void)
{
    printf("usage: fedhet export RUN_DIR [--round R] FILE.onnx\n"
           "\n"
           "Writes the global model of run RUN_DIR (outputs/NAME) as an ONNX inference graph, opset 13: its trained\n"
           "weights, batch norms in their inference form with the running statistics, dropout left out, the batch\n"
           "dimension symbolic. onnx.checker accepts it; `[model] onnx = FILE.onnx` (or `fedhet inspect --model`)\n"
           "imports it back as the same model, with the same logits bit for bit. Works for zoo models and imported\n"
           "ones (docs/onnx.md).\n"
           "  RUN_DIR     a run folder: its run.h5 (the final model), or its checkpoint.h5 while it is unfinished\n"
           "  --round R   the model after round R: the run keeps the final model (run.h5) and the latest checkpoint\n"
           "              (checkpoint.h5), so R must be the round one of them holds (the error lists them)\n"
           "The model is built from the run's config with its partition file's shape and classes ([data] path).\n");
}

/* the run's model, as the run built it from the config text `path` holds (nothing to free in m on failure) */
static int build_model(const char *path, NnModel *m, FlRunModel **run)
{
    char *text = NULL;
    FH_CHECK(fl_checkpoint_read_config(path, &text));
    int status = fl_run_model_open(run, text, path);
    free(text);
    FH_CHECK(status);
    DataPartFile f;
    FH_CHECK(fl_run_model_data_open(*run, NULL, &f));
    status = fl_run_model_build(*run, &f, 1, m);
    data_partfile_close(&f);
    if (status != FH_OK) nn_model_free(m); /* nn_zoo_build leaves it freeable */
    return status;
}

int app_cmd_export(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL;
    int round = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return FH_OK;
        }
        if (!strcmp(argv[i], "--round")) {
            const char *v;
            FH_CHECK(app_option_value(argc, argv, &i, &v));
            FH_CHECK(app_parse_int(v, "--round", 0, 1 << 30, &round));
        } else if (argv[i][0] == '-') FH_FAIL(FH_ERR_USAGE, "unknown option %s (fedhet export --help)", argv[i]);
        else if (!dir) dir = argv[i];
        else if (!out) out = argv[i];
        else FH_FAIL(FH_ERR_USAGE, "one run folder and one output file (fedhet export --help): %s is too many", argv[i]);
    }
    if (!dir || !out) FH_FAIL(FH_ERR_USAGE, "usage: fedhet export RUN_DIR [--round R] FILE.onnx (--help)");
    if (!onnx_is_path(out)) FH_FAIL(FH_ERR_USAGE, "%s: the output's name must end in .onnx", out);
    /* run.h5 when present, else the checkpoint; --round picks the one holding that round */
    const char *files[2] = { "run.h5", "checkpoint.h5" };
    char path[FH_PATH_MAX], held[256] = "";
    int status = FH_ERR_USAGE, found = 0;
    NnModel m;
    FlRunModel *run = NULL;
    float *state = NULL;
    for (int k = 0; k < 2 && !found; k++) {
        if (!fh_path_exists(dir, files[k])) continue;
        FH_CHECK(fh_path_join(path, sizeof path, dir, files[k]));
        fl_run_model_close(&run);
        int64_t rounds = 0;
        status = build_model(path, &m, &run);
        if (status != FH_OK) {
            fl_run_model_close(&run);
            return status;
        }
        status = fh_alloc_aligned(&state, (size_t)m.n_state * sizeof *state, "model state");
        if (status == FH_OK) status = fl_checkpoint_read_global(path, &m, state, &rounds);
        if (status == FH_OK && (round < 0 || rounds == round)) found = 1;
        else if (status == FH_OK) {
            snprintf(held + strlen(held), sizeof held - strlen(held), "%s%s: round %lld", *held ? ", " : "", files[k],
                     (long long)rounds);
            nn_model_free(&m);
            fh_free(&state);
        } else {
            nn_model_free(&m);
            fh_free(&state);
            fl_run_model_close(&run);
            return status;
        }
    }
    if (!found) {
        fl_run_model_close(&run);
        if (!fh_path_exists(dir, NULL)) FH_FAIL(FH_ERR_DATA, "%s: no such folder", dir);
        if (!*held) FH_FAIL(FH_ERR_DATA, "%s is not a run folder (no run.h5 or checkpoint.h5)", dir);
        FH_FAIL(FH_ERR_USAGE, "%s: no model after round %d is kept (%s)", dir, round, held);
    }
    status = onnx_export(&m, state, out);
    if (status == FH_OK) printf("%s: %s (%d layers, %lld parameters)\n", out, path, m.n_layers, (long long)m.n_params);
    nn_model_free(&m);
    fh_free(&state);
    fl_run_model_close(&run);
    return status;
}
