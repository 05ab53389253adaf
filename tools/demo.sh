#!/usr/bin/env bash
# `make run`: the demo experiment. FedAvg with the cnn on Fashion-MNIST split over 10 clients by
# Dirichlet(0.1) (inputs/demo-fedavg.ini), 5 rounds on 3 MPI ranks: rank 0 the server, ranks 1-2 the
# clients. The partition file is made in inputs/data/ on the first run; the run folder outputs/demo-fedavg
# is replaced each time (--force).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# 3 ranks on fewer cores is fine: waiting ranks sleep instead of spinning
mpirun --oversubscribe -np 3 bin/fedhet run inputs/demo-fedavg.ini --force "$@"
echo
echo "per-round metrics: outputs/demo-fedavg/metrics.csv; resume or extend with:"
echo "  mpirun --oversubscribe -np 3 bin/fedhet run --resume outputs/demo-fedavg fl.rounds=10"
