#!/usr/bin/env bash
# End-to-end tests of `fedhet run` under mpirun: determinism over rank counts, bit-identical resume,
# SIGTERM / SIGKILL, a failing rank, divergence, config errors, damaged checkpoints, --help.
# Works on a tiny synthetic IDX data set (tests/mpi/make_idx.py) in a temporary folder.
# usage: tests/mpi/test_run.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
source "$(dirname "$0")/lib.sh"

# ---- fixtures ------------------------------------------------------------------------------------------

setup() { setup_tiny; }

# ---- tests ---------------------------------------------------------------------------------------------

# 1. The same config on 1, 2, 3, 5 ranks: bit-identical global model and identical metrics.
test_determinism_ranks()
{
    local np
    for np in 1 2 3 5; do
        fh "$np" det$np "$WORK/base.ini" output.name=det$np
        expect_rc "np $np" 0 || return
    done
    [ -n "$(column "$WORK/out/det1/metrics.csv" test_accuracy | tr -d '\n')" ] ||
        fail "np 1: metrics.csv has no test_accuracy values"
    local sel
    sel=$(column "$WORK/out/det1/metrics.csv" n_selected | sort -u | tr '\n' ' ')
    [ "$sel" = "3 " ] || fail "np 1: n_selected is '$sel', expected 3 every round (fraction 0.5 of 6)"
    [ "$(column "$WORK/out/det1/metrics.csv" selected_hash | sort -u | wc -l)" -ge 2 ] ||
        note "the selection was the same in every round"
    for np in 2 3 5; do
        same_global "$WORK/out/det1/run.h5" "$WORK/out/det$np/run.h5" "np 1 vs $np"
        if ! diff <(column "$WORK/out/det1/metrics.csv" test_accuracy) \
                  <(column "$WORK/out/det$np/metrics.csv" test_accuracy) >/dev/null; then
            fail "np 1 vs $np: test_accuracy differs"
        fi
        same_csv "$WORK/out/det1/metrics.csv" "$WORK/out/det$np/metrics.csv" "np 1 vs $np"
        same_csv "$WORK/out/det1/clients.csv" "$WORK/out/det$np/clients.csv" "np 1 vs $np"
    done
}

# 1b. The default backend (onednn) on the cnn, whose convs oneDNN computes: bit-identical global model and
#     metrics on 1, 2, 3 and 5 ranks, with partial batches (the clients' 49, 100, 136, 48, 162, 105 rows end in
#     last batches of 1 to 9 at batch 16; evaluation runs chunks of 16, 14 and 10); 2 rounds + --resume to 3
#     equal 3 straight; the log names the backend; train.backend = blas gives other bits (another summation
#     order) and auto the default's (oneDNN builds every layer of the cnn).
test_determinism_ranks_onednn()
{
    local np
    for np in 1 2 3 5; do
        fh "$np" dnn$np "$WORK/base.ini" output.name=dnn$np model.name=cnn
        expect_rc "onednn, np $np" 0 || return
    done
    grep -q "conv layers on onednn" "$WORK/out/dnn1/log.txt" || fail "the log does not name the onednn backend"
    for np in 2 3 5; do
        same_global "$WORK/out/dnn1/run.h5" "$WORK/out/dnn$np/run.h5" "onednn, np 1 vs $np"
        same_csv "$WORK/out/dnn1/metrics.csv" "$WORK/out/dnn$np/metrics.csv" "onednn, np 1 vs $np"
        same_csv "$WORK/out/dnn1/clients.csv" "$WORK/out/dnn$np/clients.csv" "onednn, np 1 vs $np"
    done
    fh 2 dnnres "$WORK/base.ini" output.name=dnnres model.name=cnn fl.rounds=2
    expect_rc "onednn, 2 rounds" 0 || return
    fh 3 dnnres2 --resume "$WORK/out/dnnres" fl.rounds=3
    if expect_rc "onednn, --resume to 3 rounds" 0; then
        same_global "$WORK/out/dnn1/run.h5" "$WORK/out/dnnres/run.h5" "onednn, straight vs resumed"
        same_csv "$WORK/out/dnn1/metrics.csv" "$WORK/out/dnnres/metrics.csv" "onednn, straight vs resumed"
    fi
    fh 1 dnnauto "$WORK/base.ini" output.name=dnnauto model.name=cnn train.backend=auto
    expect_rc "auto" 0 && same_global "$WORK/out/dnn1/run.h5" "$WORK/out/dnnauto/run.h5" "onednn vs auto"
    fh 1 dnnblas "$WORK/base.ini" output.name=dnnblas model.name=cnn train.backend=blas
    expect_rc "blas" 0 || return
    grep -q "conv layers on blas" "$WORK/out/dnnblas/log.txt" || fail "the log does not name the blas backend"
    dump_global "$WORK/out/dnn1/run.h5" "$WORK/dnn1.bin" && dump_global "$WORK/out/dnnblas/run.h5" "$WORK/dnnblas.bin" ||
        { fail "cannot read the onednn and blas models"; return; }
    cmp -s "$WORK/dnn1.bin" "$WORK/dnnblas.bin" && fail "train.backend = blas gives onednn's bits: was oneDNN used?"
}

