#!/usr/bin/env bash
# make model-check: every configuration and property of tests/model/shoal.pml, exhaustively.
#
#   real model, safety   (deadlines, cancellation and I/O errors on)   must pass
#   real model, liveness (<> every request answered, -a -f)            must pass
#     with I/O errors on everywhere; with deadlines and cancellation too (the Canceller may
#     stop at any point, -DQUIESCE) where the state space fits (README: which, and why not)
#   (configurations 1-6 with search.share_scans off, 1-2 also on, 7-8 built for shared scans,
#   9 for repeated re-issues of one entry's fetch)
#   seeded bugs (a task that waits; no over-budget read; no over-budget uncached grant; a
#   re-issue that consumes no stopped issuer; the old re-issue cap)    must fail, for their reason
#   coverage: each interesting path is reachable (assert !reached)     must fail
#
# Exits non-zero if any run does otherwise. Prints one line per run (states, depth, memory,
# time) and the counterexample of each seeded bug, in the order below. Runs MODEL_JOBS (default:
# the CPU count) verifiers at once; each is capped at MODEL_MEMLIM_MB.
# Usage: tests/model/run.sh [OUT_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../build/model}"
mkdir -p "$out"
cp "$here"/*.pml "$out"/
cd "$out"

command -v spin >/dev/null || { echo "model-check: spin is not installed (tools/install-deps)"; exit 1; }
"$here/check_names.sh"

MEMLIM=${MODEL_MEMLIM_MB:-2048}   # pan stops (and this fails) past this many MB
JOBS=${MODEL_JOBS:-$(nproc)}
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "model-check: MODEL_JOBS must be a number >= 1"; exit 2; }
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT   # no verifier outlives the script
runs=()   # in order: "== header" lines and run names; each run's report is report-NAME.txt

# verify NAME EXPECT MODE [spin -D flags...]
#   EXPECT: pass | invalid-end | acceptance | assertion
#   MODE:   safety (pan, no claim) | liveness (pan -a -f, the ltl claim `live`)
verify_one() {
  local name=$1 expect=$2 mode=$3
  shift 3
  local dir="run-$name"
  rm -rf "$dir" && mkdir "$dir" && cp ./*.pml "$dir"/
  (
    cd "$dir"
    spin -a "$@" shoal.pml >spin.log 2>&1 || { cat spin.log; exit 1; }
    # gcc -O1 only where pan runs long (-O0 compiles ~3.5x faster, pan runs ~1.8x slower)
    local opt=-O0
    case $name in
      safety-cfg3 | safety-cfg4 | safety-cfg5 | safety-cfg7 | liveness-*-deadlines | \
        liveness-cfg9-deadlines | safety-cfg9) opt=-O1 ;;
    esac
    local cflags="$opt -w -DMEMLIM=$MEMLIM -DCOLLAPSE" args="-m20000 -w24"
    if [ "$mode" = safety ]; then
      cflags="$cflags -DNOCLAIM -DSAFETY"
    else
      args="$args -a -f"
      cflags="$cflags -DNFAIR=3"   # weak fairness over up to 6 processes (+ the claim)
    fi
    # shellcheck disable=SC2086
    gcc $cflags -o pan pan.c
    local start end
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    ./pan $args >pan.log 2>&1 || true
    end=$(date +%s.%N)
    echo "$start $end" >time.txt
  ) || { echo "FAIL  $name: could not build the verifier"; return; }
  local log="$dir/pan.log"
  local errors states depth mem secs
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$log" | head -1)
  states=$(sed -n 's/^ *\([0-9e.+]*\) states, stored.*/\1/p' "$log" | head -1)
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$log" | head -1)
  mem=$(sed -n 's/^ *\([0-9.]*\).total actual memory usage.*/\1/p' "$log" | head -1)
  secs=$(awk '{printf "%.1f", $2 - $1}' "$dir/time.txt")
  local got=pass
  if grep -qE "^pan:[0-9]+: invalid end state" "$log"; then got=invalid-end
  elif grep -qE "^pan:[0-9]+: acceptance cycle" "$log"; then got=acceptance
  elif grep -qE "^pan:[0-9]+: assertion violated" "$log"; then got=assertion
  elif grep -qE "^pan:[0-9]+: block in d_step" "$log"; then got=d_step-blocks
  elif [ "${errors:-1}" != 0 ]; then got=error
  fi
  # a passing run must be exhaustive: no truncated search, no memory limit hit
  if [ "$got" = pass ] && grep -qE "max search depth too small|Search not completed|out of memory" "$log"; then
    got=incomplete
  fi
  local line
  line=$(printf '%-34s %-11s states %-9s depth %-4s mem %7s MB  %5ss' "$name" "$got" \
    "${states:-?}" "${depth:-?}" "${mem:-?}" "$secs")
  if [ "$got" = "$expect" ]; then
    echo "ok    $line"
  else
    echo "FAIL  $line   (expected $expect)"
    grep -E "pan:|error" "$log" | head -5
  fi
  if [ "$expect" != pass ] && [ "$got" = "$expect" ] && [ "${MODEL_TRAILS:-1}" = 1 ]; then
    # the counterexample, one line per protocol event (the model's MSC printfs)
    (cd "$dir" && spin -t "$@" shoal.pml 2>&1 | grep -E "MSC:|START OF CYCLE" |
      sed -e 's/^ *MSC: /        | /' -e 's/^ *<<<<<START OF CYCLE>>>>>/        | (cycle: nothing changes from here on)/' |
      head -40 | uniq) || true   # uniq: a replayed loop inside one d_step repeats its line
  fi
}

