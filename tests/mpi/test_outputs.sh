#!/usr/bin/env bash
# The run folder under bad input and hostile files: folder names that would leave their parent ('.',
# '..', '/') refused by run, grid, landscape and report; a run that fails before its first checkpoint
# leaves no folder (a retry needs no --force), and one killed then is restarted by --resume; symbolic
# links in place of metrics.csv, clients.csv or log.txt are refused, not written through; the SIGTERM
# resume line is one shell command whatever the folder's name; the memory line adds up per client rank; a
# checkpoint names the build that wrote it; export and landscape rebuild a saved run's model as the run built it.
# usage: tests/mpi/test_outputs.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
source "$(dirname "$0")/lib.sh"

setup() { setup_tiny; }

# refused WHAT NEEDLE: the last command exited 1 and its stderr holds NEEDLE
refused()
{
    expect_rc "$1" 1 || return 1
    grep -qF -- "$2" "$WORK/$LAST_TAG.err" || fail "$1: the message does not say \"$2\": $(errline "$LAST_TAG")"
}

# 1. '.', '..', '/' and empty folder names: refused before anything is written or deleted.
test_folder_names()
{
    mkdir -p "$WORK/nest/inner"
    echo keep >"$WORK/nest/metrics.csv"
    fx dotdot run "$WORK/base.ini" output.dir="$WORK/nest/inner" output.name=.. --force
    refused "run output.name=.. --force" "[output] name = '..'"
    fx dot run "$WORK/base.ini" output.dir="$WORK/nest" output.name=. --force
    refused "run output.name=. --force" "[output] name = '.'"
    fx slash run "$WORK/base.ini" output.dir="$WORK/nest" output.name=a/b
    refused "run output.name=a/b" "[output] name = 'a/b'"
    [ "$(cat "$WORK/nest/metrics.csv")" = keep ] || fail "a refused name changed $WORK/nest/metrics.csv"
    [ -e "$WORK/nest/config.ini" ] && fail "a refused name wrote $WORK/nest/config.ini"
    # a config file whose own name gives '.'
    cp "$WORK/base.ini" "$WORK/nest/..ini"
    fx dotfile run "$WORK/nest/..ini"
    refused "run ..ini (no [output] name)" "must be a plain name"
    [ -e "$WORK/out/config.ini" ] && fail "run ..ini wrote $WORK/out/config.ini"
    { cat "$WORK/base.ini"; printf '\n[grid]\ntrain.lr = 0.05, 0.1\n'; } >"$WORK/sweep.ini"
    fx grid grid "$WORK/sweep.ini" output.name=..
    refused "grid output.name=.." "must be a plain name"
    fx land landscape "$WORK/nowhere/run.h5" name=..
    refused "landscape name=.." "name = '..'"
    fx rep1 report "$WORK/out" --out .
    refused "report --out ." "--out (its last part) = '.'"
    fx rep2 report "$WORK/out" --out ""
    refused "report --out ''" "--out (its last part) = ''"
    fx rep3 report "$WORK/out" --out "$WORK/nest/.."
    refused "report --out DIR/.." "= '..'"
}

