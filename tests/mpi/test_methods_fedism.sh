#!/usr/bin/env bash
# End-to-end tests of the 'fedism' method family (docs/methods/sam.md §12: fedism, fedismplus) under mpirun
# with 3 ranks on the tiny synthetic set of tests/mpi/lib.sh: the radius each round's local steps apply follows
# rho(t) = rho_max ((t + 1)/T)^tau (metrics.csv perturb_norm and rho); the clients' scores and the first SAGA
# weights in clients.csv; SAGA with q = 0 (and with no sharpness at radius 0) is uniform averaging bit for bit;
# the switches change the model; the SAGA state in the checkpoint; bit-identical resume; the clean/corrupted
# message and metrics; bad keys.
# usage: tests/mpi/test_methods_fedism.sh [test_name]      (last line: "N passed, N failed")
source "$(dirname "$0")/lib.sh"

setup()
{
    setup_tiny || return 1
    "$FEDHET" partition "$WORK/idx" "$WORK/pq.h5" scheme=dirichlet alpha=0.5 clients=6 min_size=5 partition_seed=1 classes=4 \
        corruption=gaussian_noise severity=5 corrupted=2 >"$WORK/pq.out" 2>&1 || { cat "$WORK/pq.out"; return 1; }
}

# radius_is RUN WHAT RHO...: metrics.csv perturb_norm (the clients' mean ||eps|| over their SAM steps, = the
# radius up to the float rounding of rho g/(||g|| + 1e-12)) equals the given radius of every round, and so
# does the column rho (the radius the clients report, printed to 10 digits)
radius_is()
{
    local run=$1 what=$2
    shift 2
    paste -d, <(metric_values "$run" perturb_norm) <(printf '%s\n' "$@") <(metric_values "$run" rho) |
        awk -F, '{ d = $1 - $2; e = $3 - $2
                   if ($1 == "" || $2 == "" || d > 1e-6 * $2 || d < -1e-6 * $2) { print "round " NR ": " $1 " vs " $2; bad = 1 }
                   if ($3 == "" || e > 1e-9 * $2 || e < -1e-9 * $2) { print "round " NR ": rho " $3 " vs " $2; bad = 1 } }
                 END { if (NR != '$#') { print NR " rows"; bad = 1 } exit bad }' >"$WORK/radius.check" ||
        fail "$what: perturb_norm or rho is not rho(t): $(head -3 "$WORK/radius.check" | tr '\n' ' ')"
}

# ---- the radius (docs/methods/sam.md §12, Eq. 12) ------------------------------------------------------------------------

# FedISM+ rho(t) = rho_max ((t + 1)/T)^tau, here with SAM steps: T = fl.rounds = 3 (tau 0.5 and 2), T =
# horizon = 6 in a 3-round run; FedISM's radius is rho every round; the default GSAM steps have the same ||eps||
test_radius_schedule()
{
    local r
    fh 3 rs1 "$WORK/base.ini" output.name=rs1 algo.method=fedismplus algo.perturb=sam
    expect_rc "fedismplus tau 0.5" 0 &&
        radius_is rs1 "tau 0.5, T 3" $(for r in 1 2 3; do awk -v t=$r 'BEGIN { printf "%.17g\n", 0.1 * (t / 3) ^ 0.5 }'; done)
    fh 3 rs2 "$WORK/base.ini" output.name=rs2 algo.method=fedismplus algo.perturb=sam algo.tau=2 algo.rho_max=0.3
    expect_rc "fedismplus tau 2" 0 &&
        radius_is rs2 "tau 2, T 3" $(for r in 1 2 3; do awk -v t=$r 'BEGIN { printf "%.17g\n", 0.3 * (t / 3) ^ 2 }'; done)
    fh 3 rs3 "$WORK/base.ini" output.name=rs3 algo.method=fedismplus algo.horizon=6
    expect_rc "fedismplus horizon 6, gsam" 0 &&
        radius_is rs3 "gsam, tau 0.5, T 6" $(for r in 1 2 3; do awk -v t=$r 'BEGIN { printf "%.17g\n", 0.1 * (t / 6) ^ 0.5 }'; done)
    fh 3 rs4 "$WORK/base.ini" output.name=rs4 algo.method=fedism algo.perturb=sam
    expect_rc "fedism" 0 && radius_is rs4 "fedism rho 0.05" 0.05 0.05 0.05
}