# verify NAME EXPECT MODE [flags...]: verify_one in the background (at most JOBS at once), its
# report kept for the summary in queue order.
verify() {
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  runs+=("$1")
  rm -rf "run-$1" "report-$1.txt"
  verify_one "$@" >"report-$1.txt" 2>&1 &
}
section() { runs+=("$1"); }

section "== real model: safety (deadlines, cancellation, I/O errors)"
for c in 1 2 3 6; do verify "safety-cfg$c" pass safety -DCFG=$c -DDEADLINES=1 -DIOERR=1; done
# 4 and 5 without I/O errors (each ~3x the states with them; I/O errors on two slots: 2, 8)
for c in 4 5; do verify "safety-cfg$c" pass safety -DCFG=$c -DDEADLINES=1 -DIOERR=0; done
section "== real model, shared scans on: safety"
for c in 1 2; do verify "safety-cfg$c-share" pass safety -DCFG=$c -DDEADLINES=1 -DIOERR=1 -DSHARE=1; done
for c in 7 8; do verify "safety-cfg$c" pass safety -DCFG=$c -DDEADLINES=1 -DIOERR=1; done
section "== real model, repeated re-issues (cfg9): safety"
verify "safety-cfg9" pass safety -DCFG=9 -DDEADLINES=1 -DIOERR=1
section "== real model: liveness (every request answers, weak fairness), I/O errors on"
# only where the run with deadlines below does not cover it: with -DQUIESCE the Canceller may
# stop before doing anything, so a deadlines run includes every behaviour of the run without
for c in 3 4 5 7; do verify "liveness-cfg$c" pass liveness -DCFG=$c -DDEADLINES=0 -DIOERR=1; done
section "== real model: liveness with deadlines and cancellation (they may stop at any point)"
# every request is still answered (a stopped one with CANCELLED / DEADLINE_EXCEEDED); 3, 4 and
# 5 do not fit the time (README); 7 without I/O errors (1.3x the states with them)
for c in 1 2 6 8 9; do verify "liveness-cfg$c-deadlines" pass liveness -DCFG=$c -DDEADLINES=1 -DIOERR=1 -DQUIESCE; done
for c in 1 2; do verify "liveness-cfg$c-share-deadlines" pass liveness -DCFG=$c -DDEADLINES=1 -DIOERR=1 -DSHARE=1 -DQUIESCE; done
verify "liveness-cfg7-deadlines" pass liveness -DCFG=7 -DDEADLINES=1 -DIOERR=0 -DQUIESCE
section "== seeded bugs: must fail"
verify "seeded-blocking-task-cfg1" invalid-end safety -DCFG=1 -DDEADLINES=0 -DSEEDED_BLOCKING_TASK
verify "seeded-no-overbudget-cfg1" acceptance liveness -DCFG=1 -DDEADLINES=0 -DSEEDED_NO_OVERBUDGET
verify "seeded-wait-in-task-cfg1" d_step-blocks safety -DCFG=1 -DDEADLINES=0 -DSEEDED_WAIT_IN_TASK
# UncachedBudget without the oldest query's grant past the budget (P1 > cache.uncached_bytes)
verify "seeded-no-uncached-forced-cfg2" acceptance liveness -DCFG=2 -DDEADLINES=0 -DSEEDED_NO_UNCACHED_FORCED
# the re-issue argument, on the new liveness run: a re-issue that keeps the stopped issuer's
# fetch (consumes no stopped issuer: a Deliver/Issue loop in the code), and the cap 5d7e6a9
# removed (a live request fails)
verify "seeded-reissue-stale-cfg9" assertion liveness -DCFG=9 -DDEADLINES=1 -DIOERR=0 -DQUIESCE -DSEEDED_REISSUE_STALE
verify "seeded-reissue-cap1-cfg9" assertion liveness -DCFG=9 -DDEADLINES=1 -DIOERR=0 -DQUIESCE -DSEEDED_REISSUE_CAP=1
section "== coverage: each path is reached (assert !reached must fail)"
MODEL_TRAILS=0
for cover in forced_seen direct_seen coalesced_seen evicted_seen retry_seen \
  hit_seen attach_seen batch2_seen tasks2_seen expired_seen cancelq_seen uwait_seen uforced_seen; do
  cfg=2
  case $cover in
    forced_seen | attach_seen | evicted_seen) cfg=1 ;;
    coalesced_seen | retry_seen | expired_seen | cancelq_seen | batch2_seen) cfg=6 ;;
  esac
  verify "cover-$cover-cfg$cfg" assertion safety -DCFG=$cfg -DDEADLINES=1 -DIOERR=1 -DCOVER=$cover