# 2. Failures before the first round (a model that cannot be built, damaged client or test rows) leave no
#    run folder, and --force over a finished run that then fails keeps that run.
test_setup_failures_leave_nothing()
{
    fx gn run "$WORK/base.ini" output.name=gn model.name=resnet18_gn model.groups=1000
    expect_rc "model.groups=1000" 1
    [ -e "$WORK/out/gn" ] && fail "model.groups=1000 left $WORK/out/gn ($(ls "$WORK/out/gn" | tr '\n' ' '))"
    cp "$WORK/p6.h5" "$WORK/badtest.h5"
    /usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: f['/test/labels'][3] = 99" "$WORK/badtest.h5" || { fail "cannot damage a label"; return; }
    fh 2 badtest "$WORK/base.ini" output.name=badtest data.path="$WORK/badtest.h5"
    expect_rc "a test label out of range" 2
    grep -q "out of range" "$WORK/badtest.err" || fail "damaged test rows: $(errline badtest)"
    [ -e "$WORK/out/badtest" ] && fail "damaged test rows left $WORK/out/badtest ($(ls "$WORK/out/badtest" | tr '\n' ' '))"
    cp "$WORK/p6.h5" "$WORK/badclient.h5"
    /usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: f['/clients/labels'][5] = 99" "$WORK/badclient.h5" || { fail "cannot damage a label"; return; }
    fx badclient run "$WORK/base.ini" output.name=badclient data.path="$WORK/badclient.h5"
    expect_rc "a client label out of range" 2
    [ -e "$WORK/out/badclient" ] && fail "damaged client rows left $WORK/out/badclient ($(ls "$WORK/out/badclient" | tr '\n' ' '))"
    fh 2 badtest2 "$WORK/base.ini" output.name=badtest fl.rounds=1
    expect_rc "retry with good data, no --force" 0
    # --force over a finished run: a setup error keeps the finished run
    cp "$WORK/out/badtest/run.h5" "$WORK/finished.h5"
    fx gnforce run "$WORK/base.ini" output.name=badtest fl.rounds=1 model.name=resnet18_gn model.groups=1000 --force
    expect_rc "--force with model.groups=1000" 1
    cmp -s "$WORK/finished.h5" "$WORK/out/badtest/run.h5" || fail "--force with a setup error removed the finished run"
}

# 3. Killed between making its folder and its first checkpoint: the plain rerun says --resume, and
#    --resume starts the run again (with the folder's config; other keys refused as usual).
test_resume_without_checkpoint()
{
    { FEDHET_TEST_KILL_POINT=setup fx kill run "$WORK/base.ini" output.name=early; } 2>/dev/null
    [ "$RC" -eq 0 ] && { fail "the run was not killed at setup"; return; }
    [ -e "$WORK/out/early/checkpoint.h5" ] && { fail "a checkpoint exists after a kill at setup"; return; }
    fx again run "$WORK/base.ini" output.name=early
    refused "a rerun over the killed run's folder" "--resume $WORK/out/early"
    fx lr run --resume "$WORK/out/early" train.lr=0.5
    refused "--resume train.lr=0.5 without a checkpoint" "lr"
    fx restart run --resume "$WORK/out/early"
    expect_rc "--resume without a checkpoint" 0 || return
    grep -q "has no checkpoint" "$WORK/restart.out" || fail "--resume does not say the run starts again"
    fx ref run "$WORK/base.ini" output.name=early_ref
    expect_rc "uninterrupted run" 0 || return
    same_state "$WORK/out/early_ref/run.h5" "$WORK/out/early/run.h5" "restarted vs uninterrupted"
    same_csv "$WORK/out/early_ref/metrics.csv" "$WORK/out/early/metrics.csv" "restarted vs uninterrupted"
    # a finished run that lost its checkpoint is not restarted over its run.h5
    rm "$WORK/out/early_ref/checkpoint.h5"
    cp "$WORK/out/early_ref/run.h5" "$WORK/early_ref.h5"
    fx lost run --resume "$WORK/out/early_ref"
    refused "--resume of a finished run without its checkpoint" "final model"
    cmp -s "$WORK/early_ref.h5" "$WORK/out/early_ref/run.h5" || fail "--resume without a checkpoint changed run.h5"
}

