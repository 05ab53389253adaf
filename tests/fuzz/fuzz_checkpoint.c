/* libFuzzer target: checkpoints (fl_checkpoint_read_config and fl_checkpoint_load, what `fedhet run
 * --resume` reads) into a small run on MPI_COMM_SELF (fake_run.h). Properties: a refused checkpoint
 * is an I/O or config error, and one that loads has its round within 0..fl.rounds. */
#include <hdf5.h>
#include <sanitizer/lsan_interface.h>

#include "fuzz.h"

#include "fake_run.h"

/* HDF5 1.10 itself leaks on some damaged files (inside H5Dopen2 and the like): not ours to fix. Our own
 * leaks of HDF5 objects are caught by the open-object count below, which does not depend on LSan. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    int provided;
    /* Open MPI keeps what it allocates at start-up to the end (no MPI_Finalize here): not a leak of ours */
    __lsan_disable();
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) abort();
    __lsan_enable();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FlRun *run = calloc(1, sizeof *run); /* ~30 KiB of paths and names */
    if (!run) abort();
    fake_run_init(run, fuzz_tmp_dir());
    fuzz_path(run->checkpoint_path, sizeof run->checkpoint_path, "checkpoint.h5");
    fuzz_write(run->checkpoint_path, data, size);
    char *text = NULL;
    if (fl_checkpoint_read_config(run->checkpoint_path, &text) == FH_OK) free(text);
    fh_error_clear();
    int status = fl_checkpoint_load(run);
    if (status == FH_OK) {
        FUZZ_ASSERT(run->start_round >= 0 && run->start_round <= run->s.rounds, "start round %d of %d",
                    run->start_round, run->s.rounds);
        FUZZ_ASSERT(run->n_rows >= 0 && run->n_rows <= run->s.rounds, "%d metric rows", run->n_rows);
    } else {
        FUZZ_ASSERT(status == FH_ERR_IO || status == FH_ERR_USAGE, "status %d: %s", status, fh_error_message());
    }
    fh_error_clear();
    FUZZ_ASSERT(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0, "%ld HDF5 objects left open",
                (long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL));
    fake_run_free(run);
    free(run);
    return 0;
}
