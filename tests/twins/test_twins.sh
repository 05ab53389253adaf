#!/usr/bin/env bash
# Independent twins in lockstep (tests/twins/twins.py, PyTorch, written from the methods' equations, not from
# fedhet's code): FedAvgM (server momentum 0.9) and FedSCAM full, WA and SAM run from the same initial weights
# ([model] init from a PyTorch initialisation) on the same data, 3 clients all taking part, full-batch local
# steps (so no batch order is involved); after every round fedhet's global model and each client's h, c, h_adj,
# radius, weight and ||Delta|| equal the twin's to float rounding (1e-4 of the round's step; c to 1e-4), and a
# deliberately wrong twin is far off. FedSCAM at kappa 0.5, beta 2: the twin computes the pilot step and the
# sketched alignment c_i itself (its own Philox sign sketch, keyed by fl.seed). Two planted errors in the twin
# (--mutate: the pilot radius x10, the pilot's ascent flipped) must each make the lockstep fail.
# FedWMSAM, A-FedSAM, FLOOD and FedISM+ in the same harness, keys chosen so that their own terms act: FedWMSAM
# at rho 1, alpha_0 0.5, alpha_lambda 0.5 (the perturbation from the second step of every round; alpha_r moves,
# and round 2's cosines are inside alpha's clip); A-FedSAM at rho 0.2, mu_max 2, lambda 0.5 (mu_t 0, 1, 1.5);
# FLOOD cosine schedule with a 3, T_h 2 (lambda_t 1, 0, 3); FedISM+ at rho_max 0.5, horizon = the rounds, GSAM
# alpha 0.4 under Adam (lr 0.003, weight decay 5e-4) with logit adjustment 1. Each compares the model, the
# per-client outputs fedhet writes (weights; phi; saga_score, l0, l1, rho) and the round's schedule value
# (metrics.csv) at 1e-4, and one planted error each must be caught: FedWMSAM's perturbation flipped,
# A-FedSAM's KL term subtracted, FLOOD's loss divided by the sum of the mask, FedISM+'s rho(t) = rho_max.
# Adam's eps is 1e-4 here, not 1e-8: at 1e-8 a coordinate whose gradient is near 1e-8 takes a step set by
# float rounding (by round 3, float32 PyTorch is 9e-3 of a step off float64 PyTorch, fedhet 4e-3), which is
# Adam's sensitivity, not the method's.
# TWIN_ROUNDS (default 3) lengthens the lockstep. fl.seed keys the sketch (and the shuffles, moot here); seed 7
# would put a SAM step of client 0 on a ReLU boundary, where float32 and float64 take different sides (its
# ||Delta|| 2e-4 apart, the model 4e-3 of a step): a twin at float rounding is only as good as its setting.
# usage: tests/twins/test_twins.sh [test_name]    (last line: "N passed, N failed"; exit 1 when any failed)
. "$(dirname "$0")/../mpi/lib.sh"

PY=/usr/bin/python3
TWINS=$ROOT/tests/twins/twins.py
TOOL=$ROOT/tools/fedhet-torch
LOGITS=$ROOT/build/tests/model_logits
ROUNDS=${TWIN_ROUNDS:-3}
LR=0.05
ADAM_LR=0.003
ADAM_EPS=1e-4
STEPS=2

