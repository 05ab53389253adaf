/* libFuzzer target: grid files (fedhet grid): grid_spec_load, then every member's name and overrides
 * for the first members, as `fedhet grid --list` prints them. */
#include "fuzz.h"

#include "fedhet/grid.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_path(path, sizeof path, "grid.ini");
    fuzz_write(path, data, size);
    GridSpec *g = calloc(1, sizeof *g); /* ~20 KiB of paths: not on the stack */
    if (!g) abort();
    if (grid_spec_load(g, path, NULL, 0) == FH_OK) {
        FUZZ_ASSERT(g->n_members >= 1, "a loaded grid has %lld members", (long long)g->n_members);
        for (int64_t i = 0; i < g->n_members && i < 64; i++) {
            char name[1024];
            grid_member_name(g, i, name, sizeof name);
            FUZZ_ASSERT(name[0] != '\0', "member %lld has an empty name", (long long)i);
            char **ov = NULL;
            int n = 0;
            if (grid_member_overrides(g, i, &ov, &n) == FH_OK) grid_strings_free(ov, n);
        }
    }
    grid_spec_free(g);
    free(g);
    fh_error_clear();
    return 0;
}
