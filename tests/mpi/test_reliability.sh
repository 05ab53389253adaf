#!/usr/bin/env bash
# Reliability under hostile conditions (docs/reliability.md): a full disk (a file-size limit at several
# sizes, and a small tmpfs when run as root) is exit 4 naming the file, never a crash, with the previous
# good files kept and --resume continuing bit-identically once there is room; one writer per run folder
# (two runs started at once with one name, two --resume at once, a run still writing, a lock left by a
# killed run); run folders that are symbolic links; a partition onto its own source; damaged run.h5 and
# checkpoints; a client rank failing in round 1; a partition file without /test; signal names.
# Every test runs on one rank (no mpirun) but for the client-rank failure, so that `make test-sanitizers`
# runs this script under ASan and UBSan.
# usage: tests/mpi/test_reliability.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
source "$(dirname "$0")/lib.sh"

# the system's Python, with h5py (an earlier python3 on PATH may lack it)
PY=/usr/bin/python3

setup() { setup_tiny; }

# limited KB TAG ARGS...: fx under a plain file-size limit of KB KiB (SIGXFSZ at its default, which kills:
# fedhet itself ignores it, so that a write past the limit fails with EFBIG as on a full disk). Open
# MPI's own shared-memory files would exceed the limit: its singleton is told to keep them small (hash
# store, no shared-memory transport).
limited()
{
    local kb=$1 tag=$2
    LAST_TAG=$tag
    shift 2
    (
        ulimit -f "$kb"
        export PMIX_MCA_gds=hash OMPI_MCA_btl=self,tcp
        exec timeout -k 5 "$RUN_LIMIT" "$FEDHET" "$@"
    ) >"$WORK/$tag.out" 2>"$WORK/$tag.err"
    RC=$?
}

# bg_fx TAG ARGS...: fedhet ARGS on one process in the background, bounded by RUN_LIMIT; BG: the timeout's
# pid (wait on it: the run's exit code), FH_PID: fedhet's own (to signal it, and the lock's holder)
bg_fx()
{
    local tag=$1 until=$(($(date +%s) + 10))
    shift
    timeout -k 5 "$RUN_LIMIT" "$FEDHET" "$@" >"$WORK/$tag.out" 2>"$WORK/$tag.err" &
    BG=$!
    BG_PIDS+=("$BG")
    FH_PID=""
    while [ -z "$FH_PID" ] && [ "$(date +%s)" -lt "$until" ]; do
        FH_PID=$(pgrep -P "$BG" | head -1)
        [ -n "$FH_PID" ] || sleep 0.02
    done
}

no_temporaries()
{
    local left
    left=$(find "$1" -name '*.tmp-*' 2>/dev/null | head -3 | tr '\n' ' ')
    [ -z "$left" ] || fail "$2: temporary files left: $left"
}

# every dataset of FILE.h5 reads back (h5dump checks Fletcher32)
readable() { h5dump "$1" >/dev/null 2>&1; }

