#!/usr/bin/env bash
# End-to-end tests of the 'fedscam' method family (docs/methods/sam.md §10: fedscam, fedscam_wa, fedscam_sam)
# under mpirun on the tiny synthetic set of tests/mpi/lib.sh: the reductions of the paper's switches (alpha_rho
# = gamma_h = beta = kappa = 0: FedSAM at rho_max with sample weights; WA: FedAvg), the per-client diagnostics
# in clients.csv and metrics.csv against the documented formulas, rank-count invariance of the probe, projection
# and clustering, bit-identical resume with clustering on, the switches that must change results, bad keys.
# usage: tests/mpi/test_methods_fedscam.sh [test_name]      (last line: "N passed, N failed")
source "$(dirname "$0")/lib.sh"

setup() { setup_tiny; }

ZEROS="algo.alpha_rho=0 algo.gamma_h=0 algo.beta=0 algo.kappa=0"

# With alpha_rho = gamma_h = beta = kappa = 0 every radius is rho_max and every weight n_i: FedSCAM is FedSAM at
# rho_max with sample weights, bit for bit (the probe and pilot passes change nothing, BatchNorm statistics
# included); so is FedSCAM (SAM);
# the defaults differ from it
test_zeros_is_fedsam()
{
    equal_runs "fedscam zeros vs fedsam rho 0.05 samples" 3 "algo.method=fedscam $ZEROS" \
        "algo.method=fedsam algo.rho=0.05 algo.weights=samples"
    equal_runs "fedscam_sam zeros vs fedsam rho 0.1 samples" 3 \
        "algo.method=fedscam_sam algo.rho_max=0.1 algo.alpha_rho=0 algo.kappa=0" \
        "algo.method=fedsam algo.rho=0.1 algo.weights=samples"
    # a model with BatchNorm: the probe and pilot forwards leave the running statistics alone
    equal_runs "fedscam zeros vs fedsam, smallcnn" 3 "algo.method=fedscam $ZEROS model.name=smallcnn fl.rounds=2" \
        "algo.method=fedsam algo.rho=0.05 algo.weights=samples model.name=smallcnn fl.rounds=2"
    differ_runs "fedscam vs fedsam" 3 "algo.method=fedscam" "algo.method=fedsam algo.rho=0.05 algo.weights=samples"
    differ_runs "fedscam_sam vs fedsam" 3 "algo.method=fedscam_sam" "algo.method=fedsam algo.rho=0.05 algo.weights=samples"
}

# FedSCAM (WA) with gamma_h = beta = kappa = 0 is FedAvg bit for bit; its defaults differ
test_wa_zeros_is_fedavg()
{
    equal_runs "fedscam_wa zeros vs fedavg" 3 "algo.method=fedscam_wa algo.gamma_h=0 algo.beta=0 algo.kappa=0" \
        "algo.method=fedavg"
    differ_runs "fedscam_wa vs fedavg" 3 "algo.method=fedscam_wa" "algo.method=fedavg"
}

# clients.csv rho, h, c, h_adj, delta_norm against the documented formulas at the defaults (alpha_rho = 1, kappa =
# 0.5, gamma_h = 1, beta = 0.8): c = 0 in round 0 (u = 0), |c| <= 1, h > 0, h_adj = h max(0, 1 - kappa c), rho =
# rho_max/(1 + alpha_rho h_adj), weight = S_i/sum S; metrics.csv rho = the mean of the round's rho; FedSCAM (WA)
# has no rho column and an empty metrics rho
test_diagnostics()
{
    fh 3 diag "$WORK/base.ini" output.name=diag algo.method=fedscam algo.rho_max=0.1 fl.rounds=4
    expect_rc "fedscam" 0 || return
    local csv=$WORK/out/diag/clients.csv out
    out=$(python3 - "$csv" "$WORK/out/diag/metrics.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
met = list(csv.DictReader(open(sys.argv[2])))
bad = []
if not rows: bad.append("no rows")
by_round = {}
for r in rows:
    t = int(r["round"]); by_round.setdefault(t, []).append(r)
    h, c, ha, rho = float(r["h"]), float(r["c"]), float(r["h_adj"]), float(r["rho"])
    if not h > 0: bad.append("h %g" % h)
    if abs(c) > 1 + 1e-12: bad.append("c %g" % c)
    if t == 0 and c != 0: bad.append("round 0 c %g" % c)
    if abs(ha - h * max(0.0, 1 - 0.5 * c)) > 1e-8 * max(1, h): bad.append("h_adj %g for h %g c %g" % (ha, h, c))
    if abs(rho - 0.1 / (1 + ha)) > 1e-8 * rho: bad.append("rho %g for h_adj %g" % (rho, ha))
    if not float(r["delta_norm"]) > 0: bad.append("delta_norm %s" % r["delta_norm"])
for t, rs in by_round.items():
    S = [int(r["samples"]) / (1 + float(r["h_adj"])) * max(0.0, 1 + 0.8 * float(r["c"])) for r in rs]
    for r, s in zip(rs, S):
        if abs(float(r["weight"]) - s / sum(S)) > 1e-8: bad.append("round %d client %s weight %s, expected %g" % (t, r["client"], r["weight"], s / sum(S)))
    mean = sum(float(r["rho"]) for r in rs) / len(rs)
    if abs(float(met[t]["rho"]) - mean) > 1e-8 * mean: bad.append("round %d metrics rho %s, mean %g" % (t, met[t]["rho"], mean))
if not any(float(r["c"]) != 0 for r in rows if int(r["round"]) > 0): bad.append("c is 0 after round 0")
print("; ".join(bad[:4]) if bad else "%d rows" % len(rows))
sys.exit(1 if bad else 0)
PY
) || fail "fedscam clients.csv: $out"
    fh 3 diagW "$WORK/base.ini" output.name=diagW algo.method=fedscam_wa
    if expect_rc "fedscam_wa" 0; then
        head -1 "$WORK/out/diagW/clients.csv" | grep -q ',h,c,h_adj,delta_norm$' ||
            fail "fedscam_wa clients.csv header: $(head -1 "$WORK/out/diagW/clients.csv")"
        head -1 "$WORK/out/diagW/clients.csv" | grep -q ',rho,' && fail "fedscam_wa has a rho column"
        [ -z "$(metric_values diagW rho | tr -d '\n')" ] || fail "fedscam_wa: metrics.csv rho is not empty"
    fi
    fh 3 diagA "$WORK/base.ini" output.name=diagA
    if expect_rc "fedavg" 0; then
        [ "$(head -1 "$WORK/out/diagA/clients.csv")" = "round,client,samples,steps,loss,weight,seconds" ] ||
            fail "fedavg clients.csv header changed: $(head -1 "$WORK/out/diagA/clients.csv")"
    fi
}

