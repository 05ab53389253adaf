#!/usr/bin/env bash
# End-to-end tests of the 'server' method family (docs/methods/baselines.md A.3-A.8: fedavgm, fedprox, scaffold, feddyn, fednova,
# fedcm) under mpirun with 3 ranks on the tiny synthetic set of tests/mpi/lib.sh: each method's paper
# property against FedAvg / uniform averaging, identities of the persistent state read from the run's HDF5
# file, bit-identical resume of every stateful method, the clients' state in client-state.bin (its size, a format-3
# checkpoint moved into it, a damaged one refused), variants that must change something, the same bits on 1
# and 3 ranks (folded server steps), bad keys.
# usage: tests/mpi/test_methods_server.sh [test_name]      (last line: "N passed, N failed")
source "$(dirname "$0")/lib.sh"

setup() { setup_tiny; }

# ---- FedAvgM (A.3) -------------------------------------------------------------------------------------

# beta = 0, eta_g = 1: FedAvg bit for bit (Hsu et al.)
test_fedavgm_beta0_is_fedavg()
{
    equal_runs "fedavgm beta=0 == fedavg" 3 "algo.method=fedavgm algo.beta=0" "algo.method=fedavg"
    equal_runs "fedavgm ema beta=0 == fedavg" 3 "algo.method=fedavgm algo.beta=0 algo.variant=ema" "algo.method=fedavg"
}

# the FLOOD delta form is the canonical algebra (docs/methods/baselines.md A.3 variant 1); ema, nesterov and eta_g change the model
test_fedavgm_variants()
{
    equal_runs "fedavgm flood == canonical" 3 "algo.method=fedavgm algo.beta=0.5 algo.variant=flood" \
        "algo.method=fedavgm algo.beta=0.5"
    differ_runs "fedavgm ema != canonical" 3 "algo.method=fedavgm algo.variant=ema" "algo.method=fedavgm"
    differ_runs "fedavgm nesterov != canonical" 3 "algo.method=fedavgm algo.variant=nesterov" "algo.method=fedavgm"
    differ_runs "fedavgm beta=0.9 != fedavg" 3 "algo.method=fedavgm" "algo.method=fedavg"
    differ_runs "fedavgm eta_g=0.5 != eta_g=1" 3 "algo.method=fedavgm algo.beta=0 algo.eta_g=0.5" "algo.method=fedavg"
}

# FedAvgM's server step was the key eta_s: a config that gives it is refused naming eta_g; a run folder and
# checkpoint saved with it (config.ini and the checkpoint's /meta config) still resume, to the straight run's model
test_fedavgm_eta_s_renamed()
{
    bad_key "fedavgm eta_s" "did you mean 'eta_g'" algo.method=fedavgm algo.eta_s=0.5
    fh 2 saved_s "$WORK/base.ini" output.name=saved_s algo.method=fedavgm algo.eta_g=0.5 fl.rounds=2
    expect_rc "fedavgm eta_g=0.5, 2 rounds" 0 || return
    /usr/bin/python3 - "$WORK/out/saved_s" <<'EOF' || { fail "cannot write eta_s into the saved run"; return; }
import sys, h5py
run = sys.argv[1]
text = open(run + "/config.ini").read()
assert "eta_g" in text
open(run + "/config.ini", "w").write(text.replace("eta_g", "eta_s"))
with h5py.File(run + "/checkpoint.h5", "r+") as f:
    saved = f["meta"].attrs["config"]
    saved = saved.decode() if isinstance(saved, bytes) else saved
    assert "eta_g" in saved
    f["meta"].attrs["config"] = saved.replace("eta_g", "eta_s")
EOF
    fh 2 saved_s2 --resume "$WORK/out/saved_s" fl.rounds=3
    expect_rc "--resume of a run saved with eta_s" 0 || return
    grep -q "^eta_g = 0.5" "$WORK/out/saved_s/config.ini" || fail "the resumed run's config.ini does not say eta_g = 0.5"
    fh 2 straight_s "$WORK/base.ini" output.name=straight_s algo.method=fedavgm algo.eta_g=0.5 fl.rounds=3
    expect_rc "fedavgm eta_g=0.5, 3 rounds" 0 &&
        same_global "$WORK/out/straight_s/run.h5" "$WORK/out/saved_s/run.h5" "saved with eta_s and resumed vs straight"
}

