#!/usr/bin/env bash
# FLOOD end to end (algorithms-sam 13): as a method and as a plug-in on 3 ranks over the tiny synthetic set.
# usage: tests/mpi/test_methods_flood.sh [test_name]      (last line: "N passed, N failed")
source "$(dirname "$0")/lib.sh"

setup() { setup_tiny; }

NEUTRAL="algo.flood_schedule=constant algo.flood_lambda=1 algo.flood_alpha=0"

# lambda = 1 for every sample and alpha = 0: FedAvg bit for bit (the weighted loss and DAC reduce exactly)
test_neutral_equals_fedavg()
{
    equal_runs "flood neutral vs fedavg" 3 "algo.method=fedavg" "algo.method=flood $NEUTRAL"
}

# the plug-in leaves its host alone when neutral (002 Table IV's hosts too: their own terms and server rules
# unchanged, docs/methods/sam.md §13), and changes it when not
test_plugin_on_hosts()
{
    local host
    for host in fedavg "fedprox algo.mu=0.1" "scaffold algo.weights=samples" "feddecorr algo.beta=0.1" \
        "fednp algo.lambda=0.01"; do
        equal_runs "${host%% *} + neutral plug-in vs ${host%% *}" 3 "algo.method=$host" "algo.method=$host algo.plugin=flood $NEUTRAL"
    done
    differ_runs "fedavg + flood vs fedavg" 3 "algo.method=fedavg" "algo.method=fedavg algo.plugin=flood algo.flood_halt=3 algo.flood_a=1"
}

# the default (paper) and the code's compat give different runs; so do the sample weights and DAC alone
test_switches_change_results()
{
    differ_runs "flood paper vs code" 3 "algo.method=flood algo.flood_halt=3 algo.flood_a=1" "algo.method=flood algo.flood_halt=3 algo.flood_a=1 algo.flood_compat=code"
    differ_runs "flood ASW only vs neutral" 3 "algo.method=flood $NEUTRAL" \
        "algo.method=flood algo.flood_schedule=constant algo.flood_lambda=3 algo.flood_alpha=0"
    differ_runs "flood DAC only vs neutral" 3 "algo.method=flood $NEUTRAL" \
        "algo.method=flood algo.flood_schedule=constant algo.flood_lambda=1 algo.flood_alpha=0.5"
}

# the ASH scores (002 Table VI) shape the classifier's input: the mask and phi change, the run completes with DAC
test_ash_scores()
{
    local asw="algo.method=flood algo.flood_schedule=constant algo.flood_lambda=3 algo.flood_alpha=0"
    differ_runs "flood ash-p vs energy" 3 "$asw" "$asw algo.flood_score=ash-p"
    differ_runs "flood ash-s vs ash-b" 3 "$asw algo.flood_score=ash-b" "$asw algo.flood_score=ash-s"
    fh 3 ashdac "$WORK/base.ini" output.name=ashdac algo.method=flood algo.flood_score=ash-s algo.flood_dac_shift=true \
        algo.flood_halt=3 algo.flood_a=1
    expect_rc "flood ash-s with DAC" 0
}

# metrics.csv method_scalar is lambda_t (1 in round 1, then a(1 - cos(pi (t - 1) / T_h))); clients.csv phi holds
# each client's phi_i, also under a plug-in, after the host's own columns
test_logs_lambda_and_phi()
{
    local sched="algo.flood_halt=3 algo.flood_a=1"
    fh 3 logged "$WORK/base.ini" output.name=logged algo.method=flood $sched
    expect_rc "flood" 0 || return
    [ "$(metric_values logged method_scalar | tr '\n' ' ')" = "1 0 0.5 " ] ||
        fail "flood: method_scalar is not lambda_t = 1 0 0.5: $(metric_values logged method_scalar | tr '\n' ' ')"
    local phi
    phi=$(column "$WORK/out/logged/clients.csv" phi)
    [ "$(echo "$phi" | wc -l)" = 9 ] && ! echo "$phi" | grep -qvE '^-?[0-9]' ||
        fail "flood: clients.csv phi is not a number for each of the 9 client rounds: $(echo "$phi" | tr '\n' ' ')"
    fh 3 plugged "$WORK/base.ini" output.name=plugged algo.method=fedscam algo.plugin=flood $sched
    expect_rc "fedscam + flood" 0 || return
    [ "$(metric_values plugged method_scalar | tr '\n' ' ')" = "1 0 0.5 " ] ||
        fail "fedscam + flood: method_scalar is not lambda_t: $(metric_values plugged method_scalar | tr '\n' ' ')"
    local header
    header=$(head -1 "$WORK/out/plugged/clients.csv")
    [[ $header == *,rho,h,c,h_adj,delta_norm,phi ]] || fail "fedscam + flood: clients.csv columns: $header"
    [ "$(column "$WORK/out/plugged/clients.csv" phi | grep -cE '^-?[0-9]')" = 9 ] ||
        fail "fedscam + flood: clients.csv phi: $(column "$WORK/out/plugged/clients.csv" phi | tr '\n' ' ')"
}

test_resume()
{
    resume_identical "flood" algo.method=flood algo.flood_halt=3 algo.flood_a=1
}

# bad keys: exit 1 naming the key, nothing run
test_bad_keys()
{
    fh 1 badq "$WORK/base.ini" output.name=badq algo.method=flood algo.flood_q=1
    expect_rc "flood_q = 1" 1 && { grep -q 'flood_q' "$WORK/badq.err" || fail "flood_q = 1: message does not name flood_q"; }
    fh 1 badscore "$WORK/base.ini" output.name=badscore algo.method=flood algo.flood_score=entropy
    expect_rc "flood_score = entropy" 1 &&
        { grep -q 'energy' "$WORK/badscore.err" && grep -q 'gen' "$WORK/badscore.err" ||
            fail "flood_score = entropy: the valid scores are not listed: $(errline badscore)"; }
    fh 1 badkey "$WORK/base.ini" output.name=badkey algo.method=fedavg algo.flood_q=0.5
    expect_rc "flood_q without flood" 1 && { grep -q 'flood_q' "$WORK/badkey.err" || fail "flood_q with fedavg: $(errline badkey)"; }
    fh 1 twice "$WORK/base.ini" output.name=twice algo.method=flood algo.plugin=flood
    expect_rc "plugin flood on flood" 1
    [ ! -d "$WORK/out/badq" ] && [ ! -d "$WORK/out/twice" ] || fail "a refused config left a run folder"
    # hosts whose aggregation is their method (their rows say so; three of the nine): DAC would replace it
    local host
    for host in qfedavg fairfed fedmr; do
        fh 1 "host_$host" "$WORK/base.ini" output.name="host_$host" algo.method=$host algo.plugin=flood
        expect_rc "plugin flood on $host" 1 &&
            { grep -q 'DAC would replace it' "$WORK/host_$host.err" || fail "flood on $host: $(errline "host_$host")"; }
    done
}

TESTS=(neutral_equals_fedavg plugin_on_hosts switches_change_results ash_scores logs_lambda_and_phi resume bad_keys)
run_tests