# 1d. The folded server step (docs/architecture.md "Aggregation"): FedAvg, SCAFFOLD (a summed upload vector and a
#     server step), FedISM+ (SAGA's server state from the scalars) and the FLOOD plug-in (weights from the
#     scalars): rank 0 receives headers and partial sums only (the log says so), and the final model, metrics.csv
#     and clients.csv are bit-identical on 1, 2, 3 and 5 ranks; a run killed after the aggregation of its second
#     round (SIGKILL at that point) resumes on another rank count to the straight run's bits.
test_fold_ranks_resume()
{
    local spec name args np
    for spec in "fedavg:algo.method=fedavg" "scaffold:algo.method=scaffold" \
                "fedismplus:algo.method=fedismplus" "flood:algo.method=fedavg algo.plugin=flood"; do
        name=${spec%%:*}
        read -r -a args <<<"${spec#*:}"
        for np in 1 2 3 5; do
            fh "$np" "fold-$name-$np" "$WORK/base.ini" output.name="fold-$name-$np" fl.rounds=4 "${args[@]}"
            expect_rc "$name, np $np" 0 || continue 2
        done
        grep -q "folded uploads" "$WORK/out/fold-$name-3/log.txt" ||
            fail "$name: the log does not say that the uploads are folded: $(grep 'memory on rank 0' "$WORK/out/fold-$name-3/log.txt")"
        for np in 2 3 5; do
            same_global "$WORK/out/fold-$name-1/run.h5" "$WORK/out/fold-$name-$np/run.h5" "$name, np 1 vs $np"
            same_csv "$WORK/out/fold-$name-1/metrics.csv" "$WORK/out/fold-$name-$np/metrics.csv" "$name, np 1 vs $np"
            same_csv "$WORK/out/fold-$name-1/clients.csv" "$WORK/out/fold-$name-$np/clients.csv" "$name, np 1 vs $np"
        done
        MPI_X=(-x FEDHET_TEST_KILL_POINT=aggregate -x FEDHET_TEST_KILL_ROUND=1)
        fh 3 "fold-$name-killed" "$WORK/base.ini" output.name="fold-$name-kill" fl.rounds=4 "${args[@]}"
        MPI_X=()
        [ "$RC" -ne 0 ] || { fail "$name: the run with a kill in round 2 exited 0"; continue; }
        fh 2 "fold-$name-resumed" --resume "$WORK/out/fold-$name-kill"
        if expect_rc "$name: --resume after the kill (np 2)" 0; then
            same_global "$WORK/out/fold-$name-1/run.h5" "$WORK/out/fold-$name-kill/run.h5" "$name, straight vs killed + resumed"
            same_csv "$WORK/out/fold-$name-1/metrics.csv" "$WORK/out/fold-$name-kill/metrics.csv" "$name, straight vs killed + resumed"
        fi
    done
}

# 1e. Ten thousand clients (2 rows each, the mlp): 40 of them per round fold as each finishes (40 held records
#     would outweigh the whole-length partial sums), bit-identical on 1, 2 and 5 ranks (and to the held records'
#     way, by the exact sums: tests/unit/test_layers_optim.c), clients.csv holds the selected clients' rows only,
#     and rank 0's peak memory stays small.
test_many_clients()
{
    python3 "$HERE/make_idx.py" "$WORK/idx10k" 20000 200 8 4 || { fail "cannot make the data"; return; }
    "$FEDHET" partition "$WORK/idx10k" "$WORK/p10k.h5" scheme=iid clients=10000 partition_seed=1 classes=4 \
        >"$WORK/p10k.out" 2>&1 || { fail "partition into 10000 clients: $(tail -1 "$WORK/p10k.out")"; return; }
    local np
    for np in 1 2 5; do
        fh "$np" "k10k-$np" "$WORK/base.ini" output.name="k10k-$np" data.path="$WORK/p10k.h5" train.batch_size=2 \
            fl.selection=count fl.count=40 fl.checkpoint_every=0
        expect_rc "10000 clients, np $np" 0 || return
    done
    grep -q "aggregation: folded as each client finishes" "$WORK/out/k10k-5/log.txt" ||
        fail "10000 clients: not folded as each client finishes: $(grep 'aggregation' "$WORK/out/k10k-5/log.txt")"
    for np in 2 5; do
        same_global "$WORK/out/k10k-1/run.h5" "$WORK/out/k10k-$np/run.h5" "10000 clients, np 1 vs $np"
        same_csv "$WORK/out/k10k-1/metrics.csv" "$WORK/out/k10k-$np/metrics.csv" "10000 clients, np 1 vs $np"
        same_csv "$WORK/out/k10k-1/clients.csv" "$WORK/out/k10k-$np/clients.csv" "10000 clients, np 1 vs $np"
    done
    [ "$(data_rows "$WORK/out/k10k-5/clients.csv")" = 120 ] ||
        fail "clients.csv has $(data_rows "$WORK/out/k10k-5/clients.csv") rows, expected 3 rounds x 40"
    local peak
    peak=$(sed -n 's/.*peak resident memory: rank 0 \([0-9.]*\) MiB.*/\1/p' "$WORK/out/k10k-5/log.txt")
    awk -v p="$peak" 'BEGIN { exit !(p != "" && p < 200) }' || fail "rank 0's peak memory is '$peak' MiB (expected < 200)"
    note "rank 0 peak $peak MiB"
}

