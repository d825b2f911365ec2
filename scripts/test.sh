#!/usr/bin/env bash
# Builds colibri with tests and runs the whole suite (unit, golden, integration).
# Usage: scripts/test.sh [extra ctest args]     (BUILD_DIR overrides the build directory)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
JOBS="${JOBS:-$(nproc)}"
# The CUDA backend is compiled whenever the CUDA toolkit is installed (its gpu-labelled tests
# skip without a GPU); COLIBRI_CUDA=ON|OFF in the environment overrides.
NVCC="$(command -v nvcc || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
CUDA_ARGS=(-DCOLIBRI_CUDA="${COLIBRI_CUDA:-$([ -n "$NVCC" ] && echo ON || echo OFF)}")
[ -n "$NVCC" ] && CUDA_ARGS+=(-DCMAKE_CUDA_COMPILER="$NVCC")
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLIBRI_TESTS=ON -DCOLIBRI_WERROR=ON \
    "${CUDA_ARGS[@]}"
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" "$@"
