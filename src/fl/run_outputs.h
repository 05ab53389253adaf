/* A run's outputs on rank 0 (src/fl/run_outputs.c): what the run (run.c) calls to make its folder and write its
 * CSVs and lines. The outputs read the run's state (FlRun) and call nothing of run.c. */
#ifndef FEDHET_FL_RUN_OUTPUTS_H
#define FEDHET_FL_RUN_OUTPUTS_H

#include <stdio.h>

#include "fl_internal.h"

/* The run folder, made or reopened with its lock (mode 0: reopen for --resume, 1: make, 2: make or replace for
 * --force); a folder that is a symbolic link is refused. */
int fl_claim_run_folder(FlRun *run, int mode);
/* Once setup has succeeded: the folder's config.ini (a new run first loses the files of the one it replaces),
 * log.txt, and metrics.csv and clients.csv with the rows kept so far (no symbolic link is written through). */
int fl_open_outputs(FlRun *run, const FlRunOptions *opt);
/* After an error: a folder this run made that holds no checkpoint is removed. */
void fl_remove_empty_run_folder(FlRun *run);
/* metrics.csv's per-domain accuracy columns (a test set of two or more domains) and their values this round */
int fl_domain_columns(FlRun *run);
void fl_domain_accuracy(FlRun *run);
/* clients.csv's columns (the method's named scalars after the fixed ones) and the rows kept for a resume */
int fl_client_columns(FlRun *run);
int fl_reserve_client_rows(FlRun *run);
/* CSV rows: cells (after_cells: a comma first), the row's end (a full disk: FH_ERR_IO naming dir/name), both */
void fl_csv_cells(FILE *f, const double *row, int n_cols, int after_cells);
int fl_csv_end_row(FILE *f, const char *dir, const char *name);
int fl_csv_row(FILE *f, const double *row, int n_cols, const char *dir, const char *name);
/* the round's progress line, the line of a run stopped after round t, the memory lines */
void fl_progress_line(const FlRun *run, const double *row, double eta);
void fl_left_round_line(const FlRun *run, int t, int checkpointed);
void fl_print_budget(const FlRun *run);
/* every rank (collective): rank 0 logs the ranks' peak resident memory */
int fl_peak_memory_line(const FlRun *run);

#endif