setup()
{
    [ -x "$LOGITS" ] || { echo "$LOGITS is missing (make first)"; return 1; }
    $PY -c 'import torch, h5py' || { echo "/usr/bin/python3 lacks torch or h5py: run make deps"; return 1; }
    $PY "$HERE/torch_interop.py" source "$WORK/src.h5" + init mlp "$WORK/init.pt" >"$WORK/setup.out" 2>&1 || { cat "$WORK/setup.out"; return 1; }
    # 3 clients of 15-17 rows: every local step below is a full-batch step (batch 64)
    "$FEDHET" partition "$WORK/src.h5" "$WORK/p3.h5" scheme=dirichlet alpha=0.5 clients=3 min_size=5 partition_seed=1 \
        >"$WORK/partition.out" 2>&1 || { cat "$WORK/partition.out"; return 1; }
    "$TOOL" from-torch "$WORK/init.pt" "$WORK/init.h5" --arch mlp --input 3x16x16 --classes 4 >"$WORK/from.out" 2>&1 ||
        { cat "$WORK/from.out"; return 1; }
    cat >"$WORK/base.ini" <<EOF
; fedhet twins: 3 Dirichlet clients of a 3x16x16, 4-class synthetic set, all every round, full-batch steps
[data]
path = $WORK/p3.h5
eval_batch = 40

[model]
name = mlp
init = $WORK/init.h5

[train]
batch_size = 64
steps = $STEPS

[fl]
selection = all
seed = 5
checkpoint_every = 1
[output]
dir = $WORK/out
EOF
    # every method's config stopped after 1..ROUNDS rounds, in one grid (one start of MPI)
    {
        cat "$WORK/base.ini"
        cat <<EOF

[grid]
algo.method        = fedavgm, fedscam, fedscam_wa, fedscam_sam, fedwmsam, afedsam, flood, fedismplus
algo.beta          = 0.9,     2,       2,          -,           -,        -,       -,     0.5
algo.kappa         = -,       0.5,     0.5,        0.5,         -,        -,       -,     -
algo.rho_max       = -,       0.5,     -,          0.5,         -,        -,       -,     0.5
algo.proj_dim      = -,       16,      16,         16,          -,        -,       -,     -
algo.rho           = -,       -,       -,          -,           1,        0.2,     -,     -
algo.alpha_0       = -,       -,       -,          -,           0.5,      -,       -,     -
algo.alpha_lambda  = -,       -,       -,          -,           0.5,      -,       -,     -
algo.mu_max        = -,       -,       -,          -,           -,        2,       -,     -
algo.lambda        = -,       -,       -,          -,           -,        0.5,     -,     -
algo.flood_a       = -,       -,       -,          -,           -,        -,       3,     -
algo.flood_halt    = -,       -,       -,          -,           -,        -,       2,     -
algo.horizon       = -,       -,       -,          -,           -,        -,       -,     $ROUNDS
algo.gsam_alpha    = -,       -,       -,          -,           -,        -,       -,     0.4
train.optimizer    = sgd,     sgd,     sgd,        sgd,         sgd,      sgd,     sgd,   adam
train.lr           = $LR,    $LR,    $LR,       $LR,        $LR,     $LR,    $LR,  $ADAM_LR
train.weight_decay = 0,       0,       0,          0,           0,        0,       0,     5e-4
train.logit_adjust = 0,       0,       0,          0,           0,        0,       0,     1
train.eps          = -,       -,       -,          -,           -,        -,       -,     $ADAM_EPS
zip = algo.method, algo.beta, algo.kappa, algo.rho_max, algo.proj_dim, algo.rho, algo.alpha_0, algo.alpha_lambda, algo.mu_max, algo.lambda, algo.flood_a, algo.flood_halt, algo.horizon, algo.gsam_alpha, train.optimizer, train.lr, train.weight_decay, train.logit_adjust, train.eps
fl.rounds = $(seq -s, 1 "$ROUNDS")
ranks_per_member = 1
EOF
    } >"$WORK/twins.ini"
    timeout -k 5 300 mpirun --oversubscribe -np 1 "$FEDHET" grid "$WORK/twins.ini" >"$WORK/grid.out" 2>&1 ||
        { tail -5 "$WORK/grid.out"; return 1; }
    # the rows as fedhet normalises them, client by client (model_logits reads them from the partition)
    local first
    first=$(awk -F, 'NR == 2 { print $2 }' "$WORK/out/twins/members.csv")
    "$LOGITS" "$WORK/out/twins/$first/run.h5" "$WORK/p3.h5" "$WORK/data.h5" >"$WORK/logits.out" 2>&1 ||
        { cat "$WORK/logits.out"; return 1; }
    # NAME METHOD TWIN_KEYS: $WORK/NAME/rR -> the grid member of that method after R rounds
    local name method keys r m cmd=()
    while read -r name method keys; do
        mkdir -p "$WORK/$name"
        for r in $(seq 1 "$ROUNDS"); do
            m=$(awk -F, -v me="$method" -v r="$r" '
                NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
                $col["algo.method"] == me && $col["fl.rounds"] == r {
                    print $col["member"] }' "$WORK/out/twins/members.csv")
            [ -n "$m" ] || { echo "no member for $name round $r in members.csv"; return 1; }
            ln -sfn "$WORK/out/twins/$m" "$WORK/$name/r$r"
        done
        [ ${#cmd[@]} -eq 0 ] || cmd+=(+)
        # the list's placeholders, then its commas as word breaks
        keys=${keys//ROUNDS/$ROUNDS}
        keys=${keys//ADAM_LR/$ADAM_LR}
        keys=${keys//ADAM_EPS/$ADAM_EPS}
        # shellcheck disable=SC2086
        cmd+=(lockstep "$name" "$method" "$WORK/data.h5" "$WORK/p3.h5" "$WORK/init.pt" "$WORK/$name" "$ROUNDS" "$LR"
              "$STEPS" ${keys//,/ })
    done <<'LIST'
fedavgm fedavgm beta=0.9
scam fedscam rho_max=0.5,beta=2,kappa=0.5,proj_dim=16,seed=5
scam_pilot_radius fedscam rho_max=0.5,beta=2,kappa=0.5,proj_dim=16,seed=5,--mutate,pilot_radius
scam_pilot_sign fedscam rho_max=0.5,beta=2,kappa=0.5,proj_dim=16,seed=5,--mutate,pilot_sign
wa fedscam_wa beta=2,kappa=0.5,proj_dim=16,seed=5
sam fedscam_sam rho_max=0.5,kappa=0.5,proj_dim=16,seed=5
wmsam fedwmsam rho=1,alpha_0=0.5,alpha_lambda=0.5
wmsam_perturb_sign fedwmsam rho=1,alpha_0=0.5,alpha_lambda=0.5,--mutate,perturb_sign
afedsam afedsam rho=0.2,mu_max=2,lambda=0.5
afedsam_kl_sign afedsam rho=0.2,mu_max=2,lambda=0.5,--mutate,kl_sign
flood flood flood_a=3,flood_halt=2
flood_mask_sum flood flood_a=3,flood_halt=2,--mutate,mask_sum
ismplus fedismplus rho_max=0.5,beta=0.5,gsam_alpha=0.4,horizon=ROUNDS,train.lr=ADAM_LR,train.weight_decay=5e-4,train.logit_adjust=1,train.eps=ADAM_EPS
ismplus_rho_const fedismplus rho_max=0.5,beta=0.5,gsam_alpha=0.4,horizon=ROUNDS,train.lr=ADAM_LR,train.weight_decay=5e-4,train.logit_adjust=1,train.eps=ADAM_EPS,--mutate,rho_const
LIST
    $PY "$TWINS" "${cmd[@]}" >"$WORK/twins.out" 2>&1
    return 0
}

# expect_agree NAME: the twin's lines for NAME become notes; "NAME: agrees" or a failure naming the first difference
expect_agree()
{
    local line
    grep -q . "$WORK/twins.out" || { fail "$1: the twins printed nothing"; return; }
    while IFS= read -r line; do note "$line"; done < <(grep "^$1[ :]" "$WORK/twins.out")
    grep -q "^$1: agrees" "$WORK/twins.out" ||
        fail "$1: $(grep -m1 "^$1: " "$WORK/twins.out" || grep -m1 -i 'error' "$WORK/twins.out" || tail -1 "$WORK/twins.out")"
}

# expect_caught NAME: a twin with a planted error must disagree ("NAME: first difference: ...")
expect_caught()
{
    local line
    while IFS= read -r line; do note "$line"; done < <(grep "^$1[ :]" "$WORK/twins.out")
    grep -q "^$1: first difference: " "$WORK/twins.out" ||
        fail "$1: the planted error was not caught: $(grep -m1 "^$1: " "$WORK/twins.out" || tail -1 "$WORK/twins.out")"
}

test_fedavgm() { expect_agree fedavgm; }
test_fedscam() { expect_agree scam; }
test_fedscam_wa() { expect_agree wa; }
test_fedscam_sam() { expect_agree sam; }
test_fedscam_pilot_radius_caught() { expect_caught scam_pilot_radius; }
test_fedscam_pilot_sign_caught() { expect_caught scam_pilot_sign; }
test_fedwmsam() { expect_agree wmsam; }
test_fedwmsam_perturb_sign_caught() { expect_caught wmsam_perturb_sign; }
test_afedsam() { expect_agree afedsam; }
test_afedsam_kl_sign_caught() { expect_caught afedsam_kl_sign; }
test_flood() { expect_agree flood; }
test_flood_mask_sum_caught() { expect_caught flood_mask_sum; }
test_fedismplus() { expect_agree ismplus; }
test_fedismplus_rho_const_caught() { expect_caught ismplus_rho_const; }

TESTS=(fedavgm fedscam fedscam_wa fedscam_sam fedscam_pilot_radius_caught fedscam_pilot_sign_caught
       fedwmsam fedwmsam_perturb_sign_caught afedsam afedsam_kl_sign_caught flood flood_mask_sum_caught
       fedismplus fedismplus_rho_const_caught)
run_tests "$@"