test_full_disk_limit()
{
    local kb name
    # a shell started with SIGXFSZ ignored passes that on and cannot undo it: the test would prove nothing
    [ $((0x$(awk '/^SigIgn:/ { print $2 }' /proc/$BASHPID/status) & 0x1000000)) -eq 0 ] ||
        { fail "this shell ignores SIGXFSZ (inherited): start the test from one that does not"; return; }
    # 1 KiB: config.ini; 100 KiB: the checkpoint (at its flush); 300 KiB: the checkpoint, inside a dataset
    for kb in 1 100 300; do
        name=fs$kb
        limited "$kb" "$name" run "$WORK/base.ini" output.name=$name
        [ "$RC" -eq 139 ] && { fail "$kb KiB: crashed (exit 139)"; continue; }
        expect_rc "$kb KiB file-size limit" 4 || continue
        grep -q "error: $WORK/out/$name/[a-z0-9.]*: .*File too large" "$WORK/$name.err" ||
            fail "$kb KiB: the message does not name the file and the cause: $(errline $name)"
        grep -qi "sanitizer\|segmentation" "$WORK/$name.err" && fail "$kb KiB: $(grep -m1 -i 'sanitizer\|segmentation' "$WORK/$name.err")"
        # it failed before its first checkpoint: nothing to resume, so no folder
        [ -e "$WORK/out/$name" ] && fail "$kb KiB: the run folder stayed: $(ls -A "$WORK/out/$name" | tr '\n' ' ')"
    done
    # metrics.csv: rounds without checkpoints until the row that passes 2 KiB
    limited 2 fscsv run "$WORK/base.ini" output.name=fscsv fl.rounds=8 fl.checkpoint_every=0 fl.eval_every=100
    expect_rc "2 KiB, metrics.csv" 4 &&
        { grep -q "$WORK/out/fscsv/metrics.csv: cannot write: File too large" "$WORK/fscsv.err" ||
            fail "2 KiB: the message does not name metrics.csv: $(errline fscsv)"; }
    # a partition file that does not fit: exit 4, and the one it would replace is untouched
    cp "$WORK/p6.h5" "$WORK/keep.h5"
    limited 20 fspart partition "$WORK/idx" "$WORK/keep.h5" scheme=iid clients=3 partition_seed=2 classes=4 --force
    expect_rc "20 KiB, partition" 4 &&
        { grep -q "keep.h5: .*File too large" "$WORK/fspart.err" || fail "partition: the message does not name the file: $(errline fspart)"; }
    cmp -s "$WORK/p6.h5" "$WORK/keep.h5" || fail "partition: the previous file was changed"
    # --resume: its next checkpoint does not fit; the last one stays whole
    fx fsres run "$WORK/base.ini" output.name=fsres fl.rounds=2
    if expect_rc "a run to resume" 0; then
        limited 100 fsres2 run --resume "$WORK/out/fsres" fl.rounds=4
        expect_rc "100 KiB, --resume" 4 &&
            { grep -q "$WORK/out/fsres/checkpoint.h5: .*File too large" "$WORK/fsres2.err" ||
                fail "--resume: the message does not name the checkpoint: $(errline fsres2)"; }
        [ "$(rounds_done "$WORK/out/fsres/checkpoint.h5")" = 2 ] && readable "$WORK/out/fsres/checkpoint.h5" ||
            fail "--resume: round 2's checkpoint is not intact"
        # export: the ONNX file does not fit, and says why
        limited 1 fsexp export "$WORK/out/fsres" "$WORK/fs.onnx"
        expect_rc "1 KiB, export" 4 &&
            { grep -q "fs.onnx: cannot write: File too large" "$WORK/fsexp.err" ||
                fail "export: the message does not name the file and the cause: $(errline fsexp)"; }
        [ -e "$WORK/fs.onnx" ] && fail "export: a file was left at $WORK/fs.onnx"
    fi
    no_temporaries "$WORK/out" "file-size limit"
    no_temporaries "$WORK" "partition and export under a file-size limit"
}

