/* FedAvg and uniform averaging (docs/methods/baselines.md A.1, A.2): the default parts only. */
#include "algo_internal.h"

const AlgoMethod algo_family_basic[] = {
    {
        .name = "fedavg",
        .summary = "FedAvg: local SGD, server average weighted by sample counts",
        .source = "docs/methods/baselines.md A.1",
        .state = "-",
        .payload = "down 1, up 1",
        .weights = &algo_weights_samples,
    },
    {
        .name = "uniform",
        .summary = "Uniform averaging of the selected clients' models (FL-Simulator's FedAvg)",
        .source = "docs/methods/baselines.md A.2",
        .state = "-",
        .payload = "down 1, up 1",
        .weights = &algo_weights_uniform,
    },
};
const int algo_family_basic_count = sizeof algo_family_basic / sizeof algo_family_basic[0];