# 1c. train.threads = 2 on a rank bound to one core: the run warns, naming the binding and how to lift it;
#     unbound it does not (this machine has 2 cores and the OpenMP build of OpenBLAS).
test_threads_binding()
{
    MPI_X=(--bind-to core)
    fh 1 thrBound "$WORK/base.ini" output.name=thrBound train.threads=2 fl.rounds=1
    MPI_X=()
    expect_rc "threads 2, bound to a core" 0 || return
    grep -q "may run on 1 core.*--bind-to none" "$WORK/thrBound.err" ||
        fail "threads 2 on one bound core: no warning naming the binding: $(head -c 300 "$WORK/thrBound.err")"
    MPI_X=(--bind-to none)
    fh 1 thrFree "$WORK/base.ini" output.name=thrFree train.threads=2 fl.rounds=1
    MPI_X=()
    expect_rc "threads 2, unbound" 0 || return
    grep -q "warning: train.threads" "$WORK/thrFree.err" &&
        fail "threads 2, unbound: an unexpected warning: $(grep 'warning: train.threads' "$WORK/thrFree.err")"
    return 0
}

# 2. 4 rounds straight == 2 rounds + --resume to 4 (on the same and on another rank count);
#    a changed key on --resume is refused and leaves the checkpoint alone.
test_resume_bit_identical()
{
    fh 3 resA "$WORK/base.ini" output.name=resA fl.rounds=4
    expect_rc "straight 4 rounds" 0 || return
    fh 3 resB "$WORK/base.ini" output.name=resB fl.rounds=2
    expect_rc "first 2 rounds" 0 || return
    local rd
    rd=$(rounds_done "$WORK/out/resB/checkpoint.h5")
    [ "$rd" = 2 ] || fail "after 2 rounds the checkpoint says rounds_done = '$rd'"
    cp -r "$WORK/out/resB" "$WORK/out/resC"
    cp "$WORK/out/resB/checkpoint.h5" "$WORK/resB.ckpt"
    cp "$WORK/out/resB/metrics.csv" "$WORK/resB.metrics"

    # a key that may not change: exit 1 naming it, nothing touched
    fh 3 resBad --resume "$WORK/out/resB" train.lr=0.5
    if expect_rc "--resume train.lr=0.5" 1; then
        grep -qE '\[train\] lr|train\.lr' "$WORK/resBad.err" ||
            fail "--resume train.lr=0.5: the message does not name train.lr: $(errline resBad)"
    fi
    cmp -s "$WORK/resB.ckpt" "$WORK/out/resB/checkpoint.h5" || fail "--resume train.lr=0.5 changed checkpoint.h5"
    cmp -s "$WORK/resB.metrics" "$WORK/out/resB/metrics.csv" || fail "--resume train.lr=0.5 changed metrics.csv"

    fh 3 resB2 --resume "$WORK/out/resB" fl.rounds=4
    if expect_rc "--resume fl.rounds=4 (np 3)" 0; then
        same_global "$WORK/out/resA/run.h5" "$WORK/out/resB/run.h5" "straight vs resumed (np 3)"
        same_global "$WORK/out/resA/checkpoint.h5" "$WORK/out/resB/checkpoint.h5" "straight vs resumed checkpoint (np 3)"
        same_csv "$WORK/out/resA/metrics.csv" "$WORK/out/resB/metrics.csv" "straight vs resumed (np 3)"
        same_csv "$WORK/out/resA/clients.csv" "$WORK/out/resB/clients.csv" "straight vs resumed (np 3)"
        [ "$(data_rows "$WORK/out/resB/metrics.csv")" = 4 ] ||
            fail "resumed metrics.csv has $(data_rows "$WORK/out/resB/metrics.csv") rows, expected 4"
    fi
    fh 2 resC2 --resume "$WORK/out/resC" fl.rounds=4
    if expect_rc "--resume fl.rounds=4 (np 2)" 0; then
        same_global "$WORK/out/resA/run.h5" "$WORK/out/resC/run.h5" "straight (np 3) vs resumed on np 2"
        same_csv "$WORK/out/resA/metrics.csv" "$WORK/out/resC/metrics.csv" "straight (np 3) vs resumed on np 2"
    fi
}

# 2b. A run extended with --resume fl.rounds=4 can be resumed again without repeating the override:
#     the run folder's config.ini should follow the rounds the run now has.
test_resume_after_extend()
{
    fh 1 extA "$WORK/base.ini" output.name=ext fl.rounds=2
    expect_rc "2 rounds" 0 || return
    fh 1 extB --resume "$WORK/out/ext" fl.rounds=4
    expect_rc "--resume fl.rounds=4" 0 || return
    grep -qE '^rounds *= *4' "$WORK/out/ext/config.ini" ||
        fail "config.ini still says '$(grep -E '^rounds' "$WORK/out/ext/config.ini")' after --resume fl.rounds=4 (the checkpoint says 4)"
    cp "$WORK/out/ext/metrics.csv" "$WORK/ext.metrics"
    fh 1 extC --resume "$WORK/out/ext"
    expect_rc "plain --resume of the finished 4-round run" 0
    cmp -s "$WORK/ext.metrics" "$WORK/out/ext/metrics.csv" || fail "plain --resume changed metrics.csv"
}

