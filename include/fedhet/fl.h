/* fedhet federated runtime: one experiment as an MPI job (docs/architecture.md: a round).
 * Rank 0 is the server; ranks 1..N-1 train the clients assigned to them; with one rank, rank 0 does
 * everything. */
#ifndef FEDHET_FL_H
#define FEDHET_FL_H

#include <mpi.h>
#include <stdio.h>

#include "fedhet/config.h"
#include "fedhet/data.h"
#include "fedhet/nn.h"

typedef struct {
    const char *config_path;   /* INI file; NULL with resume_dir (the run folder's config.ini) */
    char *const *overrides;    /* "section.key=value" */
    int n_overrides;
    int force;                 /* replace an existing run folder */
    const char *resume_dir;    /* continue this run folder from its checkpoint */
    int *stopped;              /* out, optional (for fedhet grid): 1 when SIGTERM stopped the run before its last
                                * round (its checkpoint written, FH_OK returned), else 0 */
} FlRunOptions;

/* Runs one experiment on comm. Every rank returns the same status (the exit code); rank 0 prints the
 * error. SIGTERM (fh_stop_requested) makes the run finish its round, or leave one
 * that would outlast [fl] term_grace, checkpoint and return FH_OK. */
int fl_run(const FlRunOptions *opt, MPI_Comm comm);

/* 1 when RUN_DIR/run.h5 exists, is not older than RUN_DIR/checkpoint.h5 (or there is no checkpoint) and
 * passes fl_checkpoint_verify: a run whose final checkpoint is newer was stopped before its final model was
 * written; a damaged one (warned about) is rebuilt from the final checkpoint. */
int fl_final_model_current(const char *run_dir);
/* A checkpoint or run file is whole: it opens, /meta is a fedhet checkpoint's, every dataset reads back
 * with its checksums, and its completeness mark (when it has one: files written before the mark have
 * none) matches. FH_ERR_IO naming the file and the damage otherwise. */
int fl_checkpoint_verify(const char *path);

/* Reading a checkpoint or run file (checkpoint.h5, run.h5) outside a run, e.g. for fedhet landscape: */
/* the resolved config text it was written with (free() it); FH_ERR_IO for a file that is no checkpoint */
int fl_checkpoint_read_config(const char *path, char **text);
/* Prints what the file holds (rounds, model size, clients and their persistent state); with client_state_out, also
 * writes every client's persistent state there (HDF5: /clients/vector_<i> [K, n_state], /clients/floats [K, F],
 * /clients/has_state [K, 1]; zeros for a client that has not trained), read from the client-state.bin beside path.
 * FH_ERR_DATA for a file that is no checkpoint, or a store that is missing or does not match it. */
int fl_checkpoint_inspect(const char *path, const char *client_state_out);
/* Its global state, for model m (built from that config): the format, the version and the model layout
 * are checked first; a file written by another model is FH_ERR_USAGE naming the file, even one of the same
 * size. state: [m->n_state]; rounds_done (optional): the rounds the file holds. */
int fl_checkpoint_read_global(const char *path, const NnModel *m, float *state, int64_t *rounds_done);

/* A saved run's model, built as the run built it (src/fl/run_model.c): from the config text a checkpoint or run
 * file holds (fl_checkpoint_read_config), read with the run's schema, so with the run's defaults and renamed keys. */
typedef struct FlRunModel FlRunModel;
/* source names the text in messages (the file it came from); a config the run would refuse is refused */
int fl_run_model_open(FlRunModel **out, const char *config_text, const char *source);
/* [data] path: the run's partition file */
const char *fl_run_model_data_path(const FlRunModel *r);
/* The partition file at path (NULL: the run's [data] path) as the run read it: its inputs normalised as [data]
 * normalise says */
int fl_run_model_data_open(const FlRunModel *r, const char *path, DataPartFile *f);
/* the model's name: the zoo's, or "onnx" for a [model] onnx graph */
const char *fl_run_model_name(const FlRunModel *r);
/* The run's model for the partition file f's shape, classes and clients: the zoo model with the [model] keys and
 * [train] backend, or the [model] onnx graph, with what the method adds (MOON's projection head); parameters not
 * initialised; max_batch as nn_zoo_build's. Free the model before closing r. */
int fl_run_model_build(const FlRunModel *r, const DataPartFile *f, int max_batch, NnModel *m);
void fl_run_model_close(FlRunModel **r);

/* Checks a config as fl_run would before its run folder exists, without writing anything or starting work (no
 * MPI needed): the file, the overrides, every key and method rule; that [data] path exists or [data] source can
 * make it; and, when the file exists, that it can be read, has a test set when evaluation is on, fits `ranks`
 * (0: not checked) and suits the method. FH_OK or the error fl_run would report. */
int fl_config_validate(const char *config_path, char *const *overrides, int n_overrides, int ranks);

/* Waits for req politely: MPI_Test with short sleeps between polls (src/fl/comm.c has the backoff), so
 * that waiting ranks leave the cores to ranks that compute (more ranks than cores is the usual case on a
 * workstation). Every wait of fl and of the grid goes through it, but the fold's reductions, which every rank is in
 * (fl_wait_busy). */
int fl_wait(MPI_Request *req);

/* The config schema of `fedhet run`: the keys every method shares */
const FhConfigKey *fl_config_schema(int *n);
/* The same followed by the keys of method m and of plugin (NULL: none), with m's own defaults and help (kept for the
 * process's lifetime) */
struct AlgoMethod;
const FhConfigKey *fl_config_schema_for(const struct AlgoMethod *m, const struct AlgoMethod *plugin, int *n);
/* The same followed by every method's keys, each once and as free text (their types depend on the method) */
const FhConfigKey *fl_config_schema_any(int *n);
void fl_print_config_help(FILE *out);

#endif
