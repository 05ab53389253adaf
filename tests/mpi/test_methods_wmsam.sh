#!/usr/bin/env bash
# End-to-end tests of the 'wmsam' method family (docs/methods/sam.md §9 FedWMSAM, 15 A-FedSAM [reconstructed])
# under mpirun with 3 ranks on the tiny synthetic set of tests/mpi/lib.sh: each method's reduction (FedWMSAM with
# alpha frozen at 1 and rho = 0 is SCAFFOLD-corrected SGD; A-FedSAM with zero distillation weight is FedSAM), the
# per-round method_scalar column (alpha_r, mu_t), the control-variate identity, the switches that must change
# results (compat = official, teacher = ema), bit-identical resume, bad keys.
# usage: tests/mpi/test_methods_wmsam.sh [test_name]      (last line: "N passed, N failed")
source "$(dirname "$0")/lib.sh"

setup() { setup_tiny; }

# rel_diff A.h5 B.h5 DATASET_A DATASET_B: prints "max|diff|/max|x| n=... bit-equal=..." of two float datasets; a
# longer A (several rows) is compared by its first row (exit 1 when unreadable or B is longer)
rel_diff()
{
    dump_dataset "$1" "$3" "$WORK/ca.bin" && dump_dataset "$2" "$4" "$WORK/cb.bin" || { echo "unreadable"; return 1; }
    python3 - "$WORK/ca.bin" "$WORK/cb.bin" <<'EOF'
import struct, sys
def floats(path):
    b = open(path, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
a, b = floats(sys.argv[1]), floats(sys.argv[2])
if len(a) < len(b) or len(a) % len(b):
    print("sizes %d vs %d" % (len(a), len(b))); sys.exit(1)
a = a[:len(b)]
big = max(max(abs(x) for x in a), max(abs(x) for x in b))
worst = max(abs(x - y) for x, y in zip(a, b))
print("%.3g n=%d max|x|=%.3g bit-equal=%d" % (worst / big if big > 0 else float("inf"), len(a), big,
                                              sum(1 for x, y in zip(a, b) if x == y)))
EOF
}

# close_state A.h5 B.h5 WHAT DATASET_A=DATASET_B...: each pair agrees within 1e-5 x max|x| (and is not all zero)
close_state()
{
    local a=$1 b=$2 what=$3 pair out
    shift 3
    for pair in "$@"; do
        out=$(rel_diff "$a" "$b" "${pair%%=*}" "${pair#*=}") || { fail "$what: ${pair%%=*}: $out"; return 1; }
        awk -v r="${out%% *}" 'BEGIN { exit !(r <= 1e-5) }' ||
            { fail "$what: ${pair%%=*} vs ${pair#*=}: relative difference $out > 1e-5"; return 1; }
        note "$what ${pair%%=*}: relative difference $out"
    done
    return 0
}

# ---- FedWMSAM (docs/methods/sam.md §9) ----------------------------------------------------------------------------------

# alpha frozen at 1 (alpha_0 = 1, alpha_lambda = 0) and rho = 0: r = g + (c - c_k), the SCAFFOLD-corrected gradient
# (the momentum has weight 0), c_k <- c_k - c - Delta_k/(K_k eta) with K_k the steps taken (k_norm = actual, as the
# scaffold row), c += (1/N) sum dc_k, x += Delta_bar (uniform weights and eta_g = 1 on both sides).
# Round 1 (c = c_k = 0) is bit-identical. Later rounds are only algebraically equal: SCAFFOLD uploads dc_k = c_k_new -
# c_k rounded to float and sums those, FedWMSAM uploads only the model (and two scalars, docs/methods/sam.md §9) and
# the server sums -Delta_k/(K_k eta), each formed in double, then takes c once per such client, so c differs by
# float rounding from round 2 on and the models by what that rounding propagates to: compared within 1e-5 of
# their magnitude (the c_k of each client are the same formula).
test_scaffold_limit()
{
    local wm="algo.method=fedwmsam algo.alpha_0=1 algo.alpha_lambda=0 algo.rho=0 algo.k_norm=actual"
    equal_runs "fedwmsam alpha=1 rho=0 vs scaffold, round 1" 3 "$wm fl.rounds=1" "algo.method=scaffold fl.rounds=1"
    fh 3 scafW "$WORK/base.ini" output.name=scafW $wm
    expect_rc "fedwmsam alpha=1 rho=0" 0 || return
    fh 3 scafS "$WORK/base.ini" output.name=scafS algo.method=scaffold
    expect_rc "scaffold" 0 || return
    close_state "$WORK/out/scafW/run.h5" "$WORK/out/scafS/run.h5" "fedwmsam alpha=1 rho=0 vs scaffold, 3 rounds" \
        /server/global=/server/global /server/vectors=/server/vectors /clients/vector_0=/clients/vector_0
    # the tolerance tells methods apart: the momentum (alpha_0 = 0.1) is far from SCAFFOLD
    fh 3 scafF "$WORK/base.ini" output.name=scafF algo.method=fedwmsam algo.rho=0 algo.k_norm=actual
    if expect_rc "fedwmsam rho=0" 0; then
        local out
        out=$(rel_diff "$WORK/out/scafF/run.h5" "$WORK/out/scafS/run.h5" /server/global /server/global)
        awk -v r="${out%% *}" 'BEGIN { exit !(r > 1e-3) }' || fail "fedwmsam alpha_0=0.1 is within $out of scaffold"
    fi
    [ "$(column "$WORK/out/scafW/metrics.csv" method_scalar | sort -u)" = 1 ] ||
        fail "alpha_lambda = 0: alpha_r is not 1 every round: $(column "$WORK/out/scafW/metrics.csv" method_scalar | tr '\n' ' ')"
}

# metrics.csv method_scalar = alpha_r, the alpha of the round: alpha_0 = 0.1 in round 1 and, with mom_0 = 0 (every
# s_k = 0, clipped to 0.1), 0.99 0.1 + 0.01 0.1 in round 2; then within [0.1, 0.9]; alpha_lambda = 0 keeps alpha_0;
# methods without a scalar leave the column empty
test_alpha_column()
{
    fh 3 alpha "$WORK/base.ini" output.name=alpha algo.method=fedwmsam fl.rounds=4
    expect_rc "fedwmsam" 0 || return
    column "$WORK/out/alpha/metrics.csv" method_scalar |
        awk 'NR <= 2 { if ($1 + 0 < 0.0999999 || $1 + 0 > 0.1000001) bad = 1 }
             { if ($1 == "" || $1 < 0.0999999 || $1 > 0.9) bad = 1 } END { exit bad || NR != 4 }' ||
        fail "alpha_r: $(column "$WORK/out/alpha/metrics.csv" method_scalar | tr '\n' ' ')"
    fh 3 alpha0 "$WORK/base.ini" output.name=alpha0 algo.method=fedwmsam algo.alpha_0=0.3 algo.alpha_lambda=0
    expect_rc "fedwmsam alpha_lambda=0" 0 &&
        { [ "$(column "$WORK/out/alpha0/metrics.csv" method_scalar | sort -u)" = 0.3 ] ||
              fail "alpha_lambda = 0: $(column "$WORK/out/alpha0/metrics.csv" method_scalar | tr '\n' ' ')"; }
    fh 3 alphaA "$WORK/base.ini" output.name=alphaA fl.rounds=1
    expect_rc "fedavg" 0 && { [ -z "$(column "$WORK/out/alphaA/metrics.csv" method_scalar | tr -d '\n')" ] ||
                                  fail "fedavg has a method_scalar"; }
}

# c = (1/N) sum_k c_k: the server's c += (1/N) sum dc_k from zero, with dc_k derived from the uploaded model, matches
# the control variates the clients keep (docs/methods/sam.md §9)
test_control_variates()
{
    fh 3 cv "$WORK/base.ini" output.name=cv algo.method=fedwmsam
    expect_rc "fedwmsam" 0 || return
    local cs
    cs=$(client_state "$WORK/out/cv/run.h5") || { fail "cannot read the client state of cv"; return; }
    python3 - "$WORK/out/cv/run.h5" "$cs" >"$WORK/cv.txt" 2>&1 <<'EOF' || fail "c is not the mean of the c_k: $(cat "$WORK/cv.txt")"
import subprocess, struct, sys
def floats(name, path):
    out = path + name.replace("/", "_") + ".bin"
    subprocess.run(["h5dump", "-d", name, "-b", "LE", "-o", out, path], check=True, capture_output=True)
    b = open(out, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
srv = floats("/server/vectors", sys.argv[1])
cli, has = floats("/clients/vector_0", sys.argv[2]), floats("/clients/has_state", sys.argv[2])
K = len(has); P = len(cli) // K
c = srv[:P]   # server vector 0: c (vector 1: mom)
ref = [sum(cli[k * P + j] for k in range(K)) / K for j in range(P)]
big = max(max(abs(x) for x in c), max(abs(x) for x in ref))
worst = max(abs(x - y) for x, y in zip(c, ref))
print("K=%d P=%d trained=%d max|c|=%.3g max|diff|=%.3g" % (K, P, sum(1 for h in has if h), big, worst))
sys.exit(0 if big > 0 and worst <= 1e-5 * big + 1e-7 else 1)
EOF
    note "$(cat "$WORK/cv.txt")"
}

# compat = official changes the perturbation only: equal at rho = 0, different at rho = 0.1; the perturbation
# itself changes the result
test_compat_official()
{
    equal_runs "fedwmsam compat at rho=0" 3 "algo.method=fedwmsam algo.rho=0 algo.compat=official" \
        "algo.method=fedwmsam algo.rho=0"
    differ_runs "fedwmsam compat official vs intended" 3 "algo.method=fedwmsam algo.compat=official" "algo.method=fedwmsam"
    differ_runs "fedwmsam rho=0.1 vs 0" 3 "algo.method=fedwmsam" "algo.method=fedwmsam algo.rho=0"
}

# ---- A-FedSAM (docs/methods/sam.md §15) ---------------------------------------------------------------------------------

# zero distillation weight (mu_max = 0, or lambda = 0: mu_t stays 0) is FedSAM bit for bit; the default (mu_1 =
# 0.01) and the ema teacher change the result; method_scalar = mu_t = 1 - 0.99^t exactly as the recurrence
test_afedsam_reductions()
{
    equal_runs "afedsam mu_max=0 vs fedsam" 3 "algo.method=afedsam algo.mu_max=0" "algo.method=fedsam"
    equal_runs "afedsam lambda=0 gsam vs fedsam gsam" 3 "algo.method=afedsam algo.lambda=0 algo.perturb=gsam" \
        "algo.method=fedsam algo.perturb=gsam"
    differ_runs "afedsam vs fedsam" 3 "algo.method=afedsam" "algo.method=fedsam"
    differ_runs "afedsam teacher ema vs global" 3 "algo.method=afedsam algo.teacher=ema algo.lambda=0.5" \
        "algo.method=afedsam algo.lambda=0.5"
    fh 3 mu "$WORK/base.ini" output.name=mu algo.method=afedsam algo.mu_max=2 algo.lambda=0.5
    expect_rc "afedsam mu_max=2 lambda=0.5" 0 &&
        { [ "$(column "$WORK/out/mu/metrics.csv" method_scalar | tr '\n' ' ')" = "0 1 1.5 " ] ||
              fail "mu_t: $(column "$WORK/out/mu/metrics.csv" method_scalar | tr '\n' ' '), expected 0 1 1.5"; }
}

# ---- folded rounds ---------------------------------------------------------------------------------------

# FedWMSAM's alpha from the uploaded dot(Delta_k, mom) and ||Delta_k||^2, c's change as an exact sum of the
# Delta_k; A-FedSAM's mu_t and teacher after the average: the client ranks fold the round, the same bits on 1
# and 3 ranks
test_folded_on_ranks()
{
    folded_on_ranks fedwmsam "afedsam algo.teacher=ema"
}

# ---- resume and bad input -------------------------------------------------------------------------------

test_resume()
{
    resume_identical "fedwmsam" algo.method=fedwmsam
    resume_identical "fedwmsam official actual" algo.method=fedwmsam algo.compat=official algo.k_norm=actual
    resume_identical "afedsam" algo.method=afedsam algo.lambda=0.3
    resume_identical "afedsam ema" algo.method=afedsam algo.teacher=ema algo.lambda=0.3
}

test_bad_keys()
{
    bad_key "fedwmsam rho < 0" rho algo.method=fedwmsam algo.rho=-0.1
    bad_key "fedwmsam rho inf" rho algo.method=fedwmsam algo.rho=inf
    bad_key "alpha_0 = 0" alpha_0 algo.method=fedwmsam algo.alpha_0=0
    bad_key "alpha_0 > 1" alpha_0 algo.method=fedwmsam algo.alpha_0=1.5
    bad_key "alpha_0 = 1 with rho > 0" alpha_0 algo.method=fedwmsam algo.alpha_0=1
    bad_key "alpha_lambda > 1" alpha_lambda algo.method=fedwmsam algo.alpha_lambda=2
    bad_key "unknown compat" compat algo.method=fedwmsam algo.compat=buggy
    bad_key "unknown k_norm" k_norm algo.method=fedwmsam algo.k_norm=mean
    bad_key "afedsam rho < 0" rho algo.method=afedsam algo.rho=-1
    bad_key "temperature < 1" temperature algo.method=afedsam algo.temperature=0.5
    bad_key "mu_max < 0" mu_max algo.method=afedsam algo.mu_max=-1
    bad_key "lambda > 1" lambda algo.method=afedsam algo.lambda=1.5
    bad_key "unknown teacher" teacher algo.method=afedsam algo.teacher=best
    bad_key "alpha_0 of fedwmsam on afedsam" alpha_0 algo.method=afedsam algo.alpha_0=0.5
    bad_key "temperature of afedsam on fedwmsam" temperature algo.method=fedwmsam algo.temperature=4
}

TESTS=(scaffold_limit alpha_column control_variates compat_official afedsam_reductions folded_on_ranks resume bad_keys)
run_tests "$@"
