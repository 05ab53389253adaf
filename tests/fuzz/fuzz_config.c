/* libFuzzer target: run configs (INI text), through the loader `fedhet run` uses (fl_config_load: the INI
 * reader of src/core/ini_reader.c checked against the schema with the method's keys, then
 * fl_settings_from_config) and through the reader alone without a schema (fh_ini_parse). Property: a
 * config that loads gives resolved text that loads again to the same values and the same text (what run
 * folders and --resume rely on). */
#include "fuzz.h"

#include "fedhet/config.h"
#include "../../src/fl/fl_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    FhIni ini;
    if (fh_ini_parse(&ini, text, "fuzz.ini") == FH_OK) fh_ini_free(&ini);
    fh_error_clear();

    char path[512];
    fuzz_path(path, sizeof path, "config.ini");
    fuzz_write(path, data, size);
    FhConfig *cfg = NULL;
    if (fl_config_load(&cfg, path, 0, NULL, 0) == FH_OK) {
        FlSettings s;
        (void)fl_settings_from_config(&s, cfg, path);
        fh_error_clear();
        char *resolved = NULL, *again_text = NULL, *diff = NULL;
        FUZZ_ASSERT(fh_config_to_text(cfg, &resolved) == FH_OK, "%s", fh_error_message());
        int n = 0;
        const FhConfigKey *schema = fl_config_schema_for(algo_find(fh_config_string(cfg, "algo", "method")),
                                                         algo_find(fh_config_string(cfg, "algo", "plugin")), &n);
        FhConfig *again = NULL;
        FUZZ_ASSERT(fh_config_load_text(&again, schema, n, resolved, "resolved", NULL, 0) == FH_OK,
                    "resolved text does not load: %s\n--- text:\n%s", fh_error_message(), resolved);
        FUZZ_ASSERT(fh_config_diff(cfg, again, NULL, &diff) == FH_OK, "%s", fh_error_message());
        FUZZ_ASSERT(diff == NULL, "reloaded values differ: %s", diff);
        FUZZ_ASSERT(fh_config_to_text(again, &again_text) == FH_OK, "%s", fh_error_message());
        FUZZ_ASSERT(!strcmp(resolved, again_text), "resolved text changes on reload:\n%s\n---\n%s", resolved,
                    again_text);
        FUZZ_ASSERT(fh_config_hash(cfg) == fh_config_hash(again), "hash changes on reload");
        free(resolved);
        free(again_text);
        fh_config_free(&again);
        fh_config_free(&cfg);
    }
    fh_error_clear();
    free(text);
    return 0;
}
