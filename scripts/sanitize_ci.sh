#!/usr/bin/env bash
# CI: builds the unit tests once with AddressSanitizer + UndefinedBehaviorSanitizer (gcc, CPU
# only) into build-asan and runs `ctest -L unit` there; any sanitizer report fails the run.
# Usage: scripts/sanitize_ci.sh [extra ctest args]   (BUILD_DIR, JOBS override)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build-asan}"
JOBS="${JOBS:-$(nproc)}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
# UBSan only prints by default; halt so the test fails. Leaks are errors too.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLIBRI_TESTS=ON \
    -DCOLIBRI_BENCH=OFF -DCOLIBRI_WERROR=ON -DCOLIBRI_CUDA=OFF \
    -DCOLIBRI_SANITIZE=address,undefined
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" -L unit --output-on-failure -j "$JOBS" "$@"
