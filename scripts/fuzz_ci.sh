#!/usr/bin/env bash
# CI: builds every libFuzzer target (tests/fuzz, clang, ASan + UBSan) into build-fuzz and runs
# each for a fixed time from its seed corpus (tests/fuzz/corpus/<target>/, copied to a temporary
# directory so the checkout is not modified). A crash, leak, timeout (-timeout, per input) or
# out-of-memory in any target fails the run; its reproducer is kept in $ARTIFACTS.
# Usage: scripts/fuzz_ci.sh [target ...]   (default: every target the build has)
#   FUZZ_SECONDS (60), FUZZ_TIMEOUT (10 s per input), BUILD_DIR, JOBS, ARTIFACTS override.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build-fuzz}"
JOBS="${JOBS:-$(nproc)}"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
FUZZ_TIMEOUT="${FUZZ_TIMEOUT:-10}"
ARTIFACTS="${ARTIFACTS:-$BUILD_DIR/fuzz-artifacts}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCOLIBRI_FUZZ=ON -DCOLIBRI_TESTS=OFF -DCOLIBRI_BENCH=OFF -DCOLIBRI_CUDA=OFF
targets=("$@")
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]:-fuzzers}"
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$BUILD_DIR"/fuzz/*_fuzz; do targets+=("$(basename "$f")"); done
fi
mkdir -p "$ARTIFACTS"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
  corpus="$work/$t"
  mkdir -p "$corpus"
  [ -d "tests/fuzz/corpus/$t" ] && cp -r "tests/fuzz/corpus/$t/." "$corpus/"
  echo "== $t: ${FUZZ_SECONDS}s from $(ls "$corpus" | wc -l) seeds"
  if ! "$BUILD_DIR/fuzz/$t" -max_total_time="$FUZZ_SECONDS" -timeout="$FUZZ_TIMEOUT" \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$t-" \
      "$corpus" > "$work/$t.log" 2>&1; then
    tail -n 60 "$work/$t.log"
    failed+=("$t")
  else
    grep -E '^stat::number_of_executed_units|^Done' "$work/$t.log" || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing failed: ${failed[*]} (reproducers in $ARTIFACTS)" >&2
  exit 1
fi
echo "fuzzing passed: ${targets[*]}"