# ---- FedProx (A.4) -------------------------------------------------------------------------------------

test_fedprox_mu0_is_fedavg()
{
    equal_runs "fedprox mu=0 == fedavg" 3 "algo.method=fedprox algo.mu=0" "algo.method=fedavg"
    equal_runs "fedprox mu=0 weights=uniform == uniform" 3 "algo.method=fedprox algo.mu=0 algo.weights=uniform" \
        "algo.method=uniform"
    differ_runs "fedprox mu=0.5 != fedavg" 3 "algo.method=fedprox algo.mu=0.5" "algo.method=fedavg"
}

# ---- SCAFFOLD (A.5) ------------------------------------------------------------------------------------

# c = c_k = 0 in round 0: one round of SCAFFOLD is one round of uniform averaging
test_scaffold_round0_is_uniform()
{
    equal_runs "scaffold round 0 == uniform" 3 "fl.rounds=1 algo.method=scaffold" "fl.rounds=1 algo.method=uniform"
    equal_runs "scaffold weights=samples round 0 == fedavg" 3 "fl.rounds=1 algo.method=scaffold algo.weights=samples" \
        "fl.rounds=1 algo.method=fedavg"
    differ_runs "scaffold != uniform after 3 rounds" 3 "algo.method=scaffold" "algo.method=uniform"
}

# full participation every round: c = (1/K) sum_k c_k (option II: c += (1/K) sum delta c_k); the identity
# holds under partial participation too (c moves by 1/K of the selected clients' changes)
test_scaffold_server_variate_is_mean()
{
    fh 3 scafall "$WORK/base.ini" output.name=scafall algo.method=scaffold fl.selection=all
    expect_rc "scaffold selection=all" 0 || return
    state_mean "$WORK/out/scafall/run.h5" /server/vectors 0 "$(python3 -c 'print(1/6)')" "scaffold all: c = mean c_k"
    fh 3 scafhalf "$WORK/base.ini" output.name=scafhalf algo.method=scaffold fl.rounds=4
    expect_rc "scaffold fraction 0.5" 0 || return
    state_mean "$WORK/out/scafhalf/run.h5" /server/vectors 0 "$(python3 -c 'print(1/6)')" "scaffold half: c = mean c_k"
}

# FLOOD-code variant: one extra epoch (steps = 2 x batches per epoch with epochs = 1), other model
test_scaffold_flood_variant()
{
    fh 3 scafflood "$WORK/base.ini" output.name=scafflood algo.method=scaffold algo.variant=flood algo.weights=samples
    expect_rc "scaffold variant=flood" 0 || return
    fh 3 scafopt "$WORK/base.ini" output.name=scafopt algo.method=scaffold algo.weights=samples
    expect_rc "scaffold option2" 0 || return
    local a b
    a=$(column "$WORK/out/scafflood/clients.csv" steps | tr '\n' ' ')
    b=$(column "$WORK/out/scafopt/clients.csv" steps | awk '{ printf "%d ", 2 * $1 }')
    [ "$a" = "$b" ] || fail "flood steps '$a', expected twice option2's '$b'"
    dump_global "$WORK/out/scafflood/run.h5" "$WORK/f1.bin" && dump_global "$WORK/out/scafopt/run.h5" "$WORK/f2.bin" &&
        cmp -s "$WORK/f1.bin" "$WORK/f2.bin" && fail "variant flood gives the option2 model"
    # flood: c is the plain mean of the selected clients' new c_k (replacement); the run must have set it
    dump_dataset "$WORK/out/scafflood/run.h5" /server/vectors "$WORK/fc.bin" || { fail "no /server/vectors"; return; }
    python3 -c 'import sys,struct; b=open(sys.argv[1],"rb").read(); sys.exit(0 if any(struct.unpack("<%df"%(len(b)//4),b)) else 1)' \
        "$WORK/fc.bin" || fail "flood: the server control variate is zero"
    differ_runs "scaffold weights samples != uniform" 3 "algo.method=scaffold algo.weights=samples" "algo.method=scaffold"
}

