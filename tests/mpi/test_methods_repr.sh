#!/usr/bin/env bash
# MPI tests of the 'repr' family (docs/methods/baselines.md A.17-A.22) on 3 ranks: each method's neutral setting equals its base
# method bit for bit (MOON mu = 0, FedDecorr beta = 0, FedGKD gamma = 0 and FedNP-min lambda = 0 equal
# FedAvg; FedMR without recombination equals uniform averaging) while the default changes the model; logit
# adjustment (train.logit_adjust) changes results and 0 is the default; every stateful method resumes bit
# for bit (4 rounds on 3 ranks == 2 rounds + --resume on 2 ranks, client and server state included); bad
# keys and refused configs exit 1 naming the key.
# usage: tests/mpi/test_methods_repr.sh [test_name]      (last line: "N passed, N failed")
source "$(dirname "$0")/lib.sh"

setup() { setup_tiny; }

# ref TAG OVERRIDES...: a reference run of base.ini on 3 ranks, made once
ref()
{
    local tag=$1
    shift
    [ -f "$WORK/out/$tag/run.h5" ] && return 0
    fh 3 "$tag" "$WORK/base.ini" output.name="$tag" "$@"
    expect_rc "reference $tag ($*)" 0
}

# same_as REF WHAT OVERRIDES...: a run on 3 ranks ends with REF's global model and test accuracies
same_as()
{
    local r=$1 what=$2 tag
    shift 2
    tag=sa$(echo "$what" | tr -c 'a-zA-Z0-9' _)
    fh 3 "$tag" "$WORK/base.ini" output.name="$tag" "$@"
    expect_rc "$what" 0 || return 1
    same_global "$WORK/out/$r/run.h5" "$WORK/out/$tag/run.h5" "$what" || return 1
    diff <(metric_values "$r" test_accuracy) <(metric_values "$tag" test_accuracy) >/dev/null ||
        { fail "$what: test_accuracy differs from $r"; return 1; }
    return 0
}

# unlike REF WHAT OVERRIDES...: a run on 3 ranks ends with a model other than REF's
unlike()
{
    local r=$1 what=$2 tag
    shift 2
    tag=ul$(echo "$what" | tr -c 'a-zA-Z0-9' _)
    fh 3 "$tag" "$WORK/base.ini" output.name="$tag" "$@"
    expect_rc "$what" 0 || return 1
    dump_global "$WORK/out/$r/run.h5" "$WORK/ula.bin" && dump_global "$WORK/out/$tag/run.h5" "$WORK/ulb.bin" ||
        { fail "$what: cannot read the models"; return 1; }
    cmp -s "$WORK/ula.bin" "$WORK/ulb.bin" && { fail "$what: gives the same model as $r"; return 1; }
    return 0
}

# refused WHAT PATTERN OVERRIDES...: exit 1 before any round, the message matching PATTERN
refused()
{
    local what=$1 pattern=$2 tag
    shift 2
    tag=rf$(echo "$what" | tr -c 'a-zA-Z0-9' _)
    fh 3 "$tag" "$WORK/base.ini" output.name="$tag" "$@"
    expect_rc "$what" 1 || return 1
    grep -qE -- "$pattern" "$WORK/$tag.err" || fail "$what: the message does not name $pattern: $(errline "$tag")"
    [ -f "$WORK/out/$tag/metrics.csv" ] && fail "$what: a run folder with metrics was made"
    return 0
}

# ---- MOON (A.17) ---------------------------------------------------------------------------------------

test_moon_mu0_is_fedavg()
{
    ref fedavg algo.method=fedavg || return
    same_as fedavg "moon mu=0" algo.method=moon algo.mu=0
    unlike fedavg "moon mu=1" algo.method=moon
}

test_moon_resume() { resume_identical "moon" algo.method=moon; }

# MOON's projection head (proj_dim > 0): the run completes, its model has the head's parameters (more state
# values than without), it resumes bit for bit, and proj_dim = 0 is the head-less default
test_moon_projection_head()
{
    ref moon algo.method=moon || return
    same_as moon "moon proj_dim=0" algo.method=moon algo.proj_dim=0
    fh 3 moonhead "$WORK/base.ini" output.name=moonhead algo.method=moon algo.proj_dim=8
    expect_rc "moon proj_dim=8" 0 || return
    local n0 n1 # h5ls: "Dataset {N}", N the state size
    n0=$(h5ls "$WORK/out/moon/run.h5/server/global" 2>/dev/null)
    n1=$(h5ls "$WORK/out/moonhead/run.h5/server/global" 2>/dev/null)
    [ -n "$n0" ] && [ -n "$n1" ] && [ "$n0" != "$n1" ] ||
        fail "moon proj_dim=8: the global state has the head-less size (${n1:-unreadable} vs ${n0:-unreadable})"
    resume_identical "moon head" algo.method=moon algo.proj_dim=8
}

# ---- FedDecorr (A.18) ----------------------------------------------------------------------------------

