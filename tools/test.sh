#!/usr/bin/env bash
# Runs every test: the criterion unit tests under ASan+UBSan, then the Python
# reference and integration tests against the release build. Prints the time
# each stage took. Run tools/setup.sh first (the README's first command).
# Usage: tools/test.sh                   every build and every stage (what CI runs)
#        tools/test.sh PYTEST-ARGS...    only the release build and that pytest
#                                        selection (-k EXPR, a test file, -x, ...)
#        tools/test.sh EXPR              the same as tools/test.sh -k EXPR
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
t_all=$(date +%s)
stage() { echo "== $1"; t_stage=$(date +%s); }
done_stage() { echo "== $1: $(( $(date +%s) - t_stage ))s"; }

# A lone word that is not an option or a path is a -k expression.
if [ $# -eq 1 ] && [ "${1#-}" = "$1" ] && [ ! -e "${1%%::*}" ]; then set -- -k "$1"; fi

stage "build (release)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" >/dev/null
done_stage "build (release)"

pytest_stage() {
  stage "reference and integration tests (pytest)"
  # pytest.ini's testpaths when no path is given
  SLUICE_BUILD_DIR=$PWD/build .venv/bin/python -m pytest -q "$@"
  done_stage "reference and integration tests (pytest)"
}

# A selection runs only the tests asked for: the other stages do not depend
# on it, and tests needing build-asan skip when it is not there.
if [ $# -gt 0 ]; then
  pytest_stage "$@"
  echo "== selected tests: $(( $(date +%s) - t_all ))s"
  exit 0
fi

stage "build (asan+ubsan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
done_stage "build (asan+ubsan)"

stage "build (cuda: compile and link only; no GPU here)"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=$PATH:/usr/local/cuda/bin
  cmake -S . -B build-cuda -DSLUICE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-cuda -j"$jobs" >/dev/null
  ctest --test-dir build-cuda -R "test_cuda_(decode|split_rule|fa_rule|kv_layout)" --output-on-failure | tail -3
else
  echo "nvcc not found: CUDA build skipped"
fi
done_stage "build (cuda: compile and link only; no GPU here)"

stage "layering (tools/depcheck.py: no circle between source files)"
python3 tools/depcheck.py build
[ -d build-cuda ] && python3 tools/depcheck.py build-cuda
done_stage "layering (tools/depcheck.py: no circle between source files)"

stage "unit tests (criterion, asan+ubsan)"
# criterion runs each test in a child whose sanitizer reports do not fail the
# test, so the log is checked for them too.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -V > build-asan/ctest.log 2>&1 || { tail -80 build-asan/ctest.log; exit 1; }
grep -E "tests passed|Synthesis" build-asan/ctest.log
if grep -nE "LeakSanitizer|AddressSanitizer|runtime error:" build-asan/ctest.log; then
  echo "sanitizer reports in the unit tests (build-asan/ctest.log)"; exit 1
fi
done_stage "unit tests (criterion, asan+ubsan)"

stage "fuzz (libFuzzer, asan+ubsan, every target ${FUZZ_SECONDS:-60} s, two at a time)"
# Builds build-fuzz with clang and runs the six harnesses on their seeds;
# fails on any crash, sanitizer report or hang (tools/fuzz.sh).
tools/fuzz.sh all "${FUZZ_SECONDS:-60}"
done_stage "fuzz (libFuzzer, asan+ubsan, every target ${FUZZ_SECONDS:-60} s, two at a time)"

pytest_stage tests/reference tests/integration

echo "== all tests: $(( $(date +%s) - t_all ))s"
