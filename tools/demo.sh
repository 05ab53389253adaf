#!/usr/bin/env bash
# `make run`: what the engine offers today — the cnn of the FedAvg paper on Fashion-MNIST's input shape,
# its layers and memory, and one training-speed point on this machine. The federated demo (FedAvg on
# mpirun) replaces this once the runtime lands.
set -euo pipefail
cd "$(dirname "$0")/.."
bin/fedhet inspect --model cnn --input 1x28x28 --classes 10
echo
echo "training speed, batch 64, one thread (forward + backward + SGD step):"
OPENBLAS_NUM_THREADS=1 bin/fedhet bench --model cnn --batch 64 --threads 1 --mode sgd --reps 3 --header