# 3. FedAvg with one client: the global model is the client's model (divergence 0, fedavg == uniform,
#    any rank count). Equality with centralised training, step for step: tests/unit/test_fl_client.c.
test_one_client()
{
    fh 1 oneA "$WORK/one.ini" output.name=oneA fl.rounds=1 train.epochs=2
    expect_rc "np 1" 0 || return
    fh 2 oneB "$WORK/one.ini" output.name=oneB fl.rounds=1 train.epochs=2
    expect_rc "np 2" 0 || return
    fh 1 oneU "$WORK/one.ini" output.name=oneU fl.rounds=1 train.epochs=2 algo.method=uniform
    expect_rc "uniform np 1" 0 || return
    local div drift
    div=$(column "$WORK/out/oneA/metrics.csv" divergence)
    drift=$(column "$WORK/out/oneA/metrics.csv" drift)
    [ "$div" = 0 ] || fail "one client: divergence (client model vs new global) is '$div', expected exactly 0"
    awk -v d="$drift" 'BEGIN { exit !(d > 0) }' || fail "one client: drift is '$drift', expected > 0 (the client trained)"
    same_global "$WORK/out/oneA/run.h5" "$WORK/out/oneB/run.h5" "one client np 1 vs np 2"
    same_global "$WORK/out/oneA/run.h5" "$WORK/out/oneU/run.h5" "one client fedavg vs uniform"
    local steps
    steps=$(column "$WORK/out/oneA/clients.csv" steps)
    [ "$steps" = 76 ] || note "one client: $steps local steps (600 samples, batch 16, 2 epochs: 76 expected)"
}

# 4. SIGTERM to the ranks: the round finishes, a checkpoint is written, exit 0, "Resume with";
#    --resume finishes the run bit-identically to an uninterrupted one.
test_sigterm()
{
    local name=sigterm cfg="$WORK/base.ini output.name=sigterm"
    local args=("$WORK/base.ini" output.name=sigterm fl.rounds=2000 fl.checkpoint_every=100000 train.epochs=5)
    timeout -k 5 "$RUN_LIMIT" mpirun --oversubscribe -np 3 "$FEDHET" run "${args[@]}" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" &
    local tpid=$!
    BG_PIDS+=("$tpid")
    if ! wait_rows "$WORK/out/$name/metrics.csv" 1 60 "$tpid"; then
        wait "$tpid"
        fail "the run ended (exit $?) or stalled before its first metrics row: $(errline $name)"
        return
    fi
    local ranks
    ranks=$(ranks_of "$cfg")
    [ "$(echo $ranks | wc -w)" = 3 ] || note "found rank processes '$ranks' (expected 3)"
    local t0
    t0=$(date +%s.%N)
    kill -TERM $ranks
    wait "$tpid"
    RC=$?
    local took
    took=$(elapsed_since "$t0")
    expect_rc "after SIGTERM to the ranks" 0
    grep -q "Resume with" "$WORK/$name.out" "$WORK/$name.err" "$WORK/out/$name/log.txt" ||
        fail "no 'Resume with' in the output or log.txt"
    [ -f "$WORK/out/$name/checkpoint.h5" ] || { fail "no checkpoint.h5 after SIGTERM"; return; }
    [ -e "$WORK/out/$name/run.h5" ] && fail "run.h5 written for a run stopped after $(data_rows "$WORK/out/$name/metrics.csv") of 2000 rounds"
    local rd rows
    rd=$(rounds_done "$WORK/out/$name/checkpoint.h5")
    rows=$(data_rows "$WORK/out/$name/metrics.csv")
    [ -n "$rd" ] && [ "$rd" -ge 1 ] || { fail "checkpoint rounds_done = '$rd'"; return; }
    [ "$rd" = "$rows" ] || fail "checkpoint rounds_done = $rd but metrics.csv has $rows rows"
    note "stopped $took s after SIGTERM, after round $rd"
    local target=$((rd + 2))
    fh 3 sigterm2 --resume "$WORK/out/$name" fl.rounds=$target
    if expect_rc "--resume fl.rounds=$target" 0; then
        [ "$(data_rows "$WORK/out/$name/metrics.csv")" = "$target" ] ||
            fail "resumed metrics.csv has $(data_rows "$WORK/out/$name/metrics.csv") rows, expected $target"
        [ "$(column "$WORK/out/$name/metrics.csv" round | tail -1)" = $((target - 1)) ] ||
            fail "last metrics round is $(column "$WORK/out/$name/metrics.csv" round | tail -1), expected $((target - 1))"
        fh 3 sigtermRef "$WORK/base.ini" output.name=sigtermRef fl.rounds=$target fl.checkpoint_every=100000 train.epochs=5
        if expect_rc "uninterrupted reference" 0; then
            same_global "$WORK/out/sigtermRef/run.h5" "$WORK/out/$name/run.h5" "uninterrupted vs SIGTERM + resume"
            same_csv "$WORK/out/sigtermRef/metrics.csv" "$WORK/out/$name/metrics.csv" "uninterrupted vs SIGTERM + resume"
        fi
    fi
}

