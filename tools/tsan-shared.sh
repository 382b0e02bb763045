#!/usr/bin/env bash
# Builds the shared-memory library with ThreadSanitizer (cmake -DSLUICE_TSAN=ON in
# build-tsan/) and runs the threaded harness (tests/unit/shared/threads_harness.c:
# front ends, the worker and metric readers as threads over one mapping) as a
# plain program: criterion's process arena does not start under TSan. The
# multi-process and crash-sweep tests stay with the ASan build (TSan cannot see
# across processes). Exit status 0 = no race reported.
# Usage: tools/tsan-shared.sh [runs]   (default 3 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cc=${CC:-cc}
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSLUICE_TSAN=ON -DSLUICE_TESTS=OFF >/dev/null
cmake --build build-tsan -j2 --target sl_shared >/dev/null
"$cc" -std=c17 -D_GNU_SOURCE -Wall -Wextra -g -O1 -fsanitize=thread -fno-omit-frame-pointer -I. \
  -DTL_THREADS_MAIN tests/unit/shared/threads_harness.c tests/unit/shared/shm_testlib.c \
  build-tsan/shared/libsl_shared.a -lpthread -lrt -lm -o build-tsan/tsan-shared
for i in $(seq "$runs"); do
  TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/tsan-shared
done
echo "tsan-shared: $runs runs clean"
