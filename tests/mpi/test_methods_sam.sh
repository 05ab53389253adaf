#!/usr/bin/env bash
# End-to-end tests of the 'sam' method family (docs/methods/sam.md §1-8, 11: fedsam, mofedsam, fedgamma,
# fedspeed, fedsmoo, fedlesam, fedlesam-s, fedlesam-d, fedlwsam) under mpirun with 3 ranks on the tiny
# synthetic set of tests/mpi/lib.sh: each method's reduction to a baseline, identities of the persistent
# state read from the run's HDF5 file, bit-identical resume of every stateful method, the switches that must
# (and must not) change results, the diagnostics columns, the same bits on 1 and 3 ranks (folded server steps),
# bad keys.
# usage: tests/mpi/test_methods_sam.sh [test_name]      (last line: "N passed, N failed")
source "$(dirname "$0")/lib.sh"

setup() { setup_tiny; }

# ---- SAM, ASAM, GSAM, FedSAM (docs/methods/sam.md §1-3) ---------------------------------------------------------------

# rho = 0: every SAM step is the SGD step, so FedSAM is uniform averaging (its default weights) and, with
# weights = samples, FedAvg, bit for bit
test_fedsam_rho0_is_fedavg()
{
    equal_runs "fedsam rho=0 vs uniform" 3 "algo.method=fedsam algo.rho=0" "algo.method=uniform"
    equal_runs "fedsam rho=0 samples vs fedavg" 3 "algo.method=fedsam algo.rho=0 algo.weights=samples" \
        "algo.method=fedavg"
    differ_runs "fedsam rho=0.1 vs uniform" 3 "algo.method=fedsam" "algo.method=uniform"
}

# GSAM with alpha = 0 is SAM (docs/methods/sam.md §2); alpha > 0 and ASAM change the result
test_gsam_alpha0_is_sam()
{
    equal_runs "gsam alpha=0 vs sam" 3 "algo.method=fedsam algo.perturb=gsam algo.gsam_alpha=0" "algo.method=fedsam"
    differ_runs "gsam alpha=0.4 vs sam" 3 "algo.method=fedsam algo.perturb=gsam" "algo.method=fedsam"
    differ_runs "asam vs sam" 3 "algo.method=fedsam algo.perturb=asam" "algo.method=fedsam"
}

# GSAM's lr-proportional radius: with no lr decay it is the constant rho; with one it changes the run, and
# metrics.csv's perturbation norm goes from rho (round 0) to rho_min (the last round)
test_gsam_rho_schedule()
{
    equal_runs "rho_schedule=lr without decay vs constant" 3 "algo.method=fedsam algo.rho_schedule=lr algo.rho_min=0.02" \
        "algo.method=fedsam"
    differ_runs "rho_schedule=lr vs constant, decay 0.5" 3 \
        "algo.method=fedsam algo.perturb=gsam algo.rho_schedule=lr algo.rho_min=0.02 train.lr_decay=0.5" \
        "algo.method=fedsam algo.perturb=gsam train.lr_decay=0.5"
    fh 3 rhosched "$WORK/base.ini" output.name=rhosched algo.method=fedsam algo.rho_schedule=lr algo.rho_min=0.02 \
        train.lr_decay=0.5
    expect_rc "rho_schedule=lr" 0 || return
    local norms
    norms=$(metric_values rhosched perturb_norm | tr '\n' ' ')
    echo "$norms" | awk '{ exit !(NF == 3 && $1 > 0.0999 && $1 <= 0.1 && $2 > 0.0466 && $2 < 0.0468 && $3 > 0.0199 && $3 <= 0.02) }' ||
        fail "rho_schedule=lr: perturbation norms $norms, expected 0.1, 0.02 + 0.08/3 = 0.0467, 0.02 (lr 0.05, 0.025, 0.0125)"
}

