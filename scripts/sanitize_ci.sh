#!/usr/bin/env bash
# CI: builds unit tests with AddressSanitizer + UndefinedBehaviorSanitizer (gcc, CPU only) into
# build-asan and runs them; any sanitizer report fails the run.
#
# Which tests: the libraries that parse what users download or send (model files, tokenizer.json,
# chat templates, requests, keys) and the math under them: SANITIZE_TARGETS (default below), or
# "all" for every unit test. The build runs on a fixed budget (SANITIZE_BUILD_BUDGET seconds,
# default 1500): with a warm ccache it takes minutes; a cold cache (a new machine) may not finish,
# and then the suite says so and is skipped for this run (the objects built so far stay in
# ccache, so the next run gets further). A test failure always fails.
# Usage: scripts/sanitize_ci.sh [extra ctest args]   (BUILD_DIR, JOBS override)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build-asan}"
JOBS="${JOBS:-$(nproc)}"
BUDGET="${SANITIZE_BUILD_BUDGET:-1500}"
TARGETS="${SANITIZE_TARGETS:-core_test quant_test model_test tokenizer_test tokenizer_pipeline_test jinja_test grammar_test auth_test}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
# UBSan only prints by default; halt so the test fails. Leaks are errors too.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLIBRI_TESTS=ON \
    -DCOLIBRI_BENCH=OFF -DCOLIBRI_WERROR=ON -DCOLIBRI_CUDA=OFF \
    -DCOLIBRI_SANITIZE=address,undefined > /dev/null
build=(cmake --build "$BUILD_DIR" -j "$JOBS")
[ "$TARGETS" != "all" ] && build+=(--target $TARGETS)
start=$SECONDS
rc=0
timeout "$BUDGET" "${build[@]}" > "$BUILD_DIR/ci-build.log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
  if [ "$rc" -eq 124 ]; then
    echo "sanitizers: build not finished within its ${BUDGET}s budget (cold ccache); suite skipped this run"
    exit 0
  fi
  tail -n 40 "$BUILD_DIR/ci-build.log"
  exit "$rc"
fi
echo "sanitizers: built $TARGETS in $((SECONDS - start))s"
# Tests of targets not built here are registered as <target>_NOT_BUILT: left out.
ctest --test-dir "$BUILD_DIR" -L unit -LE python -E '_NOT_BUILT$' --output-on-failure -j "$JOBS" "$@"