# 5. SIGKILL of mpirun and every rank with checkpoint_every = 1: the checkpoint is valid and --resume
#    finishes bit-identically to an uninterrupted run.
test_sigkill()
{
    local name=sigkill cfg="$WORK/base.ini output.name=sigkill"
    timeout -k 5 "$RUN_LIMIT" mpirun --oversubscribe -np 3 "$FEDHET" run "$WORK/base.ini" output.name=$name \
        fl.rounds=2000 fl.checkpoint_every=1 train.epochs=5 >"$WORK/$name.out" 2>"$WORK/$name.err" &
    local tpid=$!
    BG_PIDS+=("$tpid")
    if ! wait_rows "$WORK/out/$name/metrics.csv" 2 60 "$tpid"; then
        wait "$tpid"
        fail "the run ended (exit $?) or stalled before its second metrics row: $(errline $name)"
        return
    fi
    local mp ranks
    mp=$(pgrep -P "$tpid" -x mpirun)
    ranks=$(ranks_of "$cfg")
    kill -KILL $mp $ranks
    wait "$tpid" 2>/dev/null
    sleep 0.3
    [ -z "$(ranks_of "$cfg")" ] || fail "rank processes left after SIGKILL: $(ranks_of "$cfg")"
    local ck=$WORK/out/$name/checkpoint.h5
    [ -f "$ck" ] || { fail "no checkpoint.h5 after 2 rounds with checkpoint_every = 1"; return; }
    h5dump -H "$ck" >/dev/null 2>&1 || fail "h5dump -H cannot read the checkpoint"
    local rd
    rd=$(rounds_done "$ck")
    [ -n "$rd" ] && [ "$rd" -ge 1 ] || { fail "checkpoint rounds_done = '$rd'"; return; }
    local left
    left=$(cd "$WORK/out/$name" && ls | grep -E '\.tmp-' | tr '\n' ' ')
    [ -n "$left" ] && note "temporary files left by the killed run: $left"
    note "killed with $(data_rows "$WORK/out/$name/metrics.csv") metrics rows, checkpoint rounds_done $rd"
    local target=$((rd + 2))
    fh 3 sigkill2 --resume "$WORK/out/$name" fl.rounds=$target
    if expect_rc "--resume fl.rounds=$target" 0; then
        [ "$(data_rows "$WORK/out/$name/metrics.csv")" = "$target" ] ||
            fail "resumed metrics.csv has $(data_rows "$WORK/out/$name/metrics.csv") rows, expected $target"
        fh 3 sigkillRef "$WORK/base.ini" output.name=sigkillRef fl.rounds=$target fl.checkpoint_every=1 train.epochs=5
        if expect_rc "uninterrupted reference" 0; then
            same_global "$WORK/out/sigkillRef/run.h5" "$WORK/out/$name/run.h5" "uninterrupted vs SIGKILL + resume"
            same_csv "$WORK/out/sigkillRef/metrics.csv" "$WORK/out/$name/metrics.csv" "uninterrupted vs SIGKILL + resume"
        fi
    fi
}

# 6. A rank that fails aborts the job quickly with its message; the run resumes from its checkpoint.
test_rank_failure()
{
    local t0 took
    t0=$(date +%s.%N)
    MPI_X=(-x FEDHET_TEST_FAIL_RANK=2 -x FEDHET_TEST_FAIL_ROUND=1)
    RUN_LIMIT=30 fh 3 fail3 "$WORK/base.ini" output.name=fail3
    MPI_X=()
    took=$(elapsed_since "$t0")
    [ "$RC" -ne 0 ] || fail "np 3, rank 2 failing in round 1: exit 0"
    [ "$RC" -eq 124 ] && fail "np 3: the job hung (killed by timeout after 30 s)"
    awk -v t="$took" 'BEGIN { exit !(t < 10) }' || fail "np 3: the job took $took s to end (limit 10 s)"
    grep -q "failure injected" "$WORK/fail3.err" "$WORK/fail3.out" || fail "np 3: no 'failure injected' in the output"
    [ -e "$WORK/out/fail3/run.h5" ] && fail "np 3: run.h5 written by a failed run"
    note "np 3: exit $RC after $took s"
    # the same on one process: a plain error exit with the status of the failure (2, input data)
    FEDHET_TEST_FAIL_RANK=0 FEDHET_TEST_FAIL_ROUND=1 timeout 30 "$FEDHET" run "$WORK/base.ini" output.name=fail1 \
        >"$WORK/fail1.out" 2>"$WORK/fail1.err"
    RC=$? LAST_TAG=fail1
    expect_rc "np 1, rank 0 failing in round 1" 2
    grep -q "failure injected" "$WORK/fail1.err" || fail "np 1: no 'failure injected' in stderr"
    # the checkpoint of round 1 is good: --resume completes the run like an uninterrupted one
    if [ -f "$WORK/out/fail3/checkpoint.h5" ]; then
        fh 3 fail3r --resume "$WORK/out/fail3"
        expect_rc "--resume after the failure" 0 &&
            fh 3 fail3ref "$WORK/base.ini" output.name=fail3ref && expect_rc "reference" 0 &&
            same_global "$WORK/out/fail3ref/run.h5" "$WORK/out/fail3/run.h5" "uninterrupted vs failed + resumed"
    else
        fail "no checkpoint after round 1 (checkpoint_every = 1)"
    fi
}

# 7. Divergence: exit 3 with "diverged", no run.h5, the last good checkpoint kept as it was.
test_divergence()
{
    fh 3 div1 "$WORK/base.ini" output.name=div1 train.lr=1e6
    expect_rc "lr 1e6" 3
    grep -q "diverged" "$WORK/div1.err" || fail "lr 1e6: no 'diverged' in stderr"
    [ -e "$WORK/out/div1/run.h5" ] && fail "lr 1e6: run.h5 written"
    [ "$(data_rows "$WORK/out/div1/metrics.csv")" -le 0 ] || fail "lr 1e6: metrics rows $(data_rows "$WORK/out/div1/metrics.csv") for a round-1 divergence"
    # lr 2 with momentum 0.9 survives a few rounds, then diverges: the checkpoint is the last good round
    fh 3 div2 "$WORK/base.ini" output.name=div2 train.lr=2 fl.rounds=8
    expect_rc "lr 2" 3 || return
    grep -q "diverged" "$WORK/div2.err" || fail "lr 2: no 'diverged' in stderr"
    grep -q "diverged" "$WORK/out/div2/log.txt" || fail "lr 2: no 'diverged' in log.txt"
    [ -e "$WORK/out/div2/run.h5" ] && fail "lr 2: run.h5 written"
    local k rd
    k=$(data_rows "$WORK/out/div2/metrics.csv")
    if [ "$k" -ge 1 ]; then
        rd=$(rounds_done "$WORK/out/div2/checkpoint.h5")
        [ "$rd" = "$k" ] || fail "lr 2: checkpoint rounds_done '$rd', metrics rows $k"
        fh 3 div2ref "$WORK/base.ini" output.name=div2ref train.lr=2 fl.rounds=$k
        expect_rc "lr 2, $k rounds" 0 &&
            same_global "$WORK/out/div2ref/run.h5" "$WORK/out/div2/checkpoint.h5" "lr 2: checkpoint vs $k good rounds"
        note "lr 2 diverged in round $((k + 1))"
    else
        note "lr 2 diverged in round 1: the kept-checkpoint part was not exercised"
    fi
}

