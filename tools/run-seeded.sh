#!/usr/bin/env bash
# make test-tsan-seeded / make test-asan-seeded: proves the sanitizer pass can see what it is for.
#
# For each seeded bug of core/base/seeded_bug.h this runs the tests that reach it, in the
# existing sanitizer build, with the bug switched on (SHOAL_SEEDED_BUGS), and requires the
# sanitizer to report it: its report line, and a frame of the function the bug is in. A pass
# that misses a planted bug (a suppression too wide, an annotation that hides a hand-off, a
# test that no longer reaches the code) fails here. Prints each report's first lines.
#
# Usage: tools/run-seeded.sh tsan|asan BUILD_DIR
set -uo pipefail
sanitizer=$1
build=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)

# seed | test binary | gtest filter | a frame the report must name
case $sanitizer in
  tsan)
    report="WARNING: ThreadSanitizer: data race"
    export TSAN_OPTIONS="halt_on_error=1 suppressions=$here/tsan.supp"
    seeds=(
      "scan_share.register_unlocked|index_test|ScanShare.RandomCancellationsAndDeadlinesWhileSharingAllEnd|ScanShare::Register"
      "uncached_budget.acquire_unlocked|cache_test|UncachedBudgetTest.ConcurrentAcquiresAndReleasesAllAnswerWithinTheBudget|UncachedBudget::Acquire"
      "tls.publish_unlocked|server_unit_test|TlsCertificates.HandshakesDuringReloads*|TlsCertificates::Publish"
    )
    ;;
  asan)
    report="ERROR: AddressSanitizer: heap-use-after-free"
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=0"
    seeds=(
      "ivf_search.hand_back_after_free|index_test|ScanShare.SharedScansGiveTheSameResultsAsUnsharedOnes|OnHandBack"
    )
    ;;
  *)
    echo "usage: $0 tsan|asan BUILD_DIR" >&2
    exit 2
    ;;
esac
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

failures=0
for row in "${seeds[@]}"; do
  IFS='|' read -r seed binary filter frame <<<"$row"
  log="$build/seeded-$seed.log"
  start=$(date +%s)
  # A race is reported only when the interleaving lets it show: repeat until it does (the
  # sanitizer halts the process at its first report).
  SHOAL_SEEDED_BUGS=$seed timeout 600 "$build/tests/$binary" --gtest_filter="$filter" \
    --gtest_repeat=20 >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  if grep -q "$report" "$log" && grep -q "$frame" "$log"; then
    echo "ok    $seed: reported by $sanitizer (${secs}s, exit $rc)"
    grep -m1 -A8 "$report" "$log" | sed 's/^/        /'
  else
    echo "FAIL  $seed: $sanitizer reported no '$report' naming $frame (${secs}s, exit $rc; $log)"
    tail -20 "$log" | sed 's/^/        /'
    failures=$((failures + 1))
  fi
done
exit $((failures > 0))
