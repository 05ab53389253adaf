/* Unit tests of grid files (src/grid/spec.c) and the report statistics (src/analysis/report.c, docs/methods/metrics.md C.2 / C.3):
 * lists, ranges, zip lines, key resolution, member order and names, overrides, bad grid files, member state
 * files. The MPI side (groups, claims, SIGTERM, resume) is tests/mpi/test_grid.sh.
 * Run alone: make build/tests/test_grid && build/tests/test_grid [test_name] */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_tmp.h"

#include "fedhet/algo.h"
#include "fedhet/analysis.h"
#include "fedhet/fl.h"
#include "fedhet/grid.h"

/* writes text to tmp/name and returns the path */
static const char *write_tmp(const char *name, const char *text)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    tmp_record(path);
    return path;
}

#define BASE "[data]\npath = /nonexistent/p.h5\n[model]\nname = mlp\n[fl]\nrounds = 2\n[output]\ndir = /tmp/fedhet-grid-test-out\n"

/* loads a grid from text; returns the status, message in fh_error_message() */
static int load(GridSpec *g, const char *text, char *const *args, int n_args)
{
    const char *path = write_tmp("sweep.ini", text);
    fh_error_clear();
    return grid_spec_load(g, path, args, n_args);
}

/* the load must fail with FH_ERR_USAGE and a message holding every given word */
static void expect_error(const char *text, char *const *args, int n_args, const char *w1, const char *w2)
{
    GridSpec g;
    int st = load(&g, text, args, n_args);
    CHECK_MSG(st == FH_ERR_USAGE, "status %d for grid:\n%s", st, text);
    const char *m = fh_error_message();
    CHECK_MSG(!w1 || strstr(m, w1), "message lacks '%s': %s", w1, m);
    CHECK_MSG(!w2 || strstr(m, w2), "message lacks '%s': %s", w2, m);
    grid_spec_free(&g);
    fh_error_clear();
}

static void test_lists_and_product(void)
{
    GridSpec g;
    CHECK_OK(load(&g, BASE "[grid]\ntrain.lr = 0.01, 0.05 ; a comment\nseed = 0..2\nranks_per_member = 2\n", NULL, 0));
    CHECK(g.n_axes == 2);
    CHECK(!strcmp(g.axes[0].key, "train.lr"));
    CHECK(!strcmp(g.axes[1].key, "fl.seed"));
    CHECK(g.axes[0].n_values == 2 && g.axes[1].n_values == 3);
    CHECK(g.n_members == 6);
    CHECK(g.ranks_per_member == 2);
    /* the last key varies fastest */
    const char *want[6][2] = { { "0.01", "0" }, { "0.01", "1" }, { "0.01", "2" },
                               { "0.05", "0" }, { "0.05", "1" }, { "0.05", "2" } };
    for (int i = 0; i < 6; i++) {
        CHECK(!strcmp(grid_member_value(&g, i, 0), want[i][0]));
        CHECK(!strcmp(grid_member_value(&g, i, 1), want[i][1]));
    }
    char name[256];
    grid_member_name(&g, 4, name, sizeof name);
    CHECK_MSG(!strcmp(name, "lr-0.05_seed-1"), "name %s", name);
    /* the grid folder: [output] dir / the file's name */
    CHECK_MSG(!strcmp(g.dir, "/tmp/fedhet-grid-test-out/sweep"), "dir %s", g.dir);
    char **ov = NULL;
    int n = 0;
    CHECK_OK(grid_member_overrides(&g, 4, &ov, &n));
    CHECK(n == 4);
    if (n == 4) {
        CHECK(!strcmp(ov[0], "train.lr=0.05"));
        CHECK(!strcmp(ov[1], "fl.seed=1"));
        CHECK(!strcmp(ov[2], "output.dir=/tmp/fedhet-grid-test-out/sweep"));
        CHECK(!strcmp(ov[3], "output.name=lr-0.05_seed-1"));
    }
    grid_strings_free(ov, n);
    grid_spec_free(&g);
}