# ---- FedDyn (A.6) --------------------------------------------------------------------------------------

# alpha = 0 removes the client term: round 0's clients train exactly as uniform's (same losses); the server
# still adds mean_K H_k (docs/methods/baselines.md A.6 FL-Simulator form), so the model differs; S = sum_k H_k on rank 0
test_feddyn_alpha0_and_server_sum()
{
    fh 3 dyn0 "$WORK/base.ini" output.name=dyn0 algo.method=feddyn algo.alpha=0
    expect_rc "feddyn alpha=0" 0 || return
    fh 3 dynu "$WORK/base.ini" output.name=dynu algo.method=uniform
    expect_rc "uniform" 0 || return
    diff <(untimed "$WORK/out/dyn0/clients.csv" | awk -F, 'NR == 1 || $1 == 0') \
         <(untimed "$WORK/out/dynu/clients.csv" | awk -F, 'NR == 1 || $1 == 0') >/dev/null ||
        fail "feddyn alpha=0: round 0's client losses differ from uniform's"
    dump_global "$WORK/out/dyn0/run.h5" "$WORK/d1.bin" && dump_global "$WORK/out/dynu/run.h5" "$WORK/d2.bin" &&
        cmp -s "$WORK/d1.bin" "$WORK/d2.bin" && fail "feddyn alpha=0: the server correction mean_K H_k did nothing"
    state_mean "$WORK/out/dyn0/run.h5" /server/private 0 1 "feddyn alpha=0: S = sum_k H_k"
    fh 3 dyn1 "$WORK/base.ini" output.name=dyn1 algo.method=feddyn
    expect_rc "feddyn alpha=0.1" 0 || return
    state_mean "$WORK/out/dyn1/run.h5" /server/private 0 1 "feddyn alpha=0.1: S = sum_k H_k"
    dump_global "$WORK/out/dyn1/run.h5" "$WORK/d3.bin" && cmp -s "$WORK/d1.bin" "$WORK/d3.bin" &&
        fail "feddyn: alpha = 0.1 gives the alpha = 0 model"
}

# ---- FedNova (A.7) -------------------------------------------------------------------------------------

# equal step counts (train.steps = 5 for every client): FedAvg, with and without local momentum
test_fednova_equal_steps_is_fedavg()
{
    equal_runs "fednova steps=5 momentum=0 == fedavg" 3 "algo.method=fednova train.steps=5 train.momentum=0" \
        "algo.method=fedavg train.steps=5 train.momentum=0"
    equal_runs "fednova steps=5 momentum=0.9 == fedavg" 3 "algo.method=fednova train.steps=5" \
        "algo.method=fedavg train.steps=5"
    differ_runs "fednova epochs (unequal steps) != fedavg" 3 "algo.method=fednova" "algo.method=fedavg"
}

# ---- FedCM (A.8) ---------------------------------------------------------------------------------------

# alpha = 1: the global direction has no weight; uniform averaging bit for bit
test_fedcm_alpha1_is_uniform()
{
    equal_runs "fedcm alpha=1 == uniform" 3 "algo.method=fedcm algo.alpha=1" "algo.method=uniform"
    differ_runs "fedcm alpha=0.1 != uniform" 3 "algo.method=fedcm" "algo.method=uniform"
}

# ---- resume --------------------------------------------------------------------------------------------

