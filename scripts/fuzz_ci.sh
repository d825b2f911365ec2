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
# Each target is built in tests/fuzz/CMakeLists.txt's order (cheapest first) within a fixed
# budget (FUZZ_BUILD_BUDGET seconds, default 900): with a warm ccache every one builds in
# minutes; on a cold cache the ones not built in time are named and skipped for this run (what
# was compiled stays in ccache). A crash in a target that built always fails.
BUILD_BUDGET="${FUZZ_BUILD_BUDGET:-900}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^colibri_add_fuzzer(\([a-z0-9_]*\) .*/\1/p' tests/fuzz/CMakeLists.txt)
fi
built=()
skipped=()
deadline=$((SECONDS + BUILD_BUDGET))
for t in "${targets[@]}"; do
  left=$((deadline - SECONDS))
  if [ "$left" -le 0 ]; then
    skipped+=("$t")
    continue
  fi
  rc=0
  timeout "$left" cmake --build "$BUILD_DIR" -j "$JOBS" --target "$t" > "$BUILD_DIR/build-$t.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    built+=("$t")
  elif [ "$rc" -eq 124 ]; then
    skipped+=("$t")
  else
    tail -n 40 "$BUILD_DIR/build-$t.log"
    exit 1
  fi
done
if [ ${#skipped[@]} -gt 0 ]; then
  echo "fuzzing: not built within the ${BUILD_BUDGET}s budget (cold ccache), skipped this run: ${skipped[*]}"
fi
targets=("${built[@]}")
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
echo "fuzzing passed: ${targets[*]:-none built}"