static void test_quoted_items_and_names(void)
{
    GridSpec g;
    CHECK_OK(load(&g, BASE "[grid]\nmodel.name = \"mlp\", cnn\noutput.log_level = warn, \"quiet\"\n", NULL, 0));
    CHECK(g.n_members == 4);
    CHECK(!strcmp(grid_member_value(&g, 0, 0), "mlp"));
    CHECK(!strcmp(grid_member_value(&g, 3, 1), "quiet"));
    /* two keys called name? no: model.name and output.log_level; short names are the part after the dot */
    char name[256];
    grid_member_name(&g, 3, name, sizeof name);
    CHECK_MSG(!strcmp(name, "name-cnn_log_level-quiet"), "name %s", name);
    grid_spec_free(&g);
    /* characters outside [A-Za-z0-9.+-] become '~' */
    CHECK_OK(load(&g, BASE "[grid]\ndata.path = \"/a b/c.h5\", x.h5\n", NULL, 0));
    grid_member_name(&g, 0, name, sizeof name);
    CHECK_MSG(!strcmp(name, "path-~a~b~c.h5"), "name %s", name);
    grid_spec_free(&g);
}

static void test_zip(void)
{
    GridSpec g;
    CHECK_OK(load(&g, BASE "[grid]\ntrain.lr = 0.1, 0.2, 0.3\nseed = 0, 1\ntrain.epochs = 1, 2, 3\n"
                           "zip = train.lr, epochs\n", NULL, 0));
    CHECK(g.n_dims == 2);
    CHECK(g.n_members == 6);
    /* lr and epochs move together; seed is the inner dimension */
    CHECK(!strcmp(grid_member_value(&g, 0, 0), "0.1") && !strcmp(grid_member_value(&g, 0, 2), "1"));
    CHECK(!strcmp(grid_member_value(&g, 3, 0), "0.2") && !strcmp(grid_member_value(&g, 3, 2), "2"));
    CHECK(!strcmp(grid_member_value(&g, 3, 1), "1"));
    CHECK(!strcmp(grid_member_value(&g, 5, 0), "0.3") && !strcmp(grid_member_value(&g, 5, 2), "3"));
    grid_spec_free(&g);
    expect_error(BASE "[grid]\ntrain.lr = 0.1, 0.2\ntrain.epochs = 1, 2, 3\nzip = lr, epochs\n", NULL, 0, "one length",
                 "train.epochs");
    expect_error(BASE "[grid]\ntrain.lr = 0.1, 0.2\nzip = lr, seed\n", NULL, 0, "fl.seed", "no list");
    expect_error(BASE "[grid]\ntrain.lr = 0.1, 0.2\nzip = lr\n", NULL, 0, "at least two", NULL);
}