# the probe shuffle, the projections and the k-means draw are keyed by seed and coordinate/round, never by
# rank: 2 and 4 ranks give the same model and the same clients.csv
test_rank_invariance()
{
    local args="algo.method=fedscam algo.cluster=true algo.clusters=1"
    # shellcheck disable=SC2086
    fh 2 rk2 "$WORK/base.ini" output.name=rk2 $args
    expect_rc "fedscam cluster, 2 ranks" 0 || return
    # shellcheck disable=SC2086
    fh 4 rk4 "$WORK/base.ini" output.name=rk4 $args
    expect_rc "fedscam cluster, 4 ranks" 0 || return
    same_global "$WORK/out/rk2/run.h5" "$WORK/out/rk4/run.h5" "fedscam 2 vs 4 ranks"
    same_csv "$WORK/out/rk2/clients.csv" "$WORK/out/rk4/clients.csv" "fedscam 2 vs 4 ranks"
}

# u follows the average (its projection after the sums): the client ranks fold every row's round, the same bits
# on 1 and 3 ranks
test_folded_on_ranks()
{
    folded_on_ranks fedscam fedscam_wa fedscam_sam
}

# u (server scalars) and the clustering resume bit for bit; clients.csv keeps its method columns on resume
test_resume()
{
    resume_identical "fedscam cluster" algo.method=fedscam algo.cluster=true algo.clusters=2 || return
    same_csv "$WORK/out/rsfedscam_cluster_A/clients.csv" "$WORK/out/rsfedscam_cluster_B/clients.csv" \
        "fedscam cluster: straight vs resumed"
    resume_identical "fedscam_wa gaussian" algo.method=fedscam_wa algo.proj=gaussian algo.proj_dim=8
}

# switches that must change the result (2 rounds: the second sees u): clustering (one cluster of all 6
# clients, lambda_c 0.5; lambda_c = 1 changes nothing), the projection, its dimension, the probe size
test_switches()
{
    local r="fl.rounds=2"
    differ_runs "cluster on" 3 "algo.method=fedscam algo.cluster=true algo.clusters=1 fl.selection=all $r" \
        "algo.method=fedscam fl.selection=all $r"
    equal_runs "cluster lambda_c 1" 3 "algo.method=fedscam algo.cluster=true algo.clusters=1 algo.lambda_c=1 $r" \
        "algo.method=fedscam $r"
    differ_runs "proj gaussian" 3 "algo.method=fedscam algo.proj=gaussian $r" "algo.method=fedscam $r"
    differ_runs "proj_dim 4" 3 "algo.method=fedscam algo.proj_dim=4 $r" "algo.method=fedscam $r"
    differ_runs "probe_batches 1" 3 "algo.method=fedscam algo.probe_batches=1 $r" "algo.method=fedscam $r"
}

test_bad_keys()
{
    bad_key "rho_max < 0" rho_max algo.method=fedscam algo.rho_max=-0.1
    bad_key "proj_dim < 0" proj_dim algo.method=fedscam algo.proj_dim=-1
    bad_key "proj_dim not whole" proj_dim algo.method=fedscam_wa algo.proj_dim=2.5
    bad_key "clusters 0" clusters algo.method=fedscam algo.clusters=0
    bad_key "lambda_c 0" lambda_c algo.method=fedscam algo.lambda_c=0
    bad_key "lambda_c > 1" lambda_c algo.method=fedscam_wa algo.lambda_c=1.5
    bad_key "probe_batches 0" probe_batches algo.method=fedscam_sam algo.probe_batches=0
    bad_key "alpha_rho < 0" alpha_rho algo.method=fedscam algo.alpha_rho=-1
    bad_key "proj unknown" proj algo.method=fedscam algo.proj=dense
    bad_key "wa has no radius" rho_max algo.method=fedscam_wa algo.rho_max=0.1
    bad_key "sam has no weights" gamma_h algo.method=fedscam_sam algo.gamma_h=1
}

TESTS=(zeros_is_fedsam wa_zeros_is_fedavg diagnostics rank_invariance folded_on_ranks resume switches bad_keys)
run_tests "$@"