test_resume_stateful()
{
    resume_identical "scaffold resume" algo.method=scaffold
    resume_identical "scaffold flood resume" algo.method=scaffold algo.variant=flood
    resume_identical "feddyn resume" algo.method=feddyn
    resume_identical "fedavgm resume" algo.method=fedavgm
    resume_identical "fedcm resume" algo.method=fedcm
}

# ---- the clients' state out of core (docs/architecture.md#client-state) ----------------------------------------

# SCAFFOLD's c_k live in the run folder's client-state.bin: run.h5 holds where they are (/clients/slots), not the
# vectors; fedhet inspect shows them; with a checkpoint every round the file never holds more than K + m slots
test_client_state_store()
{
    fh 3 stA "$WORK/base.ini" output.name=stA algo.method=scaffold fl.rounds=6
    expect_rc "scaffold, 6 rounds" 0 || return
    local d=$WORK/out/stA
    [ -s "$d/client-state.bin" ] || { fail "scaffold: no client-state.bin"; return; }
    h5ls -r "$d/run.h5" | grep -q "^/clients/vector" && fail "run.h5 still holds the client vectors"
    h5ls -r "$d/run.h5" | grep -q "^/clients/slots" || fail "run.h5 has no /clients/slots"
    "$FEDHET" inspect "$d/run.h5" >"$WORK/insp.out" 2>&1 || { fail "inspect run.h5: $(cat "$WORK/insp.out")"; return; }
    grep -q "^clients  *6, [1-6] of them trained" "$WORK/insp.out" && grep -q "in client-state.bin" "$WORK/insp.out" ||
        fail "inspect run.h5: $(cat "$WORK/insp.out")"
    # 6 clients, 3 per round (fraction 0.5), a checkpoint every round: at most 9 slots after the 4 KiB header
    python3 - "$d/client-state.bin" 9 >"$WORK/size.out" <<'EOF' || fail "client-state.bin: $(cat "$WORK/size.out")"
import os, struct, sys
slot_bytes = struct.unpack("<q", open(sys.argv[1], "rb").read(56)[48:56])[0]
slots = (os.path.getsize(sys.argv[1]) - 4096) / slot_bytes
print("%.2f slots of %d bytes" % (slots, slot_bytes))
sys.exit(0 if 0 < slots <= int(sys.argv[2]) else 1)
EOF
    note "client-state.bin after 6 rounds: $(cat "$WORK/size.out")"
}

