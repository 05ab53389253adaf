/* fedhet partition SRC DST.h5 [key=value ...]: a raw data set -> a partitioned HDF5 file (docs/usage.md, Data). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app.h"
#include "fedhet/config.h"
#include "fedhet/core.h"
#include "fedhet/data.h"

static void print_help(void)
{
    int n_part, n_source;
    const FhConfigKey *part_keys = data_partition_keys(&n_part), *source_keys = data_source_keys(&n_source);
    printf("usage: fedhet partition SRC DST.h5 [key=value ...] [--force]\n"
           "  Reads a raw data set, splits its training set over clients, optionally corrupts the last clients\n"
           "  and a copy of the test set, and writes DST.h5 (atomically; an existing DST needs --force), with the\n"
           "  label heterogeneity of its clients under /stats (entropy in nats, effective classes, TV and EMD to\n"
           "  the global labels, size Gini: see fedhet inspect --help), whose summary it prints.\n"
           "  SRC: fashion-mnist (= %s), a folder of IDX files (MNIST, Fashion-MNIST),\n"
           "       a folder of CIFAR-10/100 binary batches, or an HDF5 file (/train/images, /train/labels, /test/...);\n"
           "       or an image source (docs/data.md): an image folder tree ROOT/CLASS/*.{jpg,jpeg,png} (or\n"
           "       ROOT/{train,test}/CLASS/*), a domain tree ROOT/DOMAIN/CLASS/*, a label table FILE.csv, a folder of\n"
           "       .npy arrays (x_train.npy y_train.npy [x_test.npy y_test.npy], or train_images.npy ...), or FILE.npz.\n"
           "  Image sources are streamed: images are decoded (libjpeg-turbo, libpng) and resized (libswscale) one at a\n"
           "  time in the order the file is written. Peak memory: about 30 MiB, plus about 150 bytes per image\n"
           "  (paths, labels, the partition), plus one decoded source image; never the data set itself.\n"
           "  In a run config (which makes its file from [data] source) the keys are the [data] keys of the same names,\n"
           "  and the image source keys go into [data] source_options.\n"
           "keys (default):\n",
           DATA_FASHION_MNIST_DIR);
    fh_config_print_args_help(stdout, part_keys, n_part);
    printf("image source keys (default):\n");
    fh_config_print_args_help(stdout, source_keys, n_source);
    printf("example: fedhet partition fashion-mnist inputs/data/fmnist-dir0.1.h5 scheme=dirichlet alpha=0.1 clients=100\n");
}

static int partition_run(const char *src, const char *dst, char *const *args, int n_args, int force)
{
    int n;
    const FhConfigKey *keys = data_partition_command_keys(&n);
    FhConfig *cfg = NULL; /* holds the strings of k and source */
    FH_CHECK(fh_config_load_args(&cfg, keys, n, args, n_args, NULL));
    DataPartitionKeys k;
    DataSourceOptions source;
    DataPartFileSpec spec;
    fh_config_land(cfg, "data", &k);
    data_source_options_from(cfg, &source);
    int status = data_partition_spec_from(&spec, &source, &k, "command line");
    if (status == FH_OK) status = data_partition_check_given(cfg, &spec, "command line");
    struct stat st;
    if (status == FH_OK && !force && stat(dst, &st) == 0)
        status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s already exists (add --force to replace it)", dst);
    static char parameters[4096];
    data_partition_parameters(cfg, cfg, &spec, parameters, sizeof parameters);
    spec.parameters = parameters;
    if (status == FH_OK)
        status = data_partition_make(src, &source, dst, &spec, *k.mean ? k.mean : NULL, *k.std ? k.std : NULL);
    fh_config_free(&cfg);
    return status;
}

int app_cmd_partition(int argc, char **argv)
{
    const char *positional[2] = {NULL, NULL};
    char **args = argv + 1; /* the key=value arguments, gathered in place */
    int n_positional = 0, force = 0, n_args = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return FH_OK;
        }
        if (!strcmp(argv[i], "--force")) force = 1;
        else if (argv[i][0] == '-') FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet partition --help)", argv[i]);
        else if (strchr(argv[i], '=') && n_positional == 2) args[n_args++] = argv[i];
        else if (n_positional < 2) positional[n_positional++] = argv[i];
        else FH_FAIL(FH_ERR_USAGE, "unexpected argument '%s' (keys are key=value)", argv[i]);
    }
    if (n_positional < 2) FH_FAIL(FH_ERR_USAGE, "need SRC and DST.h5 (see fedhet partition --help)");
    return partition_run(positional[0], positional[1], args, n_args, force);
}