# 4. metrics.csv, clients.csv or log.txt replaced by a symbolic link: --resume refuses it naming the
#    file (exit 4), the link's target and the checkpoint unchanged.
test_symlinks_refused()
{
    fx base run "$WORK/base.ini" output.name=sym fl.rounds=2
    expect_rc "2 rounds" 0 || return
    local f
    for f in metrics.csv clients.csv log.txt; do
        rm -rf "$WORK/out/sym_$f"
        cp -r "$WORK/out/sym" "$WORK/out/sym_$f"
        echo "not yours" >"$WORK/victim_$f"
        rm "$WORK/out/sym_$f/$f"
        ln -s "$WORK/victim_$f" "$WORK/out/sym_$f/$f"
        fx "sym_$f" run --resume "$WORK/out/sym_$f" fl.rounds=3
        expect_rc "$f a symbolic link" 4
        grep -q "$f is a symbolic link" "$WORK/sym_$f.err" || fail "$f a symbolic link: $(errline "sym_$f")"
        [ "$(cat "$WORK/victim_$f")" = "not yours" ] || fail "$f a symbolic link: its target was written"
        cmp -s "$WORK/out/sym/checkpoint.h5" "$WORK/out/sym_$f/checkpoint.h5" || fail "$f a symbolic link: checkpoint changed"
    done
}

# 5. The SIGTERM line reads back, in a shell, as the one command that resumes the folder, whatever its
#    name holds (here a ';' and a space).
test_resume_line_quoted()
{
    local name="q b;touch X" line
    "$FEDHET" run "$WORK/base.ini" output.name="$name" fl.rounds=2000 fl.checkpoint_every=100000 train.epochs=5 \
        >"$WORK/quote.out" 2>"$WORK/quote.err" &
    local pid=$!
    BG_PIDS+=("$pid")
    if ! wait_rows "$WORK/out/$name/metrics.csv" 1 60 "$pid"; then fail "the run ended before its first round"; return; fi
    kill -TERM "$pid"
    wait "$pid"
    RC=$? LAST_TAG=quote
    expect_rc "after SIGTERM" 0 || return
    line=$(sed -n 's/.*Resume with: //p' "$WORK/quote.out" | head -1)
    [ -n "$line" ] || { fail "no 'Resume with' line"; return; }
    mkdir -p "$WORK/shell"
    local words
    words=$(cd "$WORK/shell" && eval "set -- $line" && printf '%s\n' "$@")
    [ -e "$WORK/shell/X" ] && fail "the resume line ran a second command: $line"
    [ "$(echo "$words" | tail -1)" = "$WORK/out/$name" ] || fail "the resume line's last word is not the folder: $line"
    [ "$(echo "$words" | head -3 | tr '\n' ' ')" = "fedhet run --resume " ] || fail "the resume line: $line"
}

# the build a checkpoint came from: its /meta code_version is what fedhet --version prints, the version and commit
test_code_version()
{
    local v c
    v=$("$FEDHET" --version) || { fail "fedhet --version failed"; return; }
    [[ "$v" =~ ^fedhet\ [0-9.]+\ \(([0-9a-f]{7,}(-dirty)?|unknown)\)$ ]] || { fail "fedhet --version: '$v'"; return; }
    fx ver run "$WORK/base.ini" output.name=ver fl.rounds=1
    expect_rc "a one-round run" 0 || return
    c=$(h5dump -a /meta/code_version "$WORK/out/ver/checkpoint.h5" 2>/dev/null | sed -n 's/^ *(0): *"\(.*\)".*/\1/p' | head -1)
    [ "$c" = "$v" ] || fail "the checkpoint's code_version '$c' is not fedhet --version's '$v'"
}