# metrics.csv: the mean perturbation norm is rho for SAM (and 0 < it <= rho for FedLESAM, 0 in its first
# round), the gradient norm is positive; FedAvg leaves both empty; fl.sharpness_every fills sharpness and
# perturbed_loss (L(rho) >= 0, S > 0) for any method, and leaves the model untouched
test_diagnostics_columns()
{
    fh 3 diag "$WORK/base.ini" output.name=diag algo.method=fedsam algo.rho=0.05 fl.sharpness_every=1
    expect_rc "fedsam with diagnostics" 0 || return
    local csv=$WORK/out/diag/metrics.csv
    column "$csv" perturb_norm | awk '{ if ($1 == "" || $1 < 0.0499 || $1 > 0.05001) bad = 1 } END { exit bad }' ||
        fail "fedsam rho=0.05: perturb_norm is not 0.05: $(column "$csv" perturb_norm | tr '\n' ' ')"
    column "$csv" grad_norm | awk '{ if ($1 == "" || !($1 > 0)) bad = 1 } END { exit bad }' ||
        fail "fedsam: grad_norm not positive: $(column "$csv" grad_norm | tr '\n' ' ')"
    column "$csv" sharpness | awk '{ if ($1 == "" || !($1 > 0)) bad = 1 } END { exit bad }' ||
        fail "sharpness column empty or not positive: $(column "$csv" sharpness | tr '\n' ' ')"
    paste -d, <(column "$csv" perturbed_loss) <(column "$csv" test_loss) |
        awk -F, '{ if ($1 == "" || !($1 > 0)) bad = 1 } END { exit bad }' ||
        fail "perturbed_loss column empty: $(column "$csv" perturbed_loss | tr '\n' ' ')"
    fh 3 diagL "$WORK/base.ini" output.name=diagL algo.method=fedlesam algo.mode=code
    if expect_rc "fedlesam code mode" 0; then
        column "$WORK/out/diagL/metrics.csv" perturb_norm |
            awk 'NR == 1 { if ($1 != 0) bad = 1 } NR > 1 { if (!($1 > 0) || $1 > 0.10001) bad = 1 } END { exit bad }' ||
            fail "fedlesam rho=0.1: perturb_norm not 0 then (0, 0.1]: $(column "$WORK/out/diagL/metrics.csv" perturb_norm | tr '\n' ' ')"
    fi
    fh 3 diagA "$WORK/base.ini" output.name=diagA fl.sharpness_every=2
    if expect_rc "fedavg with sharpness" 0; then
        [ -z "$(column "$WORK/out/diagA/metrics.csv" perturb_norm | tr -d '\n')" ] || fail "fedavg has a perturb_norm"
        [ "$(column "$WORK/out/diagA/metrics.csv" sharpness | awk 'NF' | wc -l)" = 2 ] ||
            fail "sharpness_every=2 over 3 rounds: expected rounds 2 and 3: $(column "$WORK/out/diagA/metrics.csv" sharpness | tr '\n' ' ')"
        fh 3 diagB "$WORK/base.ini" output.name=diagB
        expect_rc "fedavg" 0 && same_global "$WORK/out/diagA/run.h5" "$WORK/out/diagB/run.h5" "sharpness_every changes the model"
    fi
}

# ---- FedLESAM (docs/methods/sam.md §8) --------------------------------------------------------------------------------

# round 0 has no global direction: FedLESAM (both modes, both compat settings) is uniform averaging; later
# rounds perturb
test_fedlesam_round0_is_fedavg()
{
    equal_runs "fedlesam round 0 vs uniform" 3 "algo.method=fedlesam fl.rounds=1" "algo.method=uniform fl.rounds=1"
    equal_runs "fedlesam code round 0 vs uniform" 3 "algo.method=fedlesam algo.mode=code algo.compat=official fl.rounds=1" \
        "algo.method=uniform fl.rounds=1"
    differ_runs "fedlesam vs uniform" 3 "algo.method=fedlesam" "algo.method=uniform"
}

# full participation: w_old = w^{t-1} for every client, so the paper's rule is the code's bit for bit
# (docs/methods/sam.md §8); under partial participation they differ
test_fedlesam_modes()
{
    equal_runs "fedlesam paper vs code, all clients" 3 "algo.method=fedlesam fl.selection=all" \
        "algo.method=fedlesam algo.mode=code fl.selection=all"
    differ_runs "fedlesam paper vs code, half the clients" 3 "algo.method=fedlesam fl.rounds=4" \
        "algo.method=fedlesam algo.mode=code fl.rounds=4"
}

# compat = official changes the perturbation only ([CODE-BUG], docs/methods/sam.md §8): nothing in round 0, where there is
# none, and nothing for the methods without the switch; it changes later rounds
test_compat_official()
{
    equal_runs "fedlesam-d compat, round 0" 3 "algo.method=fedlesam-d algo.compat=official fl.rounds=1" \
        "algo.method=fedlesam-d fl.rounds=1"
    differ_runs "fedlesam compat, code mode" 3 "algo.method=fedlesam algo.mode=code algo.compat=official" \
        "algo.method=fedlesam algo.mode=code"
    differ_runs "fedlesam-s compat" 3 "algo.method=fedlesam-s algo.compat=official fl.selection=all" \
        "algo.method=fedlesam-s fl.selection=all"
    bad_key "fedsam has no compat" compat algo.method=fedsam algo.compat=official
}

# ---- reductions to baselines --------------------------------------------------------------------------

