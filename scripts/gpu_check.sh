#!/usr/bin/env bash
# The prepared GPU run (one NVIDIA GPU, e.g. the H200 machine; ~8 minutes): builds the CUDA
# backend for this GPU's architecture only, runs every gpu-labelled test (kernel parity against
# the CPU, the engine end to end, the golden models) and the GPU bench, and writes everything to
# $OUT (default build-gpu/results): nvidia-smi.txt, build.log, ctest-gpu.log, ctest-gpu.xml,
# gpu_bench.md, gpu_bench.json, summary.txt. Exit status: 0 when the tests passed and the bench ran.
# Usage: scripts/gpu_check.sh [--arch 90] [--skip-build] [--bench-layers 4]
#   BUILD_DIR (build-gpu) is reused when it exists; --skip-build uses its binaries as they are.
set -uo pipefail
cd "$(dirname "$0")/.."
ARCH=90 SKIP_BUILD=0 LAYERS=4
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) ARCH="$2"; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --bench-layers) LAYERS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
BUILD_DIR="${BUILD_DIR:-build-gpu}"
OUT="${OUT:-$BUILD_DIR/results}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start ))s; }

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed (no driver?)"
head -15 "$OUT/nvidia-smi.txt"
NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"

status=0
if [ "$SKIP_BUILD" = 0 ]; then
  # Only what the gpu tests and the bench need; every core; one architecture (SASS + PTX).
  if ! timeout 300 cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLIBRI_TESTS=ON \
      -DCOLIBRI_BENCH=ON -DCOLIBRI_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
      > "$OUT/build.log" 2>&1; then
    note "configure FAILED ($(elapsed)); see build.log"; tail -30 "$OUT/build.log"; exit 1
  fi
  if ! timeout 330 cmake --build "$BUILD_DIR" -j "$(nproc)" --target cuda_backend_test gpu_engine_test \
      colibri-cli colibri-convert gpu_bench >> "$OUT/build.log" 2>&1; then
    note "build FAILED ($(elapsed)); see build.log"; tail -40 "$OUT/build.log"; exit 1
  fi
  note "build: ok ($(elapsed))"
fi

# gpu-labelled tests: kernel parity, engine end to end, golden models (python, needs numpy).
timeout 300 ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure --timeout 240 \
    --output-junit "$PWD/$OUT/ctest-gpu.xml" > "$OUT/ctest-gpu.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|Skipped|Failed|\*\*\*" "$OUT/ctest-gpu.log" | tail -40 | tee -a "$SUMMARY"
skipped=$(grep -c "(Skipped)" "$OUT/ctest-gpu.log" || true)
if [ $rc -ne 0 ]; then note "gpu tests FAILED (rc $rc, $(elapsed))"; status=1; else note "gpu tests: ok ($(elapsed))"; fi
if [ "$skipped" -gt 0 ]; then note "$skipped gpu tests SKIPPED (no device seen by the tests): not a GPU result"; status=1; fi

# Bench: matvec bandwidth vs peak, host->device copies, decode tokens/s (all experts in VRAM
# and a VRAM tier of a quarter of them).
timeout 240 "$BUILD_DIR/bin/gpu_bench" --layers "$LAYERS" --json "$OUT/gpu_bench.json" --dir "${TMPDIR:-/tmp}/colibri-gpu-bench" \
    > "$OUT/gpu_bench.md" 2>&1
rc=$?
cat "$OUT/gpu_bench.md"
if [ $rc -ne 0 ]; then note "gpu bench FAILED (rc $rc, $(elapsed))"; status=1; else note "gpu bench: ok ($(elapsed))"; fi
note "total $(elapsed)"
exit $status