/* "-" leaves a key unset, so that one grid can compare methods whose keys differ */
static void test_unset_values(void)
{
    GridSpec g;
    CHECK_OK(load(&g, BASE "[grid]\nalgo.method = fedavg, fedsam, fedprox\nalgo.rho = -, 0.05, -\n"
                           "algo.mu = -, -, 0.1\nzip = algo.method, algo.rho, algo.mu\nseed = 0, 1\n", NULL, 0));
    CHECK(g.n_members == 6);
    char name[256];
    grid_member_name(&g, 0, name, sizeof name);
    CHECK_MSG(!strcmp(name, "method-fedavg_seed-0"), "name %s", name);
    grid_member_name(&g, 3, name, sizeof name);
    CHECK_MSG(!strcmp(name, "method-fedsam_rho-0.05_seed-1"), "name %s", name);
    char **ov = NULL;
    int n = 0;
    CHECK_OK(grid_member_overrides(&g, 0, &ov, &n));
    CHECK_MSG(n == 4, "%d overrides", n);
    for (int j = 0; j < n; j++) CHECK_MSG(strncmp(ov[j], "algo.rho", 8) && strncmp(ov[j], "algo.mu", 7), "%s", ov[j]);
    grid_strings_free(ov, n);
    CHECK_OK(grid_member_overrides(&g, 5, &ov, &n));
    CHECK(n == 5 && !strcmp(ov[0], "algo.method=fedprox") && !strcmp(ov[1], "algo.mu=0.1"));
    grid_strings_free(ov, n);
    grid_spec_free(&g);
    /* the base config's value would silently win over "-" */
    expect_error(BASE "[algo]\nrho = 0.1\n[grid]\nalgo.method = fedavg, fedsam\nalgo.rho = -, 0.05\n"
                      "zip = algo.method, algo.rho\n", NULL, 0, "algo.rho", "unset");
    /* a member left with no key has no folder name */
    expect_error(BASE "[grid]\nalgo.rho = -, 0.05\n", NULL, 0, "sets no key", NULL);
    /* outside a zip line a value may not repeat ("-" neither: the same member twice) */
    expect_error(BASE "[grid]\nalgo.rho = 0.01, 0.05, 0.05\n", NULL, 0, "listed twice", NULL);
    expect_error(BASE "[grid]\nalgo.rho = -, 0.05, -\n", NULL, 0, "listed twice", NULL);
    /* inside one it may, as long as the zipped tuples differ */
    CHECK_OK(load(&g, BASE "[grid]\nalgo.method = fedsam, fedlesam, fedprox\nalgo.rho = 0.05, 0.05, -\n"
                           "zip = algo.method, algo.rho\n", NULL, 0));
    CHECK(g.n_members == 3);
    grid_spec_free(&g);
    expect_error(BASE "[grid]\nalgo.method = fedsam, fedsam\nalgo.rho = 0.05, 0.05\nzip = algo.method, algo.rho\n",
                 NULL, 0, "positions 1 and 2", NULL);
}

/* the longest list a grid takes: 100,000 values (its repeats found by sorting, its storage grown by doubling,
 * so that a fuzzed range list loads in milliseconds); one more is refused */
static void test_long_lists(void)
{
    GridSpec g;
    CHECK_OK(load(&g, BASE "[grid]\nfl.seed = 0..99999\n", NULL, 0));
    CHECK(g.axes[0].n_values == 100000 && g.n_members == 100000);
    grid_spec_free(&g);
    expect_error(BASE "[grid]\nfl.seed = 0..99999, 100000\n", NULL, 0, "more than 100000 values", NULL);
    expect_error(BASE "[grid]\nfl.seed = 0..50000, 50000..60000\n", NULL, 0, "value 50000 is listed twice", NULL);
}

static void test_key_resolution(void)
{
    char key[128];
    CHECK_OK(grid_resolve_key("seed", "", key, sizeof key));
    CHECK(!strcmp(key, "fl.seed"));
    CHECK_OK(grid_resolve_key("train.lr", "", key, sizeof key));
    CHECK(!strcmp(key, "train.lr"));
    fh_error_clear();
    CHECK(grid_resolve_key("name", "", key, sizeof key) == FH_ERR_USAGE);
    CHECK_MSG(strstr(fh_error_message(), "model.name") && strstr(fh_error_message(), "output.name"), "%s",
              fh_error_message());
    fh_error_clear();
    CHECK(grid_resolve_key("train.lrr", "", key, sizeof key) == FH_ERR_USAGE);
    CHECK_MSG(strstr(fh_error_message(), "did you mean train.lr"), "%s", fh_error_message());
    fh_error_clear();
    /* a key of some method is a config key */
    for (int i = 0; i < algo_count(); i++)
        if (algo_option_count(algo_at(i)) > 0) {
            char given[128];
            snprintf(given, sizeof given, "algo.%s", algo_option_at(algo_at(i), 0)->key);
            CHECK_OK(grid_resolve_key(given, "", key, sizeof key));
            CHECK(!strcmp(key, given));
            break;
        }
}

