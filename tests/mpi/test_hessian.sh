#!/usr/bin/env bash
# End-to-end tests of the Hessian columns of metrics.csv (fl.hessian_every: hessian_max_eig by power
# iteration, hessian_trace by Hutchinson) under mpirun on the tiny synthetic set of tests/mpi/lib.sh: the
# same bits on 1, 3 and 4 ranks, the rounds it runs in, the model left alone, the cost in the log, the
# BatchNorm note, bit-identical resume, bad keys.
# usage: tests/mpi/test_hessian.sh [test_name]      (last line: "N passed, N failed")
source "$(dirname "$0")/lib.sh"

setup() { setup_tiny; }

HESS=(fl.hessian_every=2 fl.sharpness_probe=120 fl.hessian_iters=15 fl.hessian_samples=4)

# the two columns, as metrics.csv writes them
hessian_columns() { paste -d, <(column "$1" hessian_max_eig) <(column "$1" hessian_trace); }

# every rank count gives the same bits; rounds 2 and 3 (every 2nd and the last) have values, round 1 none;
# the model is the one of a run without the diagnostic; the log states the cost
test_ranks_identical()
{
    local np
    for np in 1 3 4; do
        fh "$np" hr$np "$WORK/base.ini" output.name=hr$np "${HESS[@]}"
        expect_rc "np $np" 0 || return
    done
    local cols
    cols=$(hessian_columns "$WORK/out/hr1/metrics.csv")
    echo "$cols" | awk -F, 'NR == 1 { if ($1 != "" || $2 != "") bad = 1 }
                            NR > 1 { if ($1 == "" || $2 == "" || !($1 > 0) || !($2 > 0)) bad = 1 }
                            END { if (NR != 3) bad = 1; exit bad }' ||
        fail "np 1: expected empty round 1 and positive values in rounds 2 and 3: $(echo "$cols" | tr '\n' ' ')"
    for np in 3 4; do
        [ "$(hessian_columns "$WORK/out/hr$np/metrics.csv")" = "$cols" ] ||
            fail "np 1 vs $np: hessian columns differ: $(echo "$cols" | tr '\n' ' ') vs $(hessian_columns "$WORK/out/hr$np/metrics.csv" | tr '\n' ' ')"
    done
    note "hessian_max_eig,hessian_trace: $(echo "$cols" | tr '\n' ' ')"
    grep -q "hessian round 3: max eigenvalue .* probe gradients .* of 120 rows in [0-9.]* s" "$WORK/out/hr3/log.txt" ||
        fail "log.txt has no cost line for round 3: $(grep hessian "$WORK/out/hr3/log.txt" | head -2 | tr '\n' ' ')"
    grep -q BatchNorm "$WORK/out/hr3/log.txt" && fail "the mlp has no BatchNorm, yet the log mentions it"
    fh 3 hr0 "$WORK/base.ini" output.name=hr0
    expect_rc "without the diagnostic" 0 && same_global "$WORK/out/hr0/run.h5" "$WORK/out/hr3/run.h5" \
        "hessian_every changes the model"
}

# the seed of the Rademacher vectors and the step are the estimate's: another step gives other numbers
test_step_changes_numbers()
{
    fh 3 hs1 "$WORK/base.ini" output.name=hs1 "${HESS[@]}"
    expect_rc "default step" 0 || return
    fh 3 hs2 "$WORK/base.ini" output.name=hs2 "${HESS[@]}" fl.hessian_step=1e-4
    expect_rc "step 1e-4" 0 || return
    [ "$(hessian_columns "$WORK/out/hs1/metrics.csv")" != "$(hessian_columns "$WORK/out/hs2/metrics.csv")" ] ||
        fail "fl.hessian_step changes nothing"
}

# BatchNorm models: evaluated with running statistics, and the log says so
test_batchnorm_note()
{
    fh 3 hbn "$WORK/base.ini" output.name=hbn model.name=smallcnn fl.rounds=1 "${HESS[@]}"
    expect_rc "smallcnn" 0 || return
    grep -q "has BatchNorm: the Hessian is of the eval-mode loss" "$WORK/out/hbn/log.txt" ||
        fail "no BatchNorm note in log.txt: $(grep -i hessian "$WORK/out/hbn/log.txt" | head -2 | tr '\n' ' ')"
    [ -n "$(column "$WORK/out/hbn/metrics.csv" hessian_max_eig | tr -d '\n')" ] || fail "smallcnn: no hessian_max_eig"
}

# 4 rounds straight == 2 rounds + --resume to 4, hessian columns included (same_csv compares them)
test_resume()
{
    resume_identical "hessian" fl.hessian_every=1 fl.sharpness_probe=120 fl.hessian_iters=10 fl.hessian_samples=3 || return
    [ "$(column "$WORK/out/rshessian_B/metrics.csv" hessian_trace | awk 'NF' | wc -l)" = 4 ] ||
        fail "resumed run: expected 4 hessian_trace values: $(column "$WORK/out/rshessian_B/metrics.csv" hessian_trace | tr '\n' ' ')"
}

test_bad_keys()
{
    bad_key "hessian_every < 0" hessian_every fl.hessian_every=-1
    bad_key "hessian_iters = 0" hessian_iters fl.hessian_iters=0
    bad_key "hessian_tol > 1" hessian_tol fl.hessian_tol=2
    bad_key "hessian_samples = 0" hessian_samples fl.hessian_samples=0
    bad_key "hessian_step = 0" hessian_step fl.hessian_step=0
    bad_key "hessian_step text" hessian_step fl.hessian_step=small
}

TESTS=(ranks_identical step_changes_numbers batchnorm_note resume bad_keys)
run_tests "$@"