# A tmpfs with room for one checkpoint but not for the next beside it: round 2's checkpoint fails, round 1's
# stays; with room again, --resume ends identical to an uninterrupted run. Needs root (CI runs as root).
test_full_disk_tmpfs()
{
    fx tmref run "$WORK/base.ini" output.name=tmref
    expect_rc "reference run" 0 || return
    local size mnt=$WORK/tmpfs
    size=$(stat -c %s "$WORK/out/tmref/checkpoint.h5")
    mkdir -p "$mnt"
    if ! mount -t tmpfs -o size=$((size * 3 / 2 + 65536)) tmpfs "$mnt" 2>"$WORK/mount.err"; then
        fail "cannot mount a tmpfs (this test needs root): $(head -1 "$WORK/mount.err")"
        return
    fi
    fx tmfull run "$WORK/base.ini" output.dir="$mnt" output.name=full
    if expect_rc "full tmpfs" 4; then
        grep -q "error: $mnt/full/checkpoint.h5: .*No space left on device" "$WORK/tmfull.err" ||
            fail "full tmpfs: the message does not name the checkpoint and the cause: $(errline tmfull)"
        [ "$(rounds_done "$mnt/full/checkpoint.h5")" = 1 ] && readable "$mnt/full/checkpoint.h5" ||
            fail "full tmpfs: round 1's checkpoint is not intact (rounds_done '$(rounds_done "$mnt/full/checkpoint.h5")')"
        no_temporaries "$mnt" "full tmpfs"
        mount -o remount,size=64m "$mnt" || fail "cannot grow the tmpfs"
        fx tmresume run --resume "$mnt/full"
        expect_rc "--resume with room again" 0 &&
            same_run_files "$WORK/out/tmref" "$mnt/full" "full tmpfs + --resume vs uninterrupted"
    fi
    umount "$mnt" || umount -l "$mnt"
}

# same_run_files REF DIR WHAT: run.h5's state and the CSVs (timing aside) equal
same_run_files()
{
    same_state "$1/run.h5" "$2/run.h5" "$3" && same_csv "$1/metrics.csv" "$2/metrics.csv" "$3" &&
        same_csv "$1/clients.csv" "$2/clients.csv" "$3"
}

# Two runs started at the same moment with one name (plain, and both with --force, where nothing but the
# lock keeps them apart): one runs, the other is refused (exit 1); the folder holds one whole run.
test_two_runs_one_name()
{
    # rounds long enough (about 3 s a run, most of it with the folder locked; a run starts in about 1 s) that
    # runs started together overlap even on a busy machine
    fx oneref run "$WORK/base.ini" output.name=oneref train.epochs=300
    expect_rc "reference run" 0 || return
    local i a b force until
    for i in 1 2; do
        force=""
        [ $i = 2 ] && force=--force
        "$FEDHET" run "$WORK/base.ini" output.name=twin$i train.epochs=300 $force >"$WORK/twinA$i.out" 2>"$WORK/twinA$i.err" &
        local pa=$!
        # try 1 starts both at once: whatever the timing, one finds the folder made or held. Try 2 (--force,
        # which may replace a finished run) starts the second while the first holds the folder's lock, which a
        # start at the same moment cannot promise on a loaded machine.
        if [ $i = 2 ]; then
            until=$(($(date +%s) + 60))
            while [ ! -f "$WORK/out/twin2/.lock" ] && kill -0 $pa 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do
                sleep 0.02
            done
        fi
        "$FEDHET" run "$WORK/base.ini" output.name=twin$i train.epochs=300 $force >"$WORK/twinB$i.out" 2>"$WORK/twinB$i.err" &
        local pb=$!
        wait $pa; a=$?
        wait $pb; b=$?
        if ! { [ $a = 0 ] && [ $b = 1 ]; } && ! { [ $a = 1 ] && [ $b = 0 ]; }; then
            fail "try $i: exit codes $a and $b, expected one 0 and one 1"
            continue
        fi
        grep -qE "already exists|is in use by pid [0-9]+ on host" "$WORK/twinA$i.err" "$WORK/twinB$i.err" ||
            fail "try $i: the refused run does not say why"
        same_run_files "$WORK/out/oneref" "$WORK/out/twin$i" "try $i: the surviving run vs a lone one"
    done
}