static void test_bad_grids(void)
{
    expect_error(BASE, NULL, 0, "no [grid] section", NULL);
    expect_error(BASE "[grid]\nranks_per_member = 2\n", NULL, 0, "no key to sweep", NULL);
    expect_error(BASE "[grid]\ntrain.lrr = 0.1, 0.2\n", NULL, 0, "not a config key", "train.lr");
    expect_error(BASE "[grid]\ntrain.lr =\n", NULL, 0, "empty list", "train.lr");
    expect_error(BASE "[grid]\ntrain.lr = 0.1,,0.2\n", NULL, 0, "item 2", "empty");
    expect_error(BASE "[grid]\ntrain.lr = 0.1, 0.1\n", NULL, 0, "listed twice", NULL);
    expect_error(BASE "[grid]\ntrain.lr = 0.1\ntrain.lr = 0.2\n", NULL, 0, "listed twice", "lines");
    expect_error(BASE "[grid]\nseed = 3..1\n", NULL, 0, "empty", "A <= B");
    expect_error(BASE "[grid]\noutput.name = a, b\n", NULL, 0, "cannot be swept", NULL);
    expect_error(BASE "[grid]\nranks_per_member = -1\nseed = 0, 1\n", NULL, 0, "ranks_per_member", "0: all ranks");
    GridSpec g; /* 0 is the default said aloud: all ranks */
    CHECK_OK(load(&g, BASE "[grid]\nranks_per_member = 0\nseed = 0, 1\n", NULL, 0));
    CHECK(g.ranks_per_member == 0);
    grid_spec_free(&g);
    expect_error(BASE "[grid]\nseed = 0, 1\n[grid]\nseed = 2\n", NULL, 0, "2 times", NULL);
    expect_error(BASE "[grid]\ndata.path = \"a b\", a/b\n", NULL, 0, "share the folder name", NULL);
    expect_error(BASE "[grid]\nseed = 0..9\ntrain.lr = 0..9\ntrain.epochs = 1..10\ntrain.batch_size = 1..10\n"
                      "fl.rounds = 1..10\ndata.eval_batch = 1..10\ntrain.steps = 1..10\nmodel.groups = 1..10\n",
                 NULL, 0, "more than", "refused");
}

static void test_command_line(void)
{
    GridSpec g;
    char *args[] = { "grid.seed=5,6,7", "grid.ranks_per_member=3", "train.momentum=0.9", "output.name=mine" };
    CHECK_OK(load(&g, BASE "[grid]\ntrain.lr = 0.1, 0.2\nseed = 0, 1\n", args, 4));
    CHECK(g.n_members == 6);
    CHECK(g.ranks_per_member == 3);
    CHECK(!strcmp(grid_member_value(&g, 2, 1), "7"));
    CHECK(g.n_overrides == 2);
    CHECK_MSG(!strcmp(g.dir, "/tmp/fedhet-grid-test-out/mine"), "dir %s", g.dir);
    char **ov = NULL;
    int n = 0;
    CHECK_OK(grid_member_overrides(&g, 0, &ov, &n));
    CHECK(n == 6 && !strcmp(ov[0], "train.momentum=0.9") && !strcmp(ov[5], "output.name=lr-0.1_seed-5"));
    grid_strings_free(ov, n);
    grid_spec_free(&g);
    char *swept[] = { "train.lr=0.3" };
    expect_error(BASE "[grid]\ntrain.lr = 0.1, 0.2\n", swept, 1, "swept by [grid]", "grid.train.lr");
    char *bad[] = { "grid.nonsense=1,2" };
    expect_error(BASE "[grid]\ntrain.lr = 0.1, 0.2\n", bad, 1, "command line", "not a config key");
}

