#!/usr/bin/env bash
# Installs everything sluice needs on Debian 12 and builds it. Idempotent:
# a second run installs nothing new and rebuilds only what changed.
#   Debian packages: compiler, CMake, libraries (see docs/DEPENDENCIES.md).
#   .venv/:          Python tools for the reference tests (numpy, gguf, tokenizers, ...).
#   build/:          release build; build-asan/: the ASan+UBSan build the tests use.
# Usage: tools/setup.sh [--no-python] [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

want_python=1 want_build=1
for a in "$@"; do
  case $a in
    --no-python) want_python=0 ;;
    --no-build) want_build=0 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

debs=(build-essential cmake pkg-config git xz-utils curl ca-certificates
      libcriterion-dev libjansson-dev libpcre2-dev libh2o-evloop-dev libssl-dev
      python3 python3-venv python3-dev clang libclang-rt-14-dev wamerican
      # test_70_ops.py: HAProxy failover, and promtool (Debian ships it in 'prometheus')
      haproxy prometheus
      # README "Longer runs": memcheck of sluice serve under tools/soak.py
      valgrind)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ $want_python = 1 ]; then
  if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv .venv
  fi
  req=tests/requirements.txt
  stamp=.venv/.req-$(sha1sum "$req" | cut -c1-12)
  if [ ! -f "$stamp" ]; then
    echo "setup: installing Python test tools into .venv"
    .venv/bin/pip install -q --upgrade pip
    # llama-cpp-python builds llama.cpp from source (minutes); pip keeps the
    # built wheel in its cache, and a wheel in ~/.cache/sluice-wheels is used first.
    mkdir -p ~/.cache/sluice-wheels
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) .venv/bin/pip install -q --find-links ~/.cache/sluice-wheels -r "$req"
    rm -f .venv/.req-*; touch "$stamp"
  fi
fi

if [ $want_build = 1 ]; then
  jobs=$(nproc)
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$jobs" >/dev/null
  echo "setup: built build/sluice"
fi