# A run still writing its folder: --resume, --force and report exit 1 naming its pid and host; killed, its
# lock is free and --resume continues it.
test_one_writer()
{
    bg_fx busy run "$WORK/base.ini" output.name=busy fl.rounds=100000 train.epochs=3
    local pid=$FH_PID
    if ! wait_rows "$WORK/out/busy/metrics.csv" 1 60 "$BG"; then
        fail "the long run ended or stalled before its first row: $(tail -2 "$WORK/busy.out" | tr '\n' ' ')"
        return
    fi
    local host
    host=$(hostname)
    fx busyR run --resume "$WORK/out/busy"
    expect_rc "--resume of a folder in use" 1 &&
        { grep -q "in use by pid $pid on host $host" "$WORK/busyR.err" || fail "--resume: holder not named: $(errline busyR)"; }
    fx busyF run "$WORK/base.ini" output.name=busy --force
    expect_rc "--force on a folder in use" 1 &&
        { grep -q "in use by pid $pid on host $host" "$WORK/busyF.err" || fail "--force: holder not named: $(errline busyF)"; }
    fx busyP report "$WORK/out/busy"
    expect_rc "report into a folder in use" 1 &&
        { grep -q "in use by pid $pid on host $host" "$WORK/busyP.err" || fail "report: holder not named: $(errline busyP)"; }
    kill -KILL "$pid"
    wait "$BG" 2>/dev/null
    # the killed run's lock died with it; its checkpoint (if any) is continued, else the run restarts
    fx busyAfter run --resume "$WORK/out/busy" fl.rounds=2
    [ "$RC" -eq 0 ] || [ "$RC" -eq 1 ] && grep -q "in use" "$WORK/busyAfter.err" &&
        fail "--resume after the holder was killed: the stale lock was not taken over"
}

# Two --resume of one folder at once: one continues it, the other is refused or finds it done; metrics.csv
# gains no stray row and loses none.
test_two_resumes()
{
    fx r6 run "$WORK/base.ini" output.name=r6 fl.rounds=12
    expect_rc "12 rounds" 0 || return
    fx r3 run "$WORK/base.ini" output.name=r3
    expect_rc "3 rounds" 0 || return
    "$FEDHET" run --resume "$WORK/out/r3" fl.rounds=12 >"$WORK/rA.out" 2>"$WORK/rA.err" &
    local pa=$!
    "$FEDHET" run --resume "$WORK/out/r3" fl.rounds=12 >"$WORK/rB.out" 2>"$WORK/rB.err" &
    local pb=$! a b
    wait $pa; a=$?
    wait $pb; b=$?
    [ $a -le 1 ] && [ $b -le 1 ] && [ $((a + b)) -le 1 ] || fail "exit codes $a and $b (expected 0 and 0 or 1)"
    [ $((a + b)) = 1 ] && { grep -q "is in use by pid [0-9]* on host" "$WORK/rA.err" "$WORK/rB.err" ||
        fail "the refused --resume does not name the holder: $(errline rA) $(errline rB)"; }
    # both 0 is right only when one came after the other had finished
    [ $((a + b)) = 0 ] && { grep -q "all 12 rounds are done" "$WORK/rA.out" "$WORK/rB.out" ||
        fail "both --resume continued the run at once"; }
    same_run_files "$WORK/out/r6" "$WORK/out/r3" "3 rounds + two concurrent --resume vs 12 rounds"
}

# Output names that are symbolic links: refused with and without --force; the run linked to is untouched.
test_symlink_folder()
{
    fx real run "$WORK/base.ini" output.name=real
    expect_rc "the real run" 0 || return
    cp "$WORK/out/real/run.h5" "$WORK/real-run.h5"
    ln -s "$WORK/out/real" "$WORK/out/alias"
    fx aliasF run "$WORK/base.ini" output.name=alias --force
    expect_rc "--force on a symbolic link" 1 &&
        { grep -q "symbolic link" "$WORK/aliasF.err" || fail "--force: $(errline aliasF)"; }
    fx alias run "$WORK/base.ini" output.name=alias
    expect_rc "a symbolic link without --force" 1
    cmp -s "$WORK/real-run.h5" "$WORK/out/real/run.h5" || fail "the linked run's run.h5 changed"
    [ -L "$WORK/out/alias" ] || fail "the link was replaced"
    # a partition onto its own source (by name, or through a link)
    cp "$WORK/p6.h5" "$WORK/src.h5"
    ln -s "$WORK/src.h5" "$WORK/srclink.h5"
    fx selfpart partition "$WORK/src.h5" "$WORK/src.h5" scheme=iid clients=2 classes=4 --force
    expect_rc "partition SRC SRC --force" 1 &&
        { grep -q "is the source" "$WORK/selfpart.err" || fail "partition SRC SRC: $(errline selfpart)"; }
    fx linkpart partition "$WORK/src.h5" "$WORK/srclink.h5" scheme=iid clients=2 classes=4 --force
    expect_rc "partition SRC LINK-TO-SRC --force" 1
    cmp -s "$WORK/p6.h5" "$WORK/src.h5" || fail "the source was replaced"
}