# ---- SAGA (docs/methods/sam.md §12, Eqs. 16-18) --------------------------------------------------------------------------

# q = 0: every SAGA weight is 1/m; with radius 0 the SAM step is the SGD step, so FedISM+ is uniform averaging
# bit for bit (the moving average keeps a_i exactly, any beta, partial participation); radius 0 alone gives
# S_i = 1e-10 for all, so also q = 2; and full participation. A positive radius, or SAGA-L (losses differ),
# makes the weights non-uniform.
test_q0_is_uniform()
{
    equal_runs "fedismplus q=0 rho_max=0 sam vs uniform" 3 \
        "algo.method=fedismplus algo.q=0 algo.rho_max=0 algo.perturb=sam" "algo.method=uniform"
    equal_runs "fedism q=0 rho=0 beta=0.3 sam vs uniform" 3 \
        "algo.method=fedism algo.q=0 algo.rho=0 algo.beta=0.3 algo.perturb=sam algo.saga=loss" "algo.method=uniform"
    equal_runs "fedism rho=0 q=2 (S = 1e-10 for all) vs uniform, all clients" 3 \
        "algo.method=fedism algo.rho=0 algo.perturb=sam fl.selection=all" "algo.method=uniform fl.selection=all"
    differ_runs "fedism rho=0 saga=loss vs uniform" 3 "algo.method=fedism algo.rho=0 algo.perturb=sam algo.saga=loss" \
        "algo.method=uniform"
    # the weights in clients.csv: all 1/3 with q = 0, not all equal with q = 2
    local w
    w=$(column "$WORK/out/eqfedismplus_q_0_rho_max_0_sam_vs_uniform_A/clients.csv" weight | sort -u)
    [ "$(echo "$w" | wc -l)" = 1 ] && awk -v w="$w" 'BEGIN { exit !(w > 0.3333333 && w < 0.3333334) }' ||
        fail "q = 0: clients.csv weights are not all 1/3: $(echo $w | cut -c1-200)"
    [ "$(column "$WORK/out/dffedism_rho_0_saga_loss_vs_uniform_A/clients.csv" weight | sort -u | wc -l)" -gt 1 ] ||
        fail "saga = loss: the weights are uniform"
}

# clients.csv: saga_score = max(l1 - l0, 1e-10) (S) or l1 (L), l1 > l0, rho = rho(t) for every client of the
# round; with all clients, round 1's weights are the first-appearance SAGA weights S_i^2 / sum_j S_j^2 (q = 2,
# no sample counts)
test_client_columns()
{
    local v
    for v in sharpness loss; do
        fh 3 cc$v "$WORK/base.ini" output.name=cc$v algo.method=fedismplus algo.saga=$v fl.selection=all fl.rounds=2
        expect_rc "fedismplus saga=$v" 0 || continue
        awk -F, -v v=$v '
            NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
            { s = $c["saga_score"]; l0 = $c["l0"]; l1 = $c["l1"]; r = $c["rho"]; t = $c["round"]
              want = v == "loss" ? l1 : (l1 - l0 > 1e-10 ? l1 - l0 : 1e-10)
              if (s - want > 2e-9 || want - s > 2e-9 || !(l1 > l0)) { print "row " NR ": score " s " l0 " l0 " l1 " l1; bad = 1 }
              rt = 0.1 * sqrt((t + 1) / 2); if (r - rt > 1e-9 || rt - r > 1e-9) { print "row " NR ": rho " r " vs " rt; bad = 1 }
              if (t == 0) { w[NR] = $c["weight"]; q[NR] = s * s; sq += s * s } }
            END { for (i in w) if (w[i] - q[i] / sq > 1e-6 || q[i] / sq - w[i] > 1e-6) { print "weight " w[i] " vs " q[i] / sq; bad = 1 }
                  if (NR != 13) { print NR - 1 " rows"; bad = 1 } exit bad }' "$WORK/out/cc$v/clients.csv" >"$WORK/cc.check" ||
            fail "saga=$v clients.csv: $(head -3 "$WORK/cc.check" | tr '\n' ' ')"
    done
}