# a checkpoint of format 3 held the c_k itself: resuming one moves them into the store, and the run ends as the
# straight one; a store that does not belong to the checkpoint (truncated, another run's) is refused naming it
test_client_state_older_and_damaged()
{
    fh 3 odA "$WORK/base.ini" output.name=odA algo.method=scaffold fl.rounds=4
    expect_rc "scaffold, 4 rounds" 0 || return
    fh 3 odB "$WORK/base.ini" output.name=odB algo.method=scaffold fl.rounds=2
    expect_rc "scaffold, 2 rounds" 0 || return
    local cs
    cs=$(client_state "$WORK/out/odB/checkpoint.h5") || { fail "cannot export the client state"; return; }
    /usr/bin/python3 - "$WORK/out/odB/checkpoint.h5" "$cs" <<'EOF' || { fail "cannot write a format-3 checkpoint"; return; }
import sys, h5py, numpy as np
with h5py.File(sys.argv[2], "r") as c, h5py.File(sys.argv[1], "r+") as f:
    del f["/clients/slots"]
    for name in c["/clients"]:
        f.create_dataset("/clients/" + name, data=c["/clients/" + name][...], chunks=True, fletcher32=True)
    f["/meta"].attrs["format_version"] = np.array([3], dtype="<i8")
    if "complete" in f["/meta"].attrs:
        del f["/meta"].attrs["complete"]
EOF
    rm -f "$WORK/out/odB/client-state.bin"
    fh 2 odC --resume "$WORK/out/odB" fl.rounds=4
    expect_rc "resume of a format-3 checkpoint" 0 || return
    same_state "$WORK/out/odA/run.h5" "$WORK/out/odB/run.h5" "format 3 resumed vs straight" || return
    same_csv "$WORK/out/odA/metrics.csv" "$WORK/out/odB/metrics.csv" "format 3 resumed vs straight" || return

    # run odA on to 6 rounds with its store cut short, then with the store of a run of 3 rounds (which has no slot
    # of round 4, where odA's table has some)
    cp "$WORK/out/odA/client-state.bin" "$WORK/odA.bin"
    truncate -s 8192 "$WORK/out/odA/client-state.bin"
    fh 3 odD --resume "$WORK/out/odA" fl.rounds=6
    expect_rc "resume with a truncated client-state.bin" 4 &&
        { grep -qE "client-state.bin, which the file \([0-9]+ bytes\) does not hold" "$WORK/odD.err" ||
              fail "truncated store: $(errline odD)"; }
    fh 3 odX "$WORK/base.ini" output.name=odX algo.method=scaffold fl.rounds=3
    expect_rc "scaffold, 3 rounds" 0 || return
    cp "$WORK/out/odX/client-state.bin" "$WORK/out/odA/client-state.bin"
    fh 3 odE --resume "$WORK/out/odA" fl.rounds=6
    expect_rc "resume with another run's client-state.bin" 4 &&
        { grep -q "client-state.bin, which holds" "$WORK/odE.err" || fail "another run's store: $(errline odE)"; }
    cp "$WORK/odA.bin" "$WORK/out/odA/client-state.bin"
    fh 3 odF --resume "$WORK/out/odA" fl.rounds=6
    expect_rc "resume with its own client-state.bin again" 0
}

# ---- folded aggregation --------------------------------------------------------------------------------

# every stateful server step folds: the same bits on 1 and 3 ranks (FedNova with its unequal steps, FedCM's K_loc
# from the headers)
test_folded_on_ranks()
{
    folded_on_ranks fedavgm "fedavgm algo.variant=nesterov" feddyn fednova fedcm
}

# ---- bad input -----------------------------------------------------------------------------------------

test_bad_keys()
{
    bad_key "fedprox mu=-1" mu algo.method=fedprox algo.mu=-1
    bad_key "fedavgm beta=1" beta algo.method=fedavgm algo.beta=1
    bad_key "fedavgm beta=-0.1" beta algo.method=fedavgm algo.beta=-0.1
    bad_key "fedavgm eta_g=0" eta_g algo.method=fedavgm algo.eta_g=0
    bad_key "mu with fedavg" mu algo.method=fedavg algo.mu=0.1
    bad_key "beta with fedprox" beta algo.method=fedprox algo.beta=0.5
    bad_key "fedavgm variant=bogus" variant algo.method=fedavgm algo.variant=bogus
    bad_key "feddyn alpha=-1" alpha algo.method=feddyn algo.alpha=-1
    bad_key "fedcm alpha=0" alpha algo.method=fedcm algo.alpha=0
    bad_key "fedcm alpha=1.5" alpha algo.method=fedcm algo.alpha=1.5
    bad_key "fednova adam" train.optimizer algo.method=fednova train.optimizer=adam
    bad_key "scaffold flood adamw" train.optimizer algo.method=scaffold algo.variant=flood train.optimizer=adamw
}

TESTS=(fedavgm_beta0_is_fedavg fedavgm_variants fedavgm_eta_s_renamed fedprox_mu0_is_fedavg scaffold_round0_is_uniform
       scaffold_server_variate_is_mean scaffold_flood_variant feddyn_alpha0_and_server_sum
       fednova_equal_steps_is_fedavg fedcm_alpha1_is_uniform resume_stateful client_state_store
       client_state_older_and_damaged folded_on_ranks bad_keys)
run_tests "$@"