# 7b. Divergence messages: both lines name the same round (1-based), and a checkpoint is only named
#     when one exists.
test_divergence_messages()
{
    fh 1 dm2 "$WORK/base.ini" output.name=dm2 train.lr=2 fl.rounds=8
    expect_rc "lr 2" 3 || return
    local r_client r_run
    r_client=$(sed -n 's/.*round \([0-9]*\): .*(diverged).*/\1/p' "$WORK/dm2.err" "$WORK/dm2.out" | head -1)
    r_run=$(sed -n 's/.*error: round \([0-9]*\) diverged.*/\1/p' "$WORK/dm2.err" | head -1)
    local k=$(($(data_rows "$WORK/out/dm2/metrics.csv") + 1))
    [ "$r_run" = "$k" ] || fail "the error says round '$r_run' diverged; it was round $k (1-based)"
    [ -z "$r_client" ] && note "no 'round N: ... (diverged)' line before the error"
    [ -z "$r_client" ] || [ "$r_client" = "$r_run" ] ||
        fail "the client line says 'round $r_client: client ... diverged' but the error says 'round $r_run diverged' (one is 0-based)"
    fh 1 dm1 "$WORK/base.ini" output.name=dm1 train.lr=1e6
    expect_rc "lr 1e6" 3 || return
    if [ ! -e "$WORK/out/dm1/checkpoint.h5" ] && grep -q "last good checkpoint is" "$WORK/dm1.err"; then
        fail "round-1 divergence names a last good checkpoint that does not exist: $(grep -o 'the last good checkpoint is [^ ]*' "$WORK/dm1.err")"
    fi
}

# 8. Config errors: exit 1 naming the key or file, before anything is written.
test_bad_configs()
{
    local b=("$WORK/base.ini")
    fh 1 bad1 "${b[@]}" output.name=bad1 train.lr=-0.1
    expect_rc "train.lr=-0.1" 1 && { grep -qE '\[train\] lr|train\.lr' "$WORK/bad1.err" || fail "train.lr=-0.1: message does not name the key: $(errline bad1)"; }
    fh 1 bad2 "${b[@]}" output.name=bad2 algo.method=fedavgg
    expect_rc "algo.method=fedavgg" 1 && { grep -q "fedavgg" "$WORK/bad2.err" && grep -qE "did you mean '?fedavg'?" "$WORK/bad2.err" ||
        fail "algo.method=fedavgg: no suggestion of fedavg: $(errline bad2)"; }
    fh 1 bad3 "${b[@]}" output.name=bad3 data.alpha=0 data.path="$WORK/made.h5" data.source="$WORK/idx"
    expect_rc "data.alpha=0" 1 && { grep -qE '\[data\] alpha|data\.alpha' "$WORK/bad3.err" || fail "data.alpha=0: message does not name the key: $(errline bad3)"; }
    [ -e "$WORK/made.h5" ] && fail "data.alpha=0: the partition file was made before the error"
    fh 1 bad4 "${b[@]}" output.name=bad4 data.path="$WORK/missing.h5"
    expect_rc "missing data file" 2 && { grep -q "$WORK/missing.h5" "$WORK/bad4.err" || fail "missing data file: message does not name it: $(errline bad4)"; }
    sed 's/^\[train\]/[train]\nlerning_rate = 0.1/' "$WORK/base.ini" >"$WORK/unknown.ini"
    fh 1 bad5 "$WORK/unknown.ini" output.name=bad5
    expect_rc "unknown key in the file" 1 && { grep -q "lerning_rate" "$WORK/bad5.err" && grep -q "unknown.ini" "$WORK/bad5.err" ||
        fail "unknown key: message does not name the key and file: $(errline bad5)"; }
    local i
    for i in 1 2 3 4 5; do [ -e "$WORK/out/bad$i" ] && fail "bad$i: a run folder was made for a config error"; done
    fh 8 bad8 "${b[@]}" output.name=bad8
    expect_rc "-np 8 for 6 clients" 1 && { grep -q "ranks" "$WORK/bad8.err" && grep -q "clients" "$WORK/bad8.err" ||
        fail "-np 8: message does not name ranks and clients: $(errline bad8)"; }
    # an existing run folder is never replaced without --force
    fh 1 exist1 "${b[@]}" output.name=exist fl.rounds=1
    expect_rc "first run" 0 || return
    cp "$WORK/out/exist/metrics.csv" "$WORK/exist.metrics"
    fh 1 exist2 "${b[@]}" output.name=exist fl.rounds=1
    expect_rc "existing run folder without --force" 1 && { grep -q "already exists" "$WORK/exist2.err" || fail "existing folder: $(errline exist2)"; }
    cmp -s "$WORK/exist.metrics" "$WORK/out/exist/metrics.csv" || fail "existing folder: metrics.csv changed without --force"
    fh 1 exist3 "${b[@]}" output.name=exist fl.rounds=1 --force
    expect_rc "existing run folder with --force" 0
}

