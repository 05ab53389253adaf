#!/usr/bin/env bash
# The reproduction study's paper-scale grids (inputs/repro/paper/*.ini, docs/reproduction.md "Paper scale"):
# every claim the study marks reduced horizon or reduced local work has one, at the paper's own rounds
# (tests/mpi/test_repro.sh checks every member's config and selector, as for the study's grids); each grid
# runs for one round (its last member, on a tiny synthetic set with the mlp: the grids' own keys otherwise);
# jobs/repro-paper.sbatch is valid shell and names the grids when given an unknown one.
# usage: tests/mpi/test_repro_paper.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
PAPER=$ROOT/inputs/repro/paper

setup()
{
    [ -x "$PY" ] || { echo "$PY is missing: run make deps (package python3)"; return 1; }
    [ -d "$PAPER" ] || { echo "$PAPER is missing"; return 1; }
}

# grid:rounds, the papers' horizons (spec reported-results.md); the claims each grid covers are in its header
EXPECTED="T2:15 S1:15 T7:2000 T8:2000 T9:2000 S6:2000 T10:300 S5:300 T12:300 T13:500 T14:500"

test_paper_grids_cover_claims()
{
    local e g r got
    for e in $EXPECTED; do
        g=${e%%:*} r=${e#*:}
        [ -f "$PAPER/$g.ini" ] || { fail "inputs/repro/paper/$g.ini is missing"; continue; }
        got=$(sed -n 's/^rounds *= *\([0-9]*\).*/\1/p' "$PAPER/$g.ini")
        [ "$got" = "$r" ] || fail "paper/$g.ini: rounds $got, the paper's horizon is $r"
    done
    # every claim marked reduced horizon / reduced local work is named by a paper grid's header
    local claim
    for claim in $(awk -F, '/,reduced (horizon|local work),/ { print $1 }' "$ROOT/docs/repro/claims.csv"); do
        case $claim in
            S1-fedscam) grep -q '^; S1 for FedSCAM' "$PAPER/S1.ini" || fail "no paper grid for S1 (FedSCAM)" ;;
            S1-afedsam) grep -q 'S1 for A-FedSAM' "$PAPER/T12.ini" || fail "no paper grid for S1 (A-FedSAM)" ;;
            *) grep -lq "^; .*\b$claim\b.*(reduced" "$PAPER"/*.ini || fail "no paper grid names claim $claim" ;;
        esac
    done
}

# one round of the last member of each grid (its last method, partition and seed): the grid's keys (method,
# local epochs, schedules, partition scheme) on a 12x12 synthetic 10-class set, the mlp for speed
test_paper_grids_one_round()
{
    "$PY" "$HERE/make_idx.py" "$WORK/idx" 3000 200 12 10 || { fail "make_idx.py failed"; return; }
    local g name n i
    for g in "$PAPER"/*.ini; do
        name=$(basename "$g" .ini)
        sed -e "s#inputs/data/#$WORK/data/#g" -e "s#^source = fashion-mnist#source = $WORK/idx#" \
            -e "s#^dir = outputs#dir = $WORK/out#" "$g" >"$WORK/$name.ini"
        n=$("$FEDHET" grid "$WORK/$name.ini" --count 2>"$WORK/$name.err") || { fail "$name: --count: $(head -2 "$WORK/$name.err")"; continue; }
        i=$((n - 1))
        timeout -k 5 60 mpirun --oversubscribe -np 1 "$FEDHET" grid "$WORK/$name.ini" --member "$i" \
            fl.rounds=1 model.name=mlp data.min_size=1 >"$WORK/$name.out" 2>&1 ||
            { fail "paper/$name member $i: exit $?: $(tail -3 "$WORK/$name.out")"; continue; }
        grep -q "1 done, 0 failed" "$WORK/$name.out" || fail "paper/$name member $i did not finish: $(tail -2 "$WORK/$name.out")"
        # the member's round: metrics.csv has round 0 and nothing after it
        [ "$(awk -F, 'FNR > 1 { print $1 }' "$WORK"/out/"$name"/*/metrics.csv | sort -u | tr '\n' ' ')" = "0 " ] ||
            fail "paper/$name: rounds other than the one asked for: $(awk -F, 'FNR > 1 { print $1 }' "$WORK"/out/"$name"/*/metrics.csv | sort -u | tr '\n' ' ')"
    done
}

test_sbatch_job()
{
    local job=$ROOT/jobs/repro-paper.sbatch
    bash -n "$job" || { fail "jobs/repro-paper.sbatch is not valid shell"; return; }
    grep -q '^#SBATCH --signal=TERM@' "$job" || fail "the job does not ask for SIGTERM before its limit (no checkpoint)"
    (cd "$ROOT" && bash "$job" NO_SUCH) >"$WORK/job.out" 2>&1 && fail "the job accepted an unknown grid"
    grep -q "unknown grid 'NO_SUCH'; the grids are: .*T7" "$WORK/job.out" || fail "no list of the grids: $(head -2 "$WORK/job.out")"
}

TESTS=(paper_grids_cover_claims paper_grids_one_round sbatch_job)
run_tests "$@"