/* the base config keeps the grid file's line numbers, and every member validates as fl_run would */
static void test_base_text_validates(void)
{
    GridSpec g;
    const char *text = "[data]\npath = /nonexistent/p.h5\n[grid]\ntrain.lr = 0.1, -1\n[model]\nname = mlp\n[train]\n"
                       "lrr = 3\n";
    CHECK_OK(load(&g, text, NULL, 0));
    int lines_a = 0, lines_b = 0;
    for (const char *p = g.text; *p; p++) lines_a += *p == '\n';
    for (const char *p = g.base_text; *p; p++) lines_b += *p == '\n';
    CHECK(lines_a == lines_b);
    CHECK(strstr(g.base_text, "; [grid]\n; train.lr = 0.1, -1\n[model]") != NULL);
    const char *base = write_tmp("base.ini", g.base_text);
    char **ov = NULL;
    int n = 0;
    CHECK_OK(grid_member_overrides(&g, 0, &ov, &n));
    fh_error_clear();
    int st = fl_config_validate(base, ov, n, 0);
    CHECK(st == FH_ERR_USAGE);
    /* the typo is on line 8 of the grid file, and of the base */
    CHECK_MSG(strstr(fh_error_message(), ":8:") && strstr(fh_error_message(), "lrr"), "%s", fh_error_message());
    grid_strings_free(ov, n);
    grid_spec_free(&g);
    fh_error_clear();
}

static void test_status_files(void)
{
    const char *dir = tmp_dir("g");
    tmp_dir("g/grid");
    tmp_dir("g/grid/status");
    GridStatus s, r;
    CHECK_OK(grid_status_read(dir, "m1", &r));
    CHECK(r.state == GRID_PENDING && isnan(r.final_accuracy));
    memset(&s, 0, sizeof s);
    s.state = GRID_FAILED;
    s.exit_code = 3;
    s.seconds = 1.5;
    s.group = 2;
    s.attempt = 1;
    s.rounds_done = 4;
    s.final_accuracy = 0.8125;
    snprintf(s.message, sizeof s.message, "round 5 diverged; \"lower\" lr # really\nsecond line");
    CHECK_OK(grid_status_write(dir, "m1", &s));
    tmp_record(tmp_path("g/grid/status/m1.ini"));
    CHECK_OK(grid_status_read(dir, "m1", &r));
    CHECK(r.state == GRID_FAILED && r.exit_code == 3 && r.group == 2 && r.attempt == 1 && r.rounds_done == 4);
    CHECK_NEAR(r.seconds, 1.5, 1e-9);
    CHECK_NEAR(r.final_accuracy, 0.8125, 1e-9);
    CHECK_MSG(!strcmp(r.message, "round 5 diverged; 'lower' lr # really|second line"), "message '%s'", r.message);
}

static void test_report_statistics(void)
{
    /* docs/methods/metrics.md C.2: sample std over seeds (divisor n - 1) */
    const double x[] = { 0.70, 0.80, NAN, 0.90 };
    double m, s;
    int c;
    report_mean_std(x, 4, &m, &s, &c);
    CHECK(c == 3);
    CHECK_NEAR(m, 0.8, 1e-12);
    CHECK_NEAR(s, 0.1, 1e-12);
    report_mean_std(x, 1, &m, &s, &c);
    CHECK(c == 1 && isnan(s));
    /* C.3: the first 1-based round at or above the target, on raw values; 0 when never */
    const double a[] = { 0.3, NAN, 0.55, 0.52, 0.61 };
    CHECK(report_rounds_to(a, 5, 0.5) == 3);
    CHECK(report_rounds_to(a, 5, 0.6) == 5);
    CHECK(report_rounds_to(a, 5, 0.3) == 1);
    CHECK(report_rounds_to(a, 5, 0.7) == 0);
    /* last-k mean over evaluated rounds */
    CHECK_NEAR(report_last_k_mean(a, 5, 2), (0.52 + 0.61) / 2, 1e-12);
    CHECK_NEAR(report_last_k_mean(a, 5, 4), (0.55 + 0.52 + 0.61 + 0.3) / 4, 1e-12);
    CHECK_NEAR(report_last_k_mean(a, 5, 100), (0.3 + 0.55 + 0.52 + 0.61) / 4, 1e-12);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (tmp_init("grid") != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(test_lists_and_product);
    RUN(test_quoted_items_and_names);
    RUN(test_zip);
    RUN(test_unset_values);
    RUN(test_long_lists);
    RUN(test_key_resolution);
    RUN(test_bad_grids);
    RUN(test_command_line);
    RUN(test_base_text_validates);
    RUN(test_status_files);
    RUN(test_report_statistics);
    tmp_cleanup();
    return test_summary();
}
