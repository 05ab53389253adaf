/* Every named method: one row each, picking parts and defaults (DESIGN.md "Algorithms as components"). */
#include "fedhet/algo.h"

#include <stdio.h>
#include <string.h>

static const AlgoMethod methods[] = {
    {
        .name = "fedavg",
        .summary = "FedAvg: local SGD, server average weighted by sample counts",
        .source = "spec A.1",
        .weights = &algo_weights_samples,
    },
    {
        .name = "uniform",
        .summary = "Uniform averaging of the selected clients' models (FL-Simulator's FedAvg)",
        .source = "spec A.2",
        .weights = &algo_weights_uniform,
    },
};

enum { N_METHODS = sizeof methods / sizeof methods[0] };

const AlgoMethod *algo_find(const char *name)
{
    for (int i = 0; i < N_METHODS; i++)
        if (!strcmp(methods[i].name, name)) return &methods[i];
    return NULL;
}

int algo_count(void) { return N_METHODS; }

const AlgoMethod *algo_at(int i) { return i >= 0 && i < N_METHODS ? &methods[i] : NULL; }

const char *algo_choices(void)
{
    static char text[1024];
    if (!text[0]) {
        size_t used = 0;
        for (int i = 0; i < N_METHODS && used < sizeof text; i++)
            used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", i ? "|" : "", methods[i].name);
    }
    return text;
}
