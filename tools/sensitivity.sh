#!/usr/bin/env bash
# `make sensitivity`: the 3-seed sensitivity grid of inputs/sensitivity-fedsam.ini (FedSAM's rho, rho = 0
# being FedAvg) on Fashion-MNIST, then its summary tables and plots. NP ranks (default: the machine's
# cores) run NP members at once. The grid folder outputs/sensitivity-fedsam is replaced (--force).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
np=${NP:-$(nproc)}
# the partition file first, so that the members do not all make it at once
if [ ! -f inputs/data/fmnist-dir0.5-k10.h5 ]; then
    bin/fedhet partition fashion-mnist inputs/data/fmnist-dir0.5-k10.h5 scheme=dirichlet alpha=0.5 clients=10
fi
mpirun --oversubscribe -np "$np" bin/fedhet grid inputs/sensitivity-fedsam.ini --force "$@"
bin/fedhet report outputs/sensitivity-fedsam --last 3 --targets 0.5,0.6,0.7
echo
echo "tables: outputs/sensitivity-fedsam/summary.md (and .csv); plots: outputs/sensitivity-fedsam/*.png"