# An empty or truncated run.h5 newer than the checkpoint: --resume rebuilds it from the final checkpoint;
# report refuses it (exit 4); without a valid checkpoint --resume exits 4 naming it; landscape refuses a
# damaged checkpoint.
test_damaged_run_file()
{
    fx dmg run "$WORK/base.ini" output.name=dmg
    expect_rc "the run" 0 || return
    cp -r "$WORK/out/dmg" "$WORK/dmg-ref"
    local how
    for how in empty truncated flipped; do
        case $how in
        empty) : >"$WORK/out/dmg/run.h5" ;;
        truncated) head -c 20000 "$WORK/dmg-ref/run.h5" >"$WORK/out/dmg/run.h5" ;;
        flipped)
            cp "$WORK/dmg-ref/run.h5" "$WORK/out/dmg/run.h5"
            dump_global "$WORK/dmg-ref/run.h5" "$WORK/g.bin" &&
                python3 "$HERE/flip_data.py" "$WORK/out/dmg/run.h5" "$WORK/g.bin" 2 >/dev/null ||
                { fail "flipped: cannot damage /server/global"; continue; } ;;
        esac
        touch "$WORK/out/dmg/run.h5" # newer than the checkpoint
        if [ $how = empty ]; then
            fx dmgReport report "$WORK/out/dmg"
            expect_rc "report on an empty run.h5" 4 &&
                { grep -q "dmg/run.h5" "$WORK/dmgReport.err" || fail "report: the file is not named: $(errline dmgReport)"; }
        fi
        fx dmg_$how run --resume "$WORK/out/dmg"
        expect_rc "$how run.h5: --resume" 0 || continue
        grep -q "writing it from the final checkpoint" "$WORK/dmg_$how.out" || fail "$how: no rebuild message"
        cmp -s "$WORK/dmg-ref/run.h5" "$WORK/out/dmg/run.h5" || fail "$how: the rebuilt run.h5 differs from the original"
    done
    # a damaged checkpoint: --resume and landscape exit 4 naming it; with no checkpoint, a damaged run.h5 too
    head -c 20000 "$WORK/dmg-ref/checkpoint.h5" >"$WORK/out/dmg/checkpoint.h5"
    fx dmgCk run --resume "$WORK/out/dmg" fl.rounds=4
    expect_rc "--resume from a truncated checkpoint" 4 &&
        { grep -q "dmg/checkpoint.h5" "$WORK/dmgCk.err" || fail "truncated checkpoint not named: $(errline dmgCk)"; }
    fx dmgLand landscape "$WORK/out/dmg/checkpoint.h5" points=3
    expect_rc "landscape on a truncated checkpoint" 4
    rm "$WORK/out/dmg/checkpoint.h5"
    : >"$WORK/out/dmg/run.h5"
    fx dmgNone run --resume "$WORK/out/dmg"
    expect_rc "empty run.h5, no checkpoint" 4 &&
        { grep -q "dmg/run.h5 is damaged" "$WORK/dmgNone.err" || fail "no checkpoint: $(errline dmgNone)"; }
}