done
# shared scans: join, an older query opening its own entry, the per-scan cap, hand-back, leave,
# a stopped fetch re-issued for another ticket, passing dropped data on, AcceptShared refusing,
# data nobody takes, an I/O error failing two tickets
for cover in join_seen younger_seen cap_seen handback_seen leave_seen reissue_seen \
  passon_seen refuse_seen nobody_seen failshared_seen; do
  cfg=8
  case $cover in
    younger_seen | cap_seen | reissue_seen) cfg=7 ;;
  esac
  verify "cover-$cover-cfg$cfg" assertion safety -DCFG=$cfg -DDEADLINES=1 -DIOERR=1 -DCOVER=$cover
done
# cfg9: one entry's fetch re-issued twice (two stopped issuers, then the live ticket)
verify "cover-reissue2_seen-cfg9" assertion safety -DCFG=9 -DDEADLINES=1 -DIOERR=0 -DCOVER=reissue2_seen

wait
failures=0
for r in "${runs[@]}"; do
  case $r in
    "== "*) echo "$r" ;;
    *)
      cat "report-$r.txt"
      if ! grep -q "^ok " "report-$r.txt"; then
        grep -q "^FAIL" "report-$r.txt" || echo "FAIL  $r: the verifier ended without a report"
        failures=$((failures + 1))
      fi
      ;;
  esac
done
if [ "$failures" -ne 0 ]; then
  echo "model-check: $failures run(s) did not do what they must"
  exit 1
fi
echo "model-check: all runs as expected"