# 6. The memory line gives totals for the busiest client rank: 6 clients on the one client rank of -np 2, 3 of them
#    selected per round (fraction 0.5): 3 upload records; SCAFFOLD's persistent vector is held for the one client
#    being trained, and the line after it says what client-state.bin takes on disk.
test_memory_line()
{
    fh 2 mem "$WORK/base.ini" output.name=mem fl.rounds=1 algo.method=scaffold
    expect_rc "one round" 0 || return
    local line disk
    line=$(grep -m1 "memory per client rank" "$WORK/out/mem/log.txt")
    disk=$(grep -m1 "per-client state on disk" "$WORK/out/mem/log.txt")
    echo "$line" | grep -q "at most 6 clients each" || fail "memory line: not 6 clients per rank: $line"
    echo "$line" | grep -q "the persistent state of the client it trains [0-9.]* MiB" ||
        fail "memory line: no persistent state of the client being trained: $line"
    echo "$disk" | grep -q "client-state.bin, [0-9.]* MiB per client that has trained.*(6 clients: up to" ||
        fail "no line for client-state.bin: $disk"
    # "N x M MiB = T MiB" with T = N x M, within the rounding of M to 0.1
    echo "$line" | awk '
        function product(pat,   w, n) {
            if (!match($0, pat)) exit 1
            n = split(substr($0, RSTART, RLENGTH), w, " ")
            p = w[3] * w[5]
            t = w[n - 1]; count = w[3]
            return (p - t <= 0.05 * count + 0.05 && t - p <= 0.05 * count + 0.05) }
        { if (!product("upload records [0-9]+ x [0-9.]+ MiB = [0-9.]+ MiB") || count != 3) exit 1 }' ||
        fail "memory line: upload records not 3 x one record: $line"
    fh 2 memavg "$WORK/base.ini" output.name=memavg fl.rounds=1
    expect_rc "fedavg, one round" 0 || return
    grep -q "per-client state on disk" "$WORK/out/memavg/log.txt" && fail "fedavg has a line for per-client state"
    [ -e "$WORK/out/memavg/client-state.bin" ] && fail "fedavg wrote a client-state.bin"
    return 0
}

# 7. fedhet export and fedhet landscape build a saved run's model as the run did, from its config with the run's
#    schema: a zoo model with non-default [model] keys (resnet8 with GroupNorm of 4 groups), MOON's projection
#    head (proj_dim), and the inputs as the run normalised them ([data] normalise). The landscape's centre is the
#    run's final test loss; the exported graph, imported as a run's model and trained with a learning rate of
#    1e-12, has that test loss too.
test_saved_run_model()
{
    local tag args data centre want again
    for tag in gn moon raw; do
        data=()
        case $tag in
        gn) args=(model.name=resnet8 model.norm=gn model.groups=4 train.steps=1) ;;
        moon) args=(algo.method=moon algo.proj_dim=8) ;;
        raw) args=() data=(data.normalise=none) ;;
        esac
        fh 1 "run_$tag" "$WORK/base.ini" output.name="sm_$tag" fl.rounds=1 "${args[@]}" "${data[@]}"
        expect_rc "$tag: the run" 0 || continue
        want=$(column "$WORK/out/sm_$tag/metrics.csv" test_loss | tail -1)
        fx "ls_$tag" landscape "$WORK/out/sm_$tag/run.h5" dims=1 points=3 out="$WORK/ls_$tag"
        expect_rc "$tag: landscape" 0 || continue
        centre=$(h5dump -d "/loss[1;;1]" "$WORK/ls_$tag/landscape.h5" 2>/dev/null | sed -n 's/^ *(1): *\([-0-9.e+]*\).*/\1/p')
        close "$centre" "$want" 2e-5 || fail "$tag: the landscape's centre loss '$centre' is not the run's final test loss $want"
        fx "ex_$tag" export "$WORK/out/sm_$tag" "$WORK/sm_$tag.onnx"
        expect_rc "$tag: export" 0 || continue
        fh 1 "rt_$tag" "$WORK/base.ini" output.name="rt_$tag" fl.rounds=1 train.steps=1 train.lr=1e-12 train.momentum=0 \
            model.onnx="$WORK/sm_$tag.onnx" model.init=onnx "${data[@]}"
        expect_rc "$tag: a run of the exported model" 0 || continue
        again=$(column "$WORK/out/rt_$tag/metrics.csv" test_loss | tail -1)
        close "$again" "$want" 2e-5 || fail "$tag: the exported model's test loss $again is not the run's $want"
    done
}

TESTS=(folder_names setup_failures_leave_nothing resume_without_checkpoint symlinks_refused resume_line_quoted
       memory_line code_version saved_run_model)
run_tests "$@"
