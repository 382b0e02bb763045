#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang, ASan+UBSan) in build-fuzz/
# and runs each target for SECONDS with its committed seeds, copied into a
# scratch corpus (build-fuzz/fuzz-work/<target>/) so runs never dirty the tree.
# Prints executions and exec/s per target; fails on any crash, leak, UB or
# timeout (the input is left in build-fuzz/fuzz-work/<target>/artifacts/).
# Usage: tools/fuzz.sh [TARGET|all] [SECONDS]     (default: all 60)
# Env:   FUZZ_JOBS=N  targets run at once (default 2: the CI machine's cores)
#        FUZZ_KEEP=1  keep the scratch corpora of an earlier run (grow them)
set -euo pipefail
cd "$(dirname "$0")/.."
targets_all="request gguf tokenizer jinja admin shm"
which=${1:-all}
secs=${2:-60}
jobs=${FUZZ_JOBS:-2}
build=build-fuzz
if [ "$which" = all ]; then targets=$targets_all; else targets=$which; fi
for t in $targets; do
  case " $targets_all " in *" $t "*) ;; *) echo "unknown target $t (one of: $targets_all, all)"; exit 2;; esac
done

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
for i in "${!pids[@]}"; do
  t=${names[$i]}
  if wait "${pids[$i]}"; then rc=0; else rc=$?; fi
  log=$work/$t/log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  n_corpus=$(ls "$work/$t/corpus" | wc -l)
  ok=ok
  if [ "$rc" -ne 0 ] || ls "$work/$t/artifacts/" | grep -q .; then ok=FAILED; status=1; fi
  printf '%-10s %s  %10s execs in %ss  %7s exec/s  %s  corpus %s\n' "$t" "$ok" "${execs:-?}" "$secs" \
    "$(( ${execs:-0} / (secs > 0 ? secs : 1) ))" "${cov:-}" "$n_corpus"
  if [ "$ok" = FAILED ]; then
    grep -E 'ERROR|SUMMARY|check failed|runtime error|Test unit written' "$log" | head -20
    echo "   full log: $log"
  fi
done
echo "fuzz: $(( $(date +%s) - t0 ))s wall for: $targets"
# a harness that died on a finding left its segment (named after its pid)
for f in /dev/shm/sluice-fuzz-*; do
  [ -e "$f" ] || continue
  kill -0 "${f##*-}" 2>/dev/null || rm -f "$f"
done
exit $status