# the variants change the model: S vs L, q, beta, GSAM vs SAM, FedISM vs FedISM+, a cap on the score's rows
# (a cap above every client's size is no cap)
test_switches()
{
    equal_runs "score_rows above every client vs all rows" 3 "algo.method=fedismplus algo.score_rows=100000" \
        "algo.method=fedismplus"
    differ_runs "score_rows 20 vs all rows" 3 "algo.method=fedismplus algo.score_rows=20" "algo.method=fedismplus"
    differ_runs "saga sharpness vs loss" 3 "algo.method=fedismplus" "algo.method=fedismplus algo.saga=loss"
    differ_runs "q 2 vs 0" 3 "algo.method=fedism fl.selection=all" "algo.method=fedism algo.q=0 fl.selection=all"
    differ_runs "beta 0.5 vs 1" 3 "algo.method=fedism" "algo.method=fedism algo.beta=1"
    differ_runs "gsam vs sam" 3 "algo.method=fedismplus" "algo.method=fedismplus algo.perturb=sam"
    differ_runs "fedism vs fedismplus" 3 "algo.method=fedism algo.rho=0.1" "algo.method=fedismplus"
}

# /server/scalars: a_k > 0 and the flag 1 for exactly the clients that were aggregated (clients.csv), a_k = 0
# and flag 0 for the others; with all clients a sums to 1 (the moving average of distributions)
test_saga_state()
{
    local ran f
    fh 3 st "$WORK/base.ini" output.name=st algo.method=fedismplus fl.rounds=2
    expect_rc "fedismplus 2 rounds" 0 || return
    dump_dataset "$WORK/out/st/run.h5" /server/scalars "$WORK/sc.bin" || { fail "cannot read /server/scalars"; return; }
    ran=$(column "$WORK/out/st/clients.csv" client | sort -n -u | tr '\n' ' ')
    python3 - "$WORK/sc.bin" "$ran" >"$WORK/st.check" <<'EOF' || fail "SAGA state: $(head -2 "$WORK/st.check" | tr '\n' ' ')"
import struct, sys
b = open(sys.argv[1], "rb").read()
v = struct.unpack("<%dd" % (len(b) // 8), b)
K = len(v) // 2
ran = set(int(x) for x in sys.argv[2].split())
bad = len(v) != 12
for k in range(K):
    if (k in ran) != (v[K + k] == 1.0) or (k in ran) != (v[k] > 0) or (k not in ran and (v[k] != 0 or v[K + k] != 0)):
        bad = True
print("K=%d ran=%s a=%s seen=%s" % (K, sorted(ran), v[:K], v[K:]))
sys.exit(1 if bad or len(ran) == K else 0)
EOF
    fh 3 stall "$WORK/base.ini" output.name=stall algo.method=fedism fl.selection=all
    expect_rc "fedism all clients" 0 || return
    dump_dataset "$WORK/out/stall/run.h5" /server/scalars "$WORK/sc2.bin" || { fail "cannot read /server/scalars"; return; }
    python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read(); v = struct.unpack("<%dd" % (len(b) // 8), b); K = len(v) // 2
sys.exit(0 if abs(sum(v[:K]) - 1) < 1e-12 and all(x == 1.0 for x in v[K:]) and len(set(v[:K])) > 1 else 1)' "$WORK/sc2.bin" ||
        fail "all clients: a does not sum to 1 or is uniform"
}

# 4 rounds straight on 3 ranks == 2 rounds + --resume on 2 ranks (the SAGA state a_k and flags included);
# FedISM+ with horizon = 4 so that the 2-round run has the same schedule
test_resume()
{
    resume_identical "fedism" algo.method=fedism
    resume_identical "fedismplus L horizon 4" algo.method=fedismplus algo.saga=loss algo.horizon=4
}

# ---- evaluation (baselines-and-protocols C.5, C.6) -------------------------------------------------------

# without a corrupted test set FedISM(+) runs and says once that the clean/corrupted comparison is off (FedAvg
# says nothing); with one, no message and the corrupted metrics and client-level stds are filled
test_corrupted_message()
{
    local pat='no corrupted test set'
    fh 3 msg "$WORK/base.ini" output.name=msg algo.method=fedismplus fl.rounds=1
    expect_rc "fedismplus on clean data" 0 || return
    [ "$(grep -c -- "$pat" "$WORK/msg.out" "$WORK/msg.err" | awk -F: '{ s += $2 } END { print s }')" = 1 ] ||
        fail "fedismplus: the message is not printed once"
    grep -q -- "$pat" "$WORK/out/msg/log.txt" || fail "fedismplus: the message is not in log.txt"
    grep -q 'clean/corrupted comparison is off' "$WORK/msg.out" "$WORK/msg.err" || fail "the message does not say what is off"
    fh 3 msgA "$WORK/base.ini" output.name=msgA fl.rounds=1
    expect_rc "fedavg" 0 && grep -q -- "$pat" "$WORK/msgA.out" "$WORK/msgA.err" && fail "fedavg prints the message"
    fh 3 msgQ "$WORK/base.ini" output.name=msgQ algo.method=fedism data.path="$WORK/pq.h5" fl.rounds=2
    expect_rc "fedism on a quality-shifted partition" 0 || return
    grep -q -- "$pat" "$WORK/msgQ.out" "$WORK/msgQ.err" && fail "fedism with a corrupted test set prints the message"
    paste -d, <(metric_values msgQ corrupted_balanced_accuracy) <(metric_values msgQ corrupted_auc_ovo_macro) \
        <(metric_values msgQ client_auc_std) <(metric_values msgQ client_bacc_std) |
        awk -F, '{ for (i = 1; i <= 4; i++) if ($i == "" || $i == "nan") bad = 1 } END { exit bad || NR != 2 }' ||
        fail "corrupted metrics missing: $(metric_values msgQ client_auc_std | tr '\n' ' ')"
}

# ---- bad input ------------------------------------------------------------------------------------------

# out of range (the config layer or the method's validation; NaN, tau < 0 and the other cases in the unit test),
# a key of the other row, an unknown choice: exit 1 naming the key, no run folder
test_bad_keys()
{
    bad_key "rho_max < 0" rho_max algo.method=fedismplus algo.rho_max=-0.1
    bad_key "rho < 0" rho algo.method=fedism algo.rho=-1
    bad_key "tau = 0" tau algo.method=fedismplus algo.tau=0
    bad_key "q < 0" q algo.method=fedismplus algo.q=-1
    bad_key "beta = 0" beta algo.method=fedismplus algo.beta=0
    bad_key "beta > 1" beta algo.method=fedism algo.beta=1.5
    bad_key "horizon < rounds" horizon algo.method=fedismplus algo.horizon=2
    bad_key "horizon fractional" horizon algo.method=fedismplus algo.horizon=4.5
    bad_key "score_rows fractional" score_rows algo.method=fedism algo.score_rows=10.5
    bad_key "unknown saga" saga algo.method=fedismplus algo.saga=accuracy
    bad_key "tau on fedism" tau algo.method=fedism algo.tau=0.5
    bad_key "rho on fedismplus" rho algo.method=fedismplus algo.rho=0.1
}

TESTS=(radius_schedule client_columns q0_is_uniform switches saga_state resume corrupted_message bad_keys)

run_tests "$@"