# 8b. A config error found on the ranks (more ranks than clients + 1) leaves no run folder behind: a
#     retry with a valid rank count must not need --force.
test_no_leftover_folder()
{
    fh 8 left8 "$WORK/base.ini" output.name=left
    expect_rc "-np 8 for 6 clients" 1
    if [ -e "$WORK/out/left" ]; then
        fail "the failed -np 8 run left $WORK/out/left ($(ls "$WORK/out/left" | tr '\n' ' '))"
    fi
    fh 3 left3 "$WORK/base.ini" output.name=left fl.rounds=1
    expect_rc "retry on -np 3 without --force" 0
}

# 9. Damaged checkpoints: --resume refuses them (exit 4) and changes nothing, or, where the damage
#    hit bytes that do not matter, continues exactly like the intact file. Never silently different.
test_damaged_checkpoint()
{
    fh 1 dmg "$WORK/base.ini" output.name=dmg fl.rounds=2
    expect_rc "2 rounds" 0 || return
    # control: an intact copy resumes
    cp -r "$WORK/out/dmg" "$WORK/out/dmg_ok"
    fh 1 dmg_ok --resume "$WORK/out/dmg_ok" fl.rounds=3
    expect_rc "intact copy --resume" 0 || return
    local sz
    sz=$(stat -c %s "$WORK/out/dmg/checkpoint.h5")
    # truncated to half
    cp -r "$WORK/out/dmg" "$WORK/out/dmg_trunc"
    local ck=$WORK/out/dmg_trunc/checkpoint.h5
    truncate -s $((sz / 2)) "$ck"
    cp "$ck" "$WORK/trunc.ckpt"
    cp "$WORK/out/dmg_trunc/metrics.csv" "$WORK/trunc.metrics"
    fh 1 dmg_trunc --resume "$WORK/out/dmg_trunc" fl.rounds=3
    expect_rc "checkpoint truncated to half" 4
    cmp -s "$ck" "$WORK/trunc.ckpt" || fail "truncated checkpoint: the file changed"
    cmp -s "$WORK/out/dmg_trunc/metrics.csv" "$WORK/trunc.metrics" || fail "truncated checkpoint: metrics.csv changed"
    [ -e "$WORK/out/dmg_trunc/run.h5" ] && ! cmp -s "$WORK/out/dmg_trunc/run.h5" "$WORK/out/dmg/run.h5" &&
        fail "truncated checkpoint: run.h5 changed"
    # 8 bytes overwritten with 0xff in the middle of the file, and at other eighths of it
    local k off tag
    for k in 4 1 2 3 5 6 7; do
        off=$((sz * k / 8))
        tag=dmg_o$k
        cp -r "$WORK/out/dmg" "$WORK/out/$tag"
        ck=$WORK/out/$tag/checkpoint.h5
        printf '\377\377\377\377\377\377\377\377' | dd of="$ck" bs=1 seek="$off" conv=notrunc status=none
        cp "$ck" "$WORK/$tag.ckpt"
        fh 1 "$tag" --resume "$WORK/out/$tag" fl.rounds=3
        if [ "$RC" -eq 4 ]; then
            cmp -s "$ck" "$WORK/$tag.ckpt" || fail "8 bytes overwritten at offset $off: refused, but the file changed"
            cmp -s "$WORK/out/$tag/metrics.csv" "$WORK/out/dmg/metrics.csv" || fail "8 bytes overwritten at offset $off: refused, but metrics.csv changed"
        elif [ "$RC" -eq 0 ]; then
            if ! dump_global "$WORK/out/$tag/run.h5" "$WORK/$tag.bin" || ! dump_global "$WORK/out/dmg_ok/run.h5" "$WORK/dmg_ok.bin" ||
               ! cmp -s "$WORK/$tag.bin" "$WORK/dmg_ok.bin" ||
               ! diff <(untimed "$WORK/out/$tag/metrics.csv") <(untimed "$WORK/out/dmg_ok/metrics.csv") >/dev/null; then
                local what="the final model or metrics differ from the intact checkpoint's"
                if dump_global "$WORK/out/dmg/checkpoint.h5" "$WORK/dmg_intact.bin" && dump_global "$WORK/$tag.ckpt" "$WORK/$tag.read.bin" &&
                   ! cmp -s "$WORK/dmg_intact.bin" "$WORK/$tag.read.bin"; then
                    local first nbytes
                    first=$(cmp -l "$WORK/dmg_intact.bin" "$WORK/$tag.read.bin" 2>/dev/null | awk 'NR == 1 { print int(($1 - 1) / 4) }')
                    nbytes=$(cmp -l "$WORK/dmg_intact.bin" "$WORK/$tag.read.bin" 2>/dev/null | wc -l)
                    what="/server/global reads back without error but with $nbytes bytes changed (from value $first)"
                fi
                fail "8 bytes overwritten at offset $off of $sz: --resume exit 0; $what"
            else
                note "8 bytes at offset $off: harmless (resumed exactly like the intact file)"
            fi
        else
            fail "8 bytes overwritten at offset $off: exit $RC, expected 4 ($(errline "$tag"))"
        fi
    done
    # one bit of /server/global's data flipped: only the Fletcher32 checksum can tell (the same bit in the
    # copy under /model too: the checkpoint holds the values twice)
    cp -r "$WORK/out/dmg" "$WORK/out/dmg_data"
    ck=$WORK/out/dmg_data/checkpoint.h5
    if dump_global "$ck" "$WORK/dmg.bin" && off=$(python3 "$HERE/flip_data.py" "$ck" "$WORK/dmg.bin" 2); then
        fh 1 dmg_data --resume "$WORK/out/dmg_data" fl.rounds=3
        expect_rc "one bit of /server/global's data flipped at offset $off" 4
    else
        fail "could not locate /server/global's bytes in the checkpoint (compressed?)"
    fi
}