# fedhet grid --resume: a member whose run.h5 is damaged is resumed and its run.h5 rebuilt, identical.
test_damaged_grid_member()
{
    { cat "$WORK/base.ini"; printf '\n[grid]\ntrain.lr = 0.05, 0.1\n'; } >"$WORK/sweep.ini"
    fg 1 gd "$WORK/sweep.ini" output.name=gd
    expect_rc "the grid" 0 || return
    local m
    m=$(dirname "$(find "$WORK/out/gd" -name run.h5 | sort | head -1)")
    [ -d "$m" ] || { fail "no member with a run.h5"; return; }
    cp "$m/run.h5" "$WORK/gd-run.h5"
    head -c 10000 "$WORK/gd-run.h5" >"$m/run.h5"
    fg 1 gdr --resume "$WORK/out/gd"
    expect_rc "grid --resume with a truncated run.h5" 0 || return
    cmp -s "$WORK/gd-run.h5" "$m/run.h5" || fail "the member's run.h5 was not rebuilt as it was"
}

# A client rank failing alone in round 1 (injected: it ends the job through MPI_Abort): no checkpoint yet,
# so the run folder goes.
test_client_failure_folder()
{
    MPI_X=(-x FEDHET_TEST_FAIL_RANK=2 -x FEDHET_TEST_FAIL_ROUND=0)
    RUN_LIMIT=30 fh 3 cbad "$WORK/base.ini" output.name=cbad
    MPI_X=()
    expect_rc "rank 2 failing in round 1" 2
    grep -q "rank 2 failed: .*failure injected" "$WORK/cbad.err" || fail "rank 2's message is missing: $(errline cbad)"
    [ -e "$WORK/out/cbad" ] && fail "the run folder stayed: $(ls -A "$WORK/out/cbad" | tr '\n' ' ')"
    return 0
}

# A partition file without /test runs only when evaluation is off; float labels are named as such.
test_partition_contents()
{
    cp "$WORK/p6.h5" "$WORK/notest.h5"
    cp "$WORK/p6.h5" "$WORK/floatlab.h5"
    $PY - "$WORK/notest.h5" "$WORK/floatlab.h5" <<'EOF' || { fail "h5py cannot edit the copies"; return; }
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    del f["test"]
with h5py.File(sys.argv[2], "r+") as f:
    lab = f["clients/labels"][...].astype(np.float32)
    del f["clients/labels"]
    f["clients/labels"] = lab
EOF
    fx notest run "$WORK/base.ini" data.path="$WORK/notest.h5" output.name=notest
    expect_rc "no /test" 2 && { grep -q "notest.h5 has no test set" "$WORK/notest.err" || fail "no /test: $(errline notest)"; }
    [ -e "$WORK/out/notest" ] && fail "no /test: the run folder was made"
    fx notest0 run "$WORK/base.ini" data.path="$WORK/notest.h5" output.name=notest0 fl.eval_every=0
    expect_rc "no /test, fl.eval_every = 0" 0
    fx floatlab run "$WORK/base.ini" data.path="$WORK/floatlab.h5" output.name=floatlab
    expect_rc "float labels" 2
    grep -q "0-byte" "$WORK/floatlab.err" && fail "float labels: $(errline floatlab)"
    grep -q "must be an integer (found 4-byte float)" "$WORK/floatlab.err" || fail "float labels: $(errline floatlab)"
}