test_feddecorr_beta0_is_fedavg()
{
    ref fedavg algo.method=fedavg || return
    same_as fedavg "feddecorr beta=0" algo.method=feddecorr algo.beta=0
    unlike fedavg "feddecorr beta=0.1" algo.method=feddecorr
}

# ---- FedMR (A.19) --------------------------------------------------------------------------------------

# no recombination (first_stage beyond the last round): every slot is reset to the uniform average each
# round, which is uniform averaging
test_fedmr_off_is_uniform()
{
    ref uniform algo.method=uniform || return
    same_as uniform "fedmr first_stage=1000" algo.method=fedmr algo.first_stage=1000
    unlike uniform "fedmr first_stage=0" algo.method=fedmr algo.first_stage=0
    unlike uniform "fedmr first_stage=1" algo.method=fedmr algo.first_stage=1
}

test_fedmr_resume() { resume_identical "fedmr" algo.method=fedmr algo.first_stage=1; }

# ---- FedGKD (A.21) -------------------------------------------------------------------------------------

test_fedgkd_gamma0_is_fedavg()
{
    ref fedavg algo.method=fedavg || return
    same_as fedavg "fedgkd gamma=0" algo.method=fedgkd algo.gamma=0
    same_as fedavg "fedgkd vote gamma=0" algo.method=fedgkd algo.gamma=0 algo.variant=vote
    ref gkd algo.method=fedgkd || return
    unlike fedavg "fedgkd gamma=0.1" algo.method=fedgkd
    # rounds 1 and 2 distil; in round 2 the buffer holds two models, whose average and whose logits'
    # average are different teachers
    unlike gkd "fedgkd vote" algo.method=fedgkd algo.variant=vote
}

test_fedgkd_resume()
{
    resume_identical "fedgkd avg" algo.method=fedgkd algo.buffer_length=2 algo.gamma=0.5
    resume_identical "fedgkd vote" algo.method=fedgkd algo.buffer_length=2 algo.gamma=0.5 algo.variant=vote
}

# ---- FedNP-min (A.20) ----------------------------------------------------------------------------------

test_fednp_lambda0_is_fedavg()
{
    ref fedavg algo.method=fedavg || return
    same_as fedavg "fednp lambda=0" algo.method=fednp algo.lambda=0
    unlike fedavg "fednp lambda=1" algo.method=fednp algo.lambda=1
}

test_fednp_resume() { resume_identical "fednp" algo.method=fednp algo.lambda=1; }

# ---- folded rounds (FedMR gathers: it recombines every client's model) ---------------------------------

# FedGKD's buffer follows the average, FedNP's sites are the uploads' scalars: the client ranks fold the round,
# the same bits on 1 and 3 ranks
test_folded_on_ranks()
{
    folded_on_ranks fedgkd "fednp algo.lambda=1"
}

# ---- logit adjustment (A.22) ---------------------------------------------------------------------------

test_logit_adjust()
{
    ref fedavg algo.method=fedavg || return
    same_as fedavg "train.logit_adjust=0" algo.method=fedavg train.logit_adjust=0
    unlike fedavg "train.logit_adjust=1" algo.method=fedavg train.logit_adjust=1
}

# ---- bad keys ------------------------------------------------------------------------------------------

test_bad_keys()
{
    refused "moon tau=0" 'tau' algo.method=moon algo.tau=0
    refused "moon mu<0" '\bmu\b' algo.method=moon algo.mu=-1
    refused "moon proj_dim=2.5" 'proj_dim' algo.method=moon algo.proj_dim=2.5
    refused "moon proj_dim on mobilenetv2" 'projection head' algo.method=moon algo.proj_dim=8 model.name=mobilenetv2
    refused "feddecorr beta<0" 'beta' algo.method=feddecorr algo.beta=-0.1
    refused "fedgkd buffer_length=0" 'buffer_length' algo.method=fedgkd algo.buffer_length=0
    refused "fedgkd buffer_length=2.5" 'buffer_length' algo.method=fedgkd algo.buffer_length=2.5
    refused "fedgkd temperature=0" 'temperature' algo.method=fedgkd algo.temperature=0
    refused "fedgkd variant" 'variant' algo.method=fedgkd algo.variant=bogus
    refused "fednp lambda<0" 'lambda' algo.method=fednp algo.lambda=-1
    refused "moon with beta" 'beta' algo.method=moon algo.beta=0.1
    refused "fedmr with gamma" 'gamma' algo.method=fedmr algo.gamma=0.1
    refused "fedmr bernoulli" 'selection' algo.method=fedmr fl.selection=bernoulli
}

TESTS=(moon_mu0_is_fedavg moon_resume moon_projection_head feddecorr_beta0_is_fedavg fedmr_off_is_uniform fedmr_resume
       fedgkd_gamma0_is_fedavg fedgkd_resume fednp_lambda0_is_fedavg fednp_resume logit_adjust folded_on_ranks bad_keys)
run_tests "$@"