# 9b. The checkpoint's vectors are stored in sensible chunks (a one-value chunk costs an index entry and
#     a checksum per float: files ~11x the data and slow checkpoints).
test_checkpoint_chunks()
{
    fh 1 chunk "$WORK/base.ini" output.name=chunk fl.rounds=1
    expect_rc "1 round" 0 || return
    local f=$WORK/out/chunk/checkpoint.h5 hdr n chunk size
    hdr=$(h5dump -p -H -d /server/global "$f" 2>/dev/null)
    n=$(printf '%s\n' "$hdr" | sed -n 's/.*DATASPACE *SIMPLE { ( *\([0-9]*\) *).*/\1/p' | head -1)
    chunk=$(printf '%s\n' "$hdr" | sed -n 's/.*CHUNKED ( *\([0-9]*\) *).*/\1/p' | head -1)
    size=$(stat -c %s "$f")
    [ -n "$n" ] && [ -n "$chunk" ] || { fail "cannot read the layout of /server/global"; return; }
    local want=$((n < 1024 ? n : 1024))
    [ "$chunk" -ge "$want" ] ||
        fail "/server/global ($n floats) is stored in chunks of $chunk value(s); checkpoint.h5 is $size bytes for $((4 * n)) bytes of model"
    printf '%s\n' "$hdr" | grep -q FLETCHER32 || fail "/server/global has no Fletcher32 filter"
}

# 10. --help lists every section.
test_help()
{
    "$FEDHET" run --help >"$WORK/help.out" 2>"$WORK/help.err"
    RC=$? LAST_TAG=help
    expect_rc "--help" 0
    local s
    for s in data model train fl algo output; do
        grep -q "^\[$s\]" "$WORK/help.out" || fail "--help does not list [$s]"
    done
}

# ---- driver --------------------------------------------------------------------------------------------

# 16. A quality shift (docs/methods/metrics.md C.5, C.6): clean and corrupted test metrics every evaluated round, and the
#     client-level std: each client scored on the test set of its own quality, population std over the K
#     clients, recomputed here from the clients' corruption flags (fedhet inspect).
test_quality_metrics()
{
    "$FEDHET" partition "$WORK/idx" "$WORK/pq.h5" scheme=dirichlet alpha=0.5 clients=6 min_size=5 partition_seed=1 classes=4 \
        corruption=gaussian_noise severity=5 corrupted=2 >"$WORK/pq.out" 2>&1 || { fail "partition: $(tail -1 "$WORK/pq.out")"; return; }
    fh 2 quality "$WORK/base.ini" output.name=quality data.path="$WORK/pq.h5" fl.selection=all
    expect_rc "run on a quality-shifted partition" 0 || return
    local csv=$WORK/out/quality/metrics.csv flags
    flags=$("$FEDHET" inspect "$WORK/pq.h5" | awk '$1 ~ /^[0-9]+$/ && ($3 == "yes" || $3 == "no") { print ($3 == "yes") }' | tr '\n' ' ')
    [ "$(echo $flags | wc -w)" = 6 ] || { fail "could not read the 6 corruption flags from fedhet inspect: '$flags'"; return; }
    paste -d, <(column "$csv" test_auc_ovo_macro) <(column "$csv" corrupted_auc_ovo_macro) <(column "$csv" client_auc_std) \
        <(column "$csv" test_balanced_accuracy) <(column "$csv" corrupted_balanced_accuracy) <(column "$csv" client_bacc_std) |
        awk -F, -v flags="$flags" '
            BEGIN { K = split(flags, f, " ") }
            function pstd(clean, corr,   k, m, v, s) {
                m = 0; for (k = 1; k <= K; k++) { v[k] = f[k] ? corr : clean; m += v[k] / K }
                s = 0; for (k = 1; k <= K; k++) s += (v[k] - m)^2 / K
                return sqrt(s) }
            $1 == "" { next }
            { rows++
              if ($2 == "" || $3 == "") { print "corrupted metrics missing in row " NR; bad = 1; next }
              if ((d = pstd($1, $2) - $3) > 1e-9 || d < -1e-9) { print "client_auc_std " $3 " vs " pstd($1, $2); bad = 1 }
              if ((d = pstd($4, $5) - $6) > 1e-9 || d < -1e-9) { print "client_bacc_std " $6 " vs " pstd($4, $5); bad = 1 } }
            END { if (!rows) { print "no evaluated round"; bad = 1 } exit bad }' >"$WORK/quality.check" ||
        fail "quality metrics: $(head -2 "$WORK/quality.check" | tr '\n' ' ')"
    [ -z "$(column "$WORK/out/det1/metrics.csv" client_auc_std 2>/dev/null | tr -d '\n')" ] ||
        [ ! -f "$WORK/out/det1/metrics.csv" ] || fail "client_auc_std is set for a run without a corrupted test set"
}

TESTS=(determinism_ranks determinism_ranks_onednn fold_ranks_resume many_clients threads_binding resume_bit_identical resume_after_extend one_client sigterm sigkill
       rank_failure divergence divergence_messages bad_configs no_leftover_folder damaged_checkpoint
       checkpoint_chunks help quality_metrics)

run_tests