# What a partition leaves behind: interrupted by SIGINT or SIGTERM, nothing (it removes its temporary and dies of
# the signal, 128 + signal); killed by SIGKILL, its temporary, which the next partition of the same file removes,
# saying so; failing on a constant channel with normalise=file, nothing (the file is refused before it is put
# in place).
test_partition_leftovers()
{
    local P=$WORK/parts # its own folder: other tests leave killed runs' temporaries in $WORK/out
    mkdir -p "$WORK/big" "$WORK/const" "$P"
    # 60000 random 32x32 images: about 2 s of writing at deflate 9, time enough to signal it mid-write
    $PY - "$WORK/big" "$WORK/const" <<'EOF' || { fail "cannot write the .npy sources"; return; }
import sys, numpy as np
r = np.random.default_rng(0)
np.save(sys.argv[1] + "/x_train.npy", r.integers(0, 256, (60000, 32, 32, 1), dtype=np.uint8))
np.save(sys.argv[1] + "/y_train.npy", r.integers(0, 4, 60000))
np.save(sys.argv[2] + "/x_train.npy", np.zeros((40, 8, 8, 1), dtype=np.uint8))
np.save(sys.argv[2] + "/y_train.npy", np.arange(40) % 4)
EOF
    local sig code until dst=$P/sig.h5
    for sig in INT TERM KILL; do
        rm -f "$dst" "$dst".tmp-*
        bg_fx part$sig partition "$WORK/big" "$dst" scheme=iid clients=4 deflate=9
        until=$(($(date +%s) + 30))
        while ! compgen -G "$dst.tmp-*" >/dev/null && kill -0 "$FH_PID" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do
            sleep 0.01
        done
        kill -$sig "$FH_PID"
        wait "$BG"
        RC=$? LAST_TAG=part$sig
        code=$((128 + $(kill -l $sig)))
        expect_rc "partition, SIG$sig while it writes" $code || continue
        [ -e "$dst" ] && fail "SIG$sig: $dst was written"
        [ $sig = KILL ] || no_temporaries "$P" "partition, SIG$sig"
    done
    # the temporary SIGKILL left is removed by the next partition of that file
    local left
    left=$(compgen -G "$dst.tmp-*")
    if [ -z "$left" ]; then
        fail "SIGKILL left no temporary to clean up (was the partition done before the signal?)"
    else
        fx partAfter partition "$WORK/big" "$dst" scheme=iid clients=4 deflate=0
        expect_rc "partition after a killed one" 0 &&
            { grep -q "removed $left: a temporary left by process [0-9]*, which no longer runs" "$WORK/partAfter.err" ||
                fail "the stale temporary is not reported: $(head -2 "$WORK/partAfter.err")"; }
        no_temporaries "$P" "the partition after a killed one"
    fi
    fx partConst partition "$WORK/const" "$P/const.h5" scheme=iid clients=2
    expect_rc "a constant channel with normalise=file" 2 &&
        { grep -q "channel 0 has mean 0 and std 0" "$WORK/partConst.err" || fail "constant channel: $(errline partConst)"; }
    [ -e "$P/const.h5" ] && fail "a constant channel: $P/const.h5 was written"
    no_temporaries "$P" "constant channel"
}

# SIGINT (Ctrl-C) and SIGUSR1 stop a run as SIGTERM does (checkpoint, resume line, exit 0), named as they are.
test_signal_names()
{
    local sig
    for sig in INT USR1; do
        bg_fx sig$sig run "$WORK/base.ini" output.name=sig$sig fl.rounds=100000 fl.checkpoint_every=100000
        if ! wait_rows "$WORK/out/sig$sig/metrics.csv" 1 60 "$BG"; then fail "$sig: no first row"; continue; fi
        kill -$sig "$FH_PID"
        wait "$BG"
        RC=$?
        LAST_TAG=sig$sig
        expect_rc "SIG$sig" 0 || continue
        grep -q "stopped by SIG$sig after round .*Resume with: fedhet run --resume" "$WORK/sig$sig.out" ||
            fail "$sig: no resume line naming SIG$sig: $(tail -1 "$WORK/sig$sig.out")"
        readable "$WORK/out/sig$sig/checkpoint.h5" || fail "$sig: no readable checkpoint"
    done
}

TESTS=(full_disk_limit full_disk_tmpfs two_runs_one_name one_writer two_resumes symlink_folder damaged_run_file
       damaged_grid_member client_failure_folder partition_contents partition_leftovers signal_names)

run_tests "$@"
