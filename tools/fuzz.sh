#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang, ASan+UBSan) in build-fuzz/
# and runs each target for SECONDS with its committed seeds, copied into a
# scratch corpus (build-fuzz/fuzz-work/<target>/) so runs never dirty the tree.
# Prints PASS or FAILED (with the reason), executions and exec/s for every
# target; exits 1 if any failed: a crash, leak, UB or timeout (the input is
# left in build-fuzz/fuzz-work/<target>/artifacts/), or a target that died
# without its final stats.
# Usage: tools/fuzz.sh [TARGET|all] [SECONDS]     (default: all 60)
# Env:   FUZZ_JOBS=N  targets run at once (default 2: the CI machine's cores)
#        FUZZ_KEEP=1  keep the scratch corpora of an earlier run (grow them)
set -euo pipefail
cd "$(dirname "$0")/.."
targets_all="request gguf tokenizer jinja admin shm grammar json_schema tools"
which=${1:-all}
secs=${2:-60}
jobs=${FUZZ_JOBS:-2}
build=build-fuzz
if [ "$which" = all ]; then targets=$targets_all; else targets=$which; fi
for t in $targets; do
  case " $targets_all " in *" $t "*) ;; *) echo "unknown target $t (one of: $targets_all, all)"; exit 2;; esac
done

# On every exit (also a failed build step or ^C): stop the targets still
# running, and remove the segments that harnesses which died on a finding
# left behind (each is named after its harness's pid).
cleanup() {
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  for f in /dev/shm/sluice-fuzz-*; do
    [ -e "$f" ] || continue
    kill -0 "${f##*-}" 2>/dev/null || rm -f "$f"
  done
}
trap cleanup EXIT

# RelWithDebInfo: -O2 -g and NDEBUG, so recovery's debug-only invariant
# assert does not fire on a deliberately corrupted segment (fuzz_shm checks
# the invariants itself where they must hold).
CC=clang cmake -S . -B $build -DSLUICE_FUZZ=ON -DSLUICE_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build $build -j"$(nproc)" --target $(for t in $targets; do printf 'fuzz_%s ' "$t"; done) >/dev/null

work=$PWD/$build/fuzz-work
export SLUICE_SOURCE_DIR=$PWD
# halt_on_error: the first report is the finding; leaks count as crashes.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

run_one() {
  local t=$1 dir=$work/$1
  [ "${FUZZ_KEEP:-0}" = 1 ] || rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp tests/fuzz/corpus/"$t"/* "$dir/corpus/"
  # -timeout: the slowest legitimate input (a template at the 2 s render
  # budget, under the sanitizers) is far below it; a hang is a finding.
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=25 -rss_limit_mb=3072 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$dir/log" 2>&1
}

# Prints one target's line (PASS or FAILED with the reason); returns 1 if it
# failed. Any part of the log may be missing: a target that died at startup
# printed no stats and no coverage.
report() {
  local t=$1 rc=$2 log=$work/$1/log execs cov n_corpus n_art ok=PASS why=""
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" 2>/dev/null | tail -1 || true)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" 2>/dev/null | tail -1 || true)
  n_corpus=$(ls "$work/$t/corpus" 2>/dev/null | wc -l || true)
  n_art=$(ls "$work/$t/artifacts" 2>/dev/null | wc -l || true)
  if [ "$rc" -ne 0 ]; then
    ok=FAILED
    if [ "$rc" -gt 128 ]; then why="killed by signal $(( rc - 128 ))"; else why="exit status $rc"; fi
  fi
  if [ "${n_art:-0}" -gt 0 ]; then ok=FAILED; why="${why:+$why, }$n_art input(s) in artifacts/"; fi
  if [ "$ok" = PASS ] && [ -z "$execs" ]; then ok=FAILED; why="no final stats in the log"; fi
  printf '%-10s %-6s %10s execs in %ss  %7s exec/s  %s  corpus %s\n' "$t" "$ok" "${execs:-?}" "$secs" \
    "$(( ${execs:-0} / (secs > 0 ? secs : 1) ))" "${cov:-no coverage line}" "${n_corpus:-?}"
  [ "$ok" = PASS ] && return 0
  echo "   $t FAILED: $why"
  grep -E 'ERROR|SUMMARY|check failed|runtime error|Test unit written' "$log" 2>/dev/null | head -20 || true
  [ -s "$log" ] || echo "   (the log is empty or missing)"
  echo "   full log: $log"
  return 1
}

status=0
pids=()
names=()
t0=$(date +%s)
for t in $targets; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_one "$t" &
  pids+=($!)
  names+=("$t")
done
failed=()
for i in "${!pids[@]}"; do
  t=${names[$i]}
  if wait "${pids[$i]}"; then rc=0; else rc=$?; fi
  report "$t" "$rc" || { status=1; failed+=("$t"); }
done
echo "fuzz: $(( $(date +%s) - t0 ))s wall for: $targets"
[ $status -eq 0 ] || echo "fuzz: FAILED: ${failed[*]}"
exit $status