# MoFedSAM alpha = 1 is FedSAM (no momentum) and rho = 0 is FedCM; FedLWSAM rho = 0 is FedLW / FedNoLoWe
test_reductions()
{
    equal_runs "mofedsam alpha=1 vs fedsam" 3 "algo.method=mofedsam algo.alpha=1" "algo.method=fedsam"
    differ_runs "mofedsam vs fedsam" 3 "algo.method=mofedsam" "algo.method=fedsam"
    equal_runs "mofedsam rho=0 vs fedcm" 3 "algo.method=mofedsam algo.rho=0 algo.k_norm=actual" "algo.method=fedcm"
    equal_runs "fedlwsam rho=0 vs fedlw" 3 "algo.method=fedlwsam algo.rho=0" "algo.method=fedlw"
    equal_runs "fedlwsam rho=0 nolowe vs fednolowe" 3 "algo.method=fedlwsam algo.rho=0 algo.lw=nolowe" \
        "algo.method=fednolowe"
    equal_runs "fedgamma rho=0 actual vs scaffold, round 0" 3 "algo.method=fedgamma algo.rho=0 algo.k_norm=actual fl.rounds=1" \
        "algo.method=scaffold fl.rounds=1"
}

# ---- persistent state -------------------------------------------------------------------------------

# FedGAMMA and FedLESAM-S: c = (1/N) sum_i c_i (SCAFFOLD's identity, c += (1/N) sum dc_i from zero);
# FedSpeed, FedSMOO and FedLESAM-D: the server's running sum of h equals sum_i h_i
test_state_identities()
{
    local m
    for m in fedgamma fedlesam-s; do
        fh 3 id$m "$WORK/base.ini" output.name=id$m algo.method=$m
        expect_rc "$m" 0 && state_mean "$WORK/out/id$m/run.h5" /server/vectors 0 0.16666666666666666 "$m c = mean c_i"
    done
    for m in fedspeed fedsmoo fedlesam-d; do
        fh 3 id$m "$WORK/base.ini" output.name=id$m algo.method=$m
        expect_rc "$m" 0 && state_mean "$WORK/out/id$m/run.h5" /server/private 0 1 "$m sum h = sum h_i"
    done
}

# 4 rounds straight on 3 ranks == 2 rounds + --resume on 2 ranks, server and client state included
test_resume()
{
    resume_identical "mofedsam" algo.method=mofedsam
    resume_identical "fedgamma" algo.method=fedgamma
    resume_identical "fedspeed" algo.method=fedspeed
    resume_identical "fedsmoo" algo.method=fedsmoo
    resume_identical "fedlesam paper" algo.method=fedlesam
    resume_identical "fedlesam-s code" algo.method=fedlesam-s algo.mode=code
    resume_identical "fedlesam-d" algo.method=fedlesam-d
}

# ---- folded aggregation --------------------------------------------------------------------------------

# every server step of the family folds: the same bits on 1 and 3 ranks (the control variates' and MoFedSAM's
# step counts from the headers, FedSMOO's mean mu_i, FedLESAM's global step in code mode)
test_folded_on_ranks()
{
    folded_on_ranks mofedsam "mofedsam algo.k_norm=actual" "fedgamma algo.k_norm=actual" fedspeed fedsmoo \
        "fedlesam algo.mode=code" "fedlesam-s algo.mode=code" fedlesam-d
}

# ---- bad input --------------------------------------------------------------------------------------

test_bad_keys()
{
    bad_key "rho < 0" rho algo.method=fedsam algo.rho=-0.1
    bad_key "rho nan" rho algo.method=fedsam algo.rho=nan
    bad_key "rho inf" rho algo.method=fedlesam algo.rho=inf
    bad_key "rho_min > rho" rho_min algo.method=fedsam algo.rho_schedule=lr algo.rho_min=0.5
    bad_key "unknown rho_schedule" rho_schedule algo.method=fedsam algo.rho_schedule=cosine
    bad_key "gsam_alpha > 1" gsam_alpha algo.method=fedsam algo.perturb=gsam algo.gsam_alpha=1.5
    bad_key "mofedsam alpha = 0" alpha algo.method=mofedsam algo.alpha=0
    bad_key "lambda of fedspeed on fedsam" lambda algo.method=fedsam algo.lambda=0.1
    bad_key "unknown perturbation" perturb algo.method=fedsam algo.perturb=esam
    bad_key "sharpness_rho < 0" sharpness_rho fl.sharpness_rho=-1
}

TESTS=(fedsam_rho0_is_fedavg gsam_alpha0_is_sam gsam_rho_schedule diagnostics_columns fedlesam_round0_is_fedavg fedlesam_modes
       compat_official reductions state_identities resume folded_on_ranks bad_keys)
run_tests "$@"
