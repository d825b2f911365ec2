#!/usr/bin/env bash
# Installs every Debian 12 package colibri needs to build, test and benchmark.
# Usage: sudo scripts/install-deps.sh   (idempotent; safe to re-run)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git curl ca-certificates
  clang libclang-rt-14-dev clang-format-14
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev prometheus-cpp-dev liburing-dev libxxhash-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libpcre2-dev libutf8proc-dev
  libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-grpcio python3-protobuf python3-jinja2
  prometheus docker-compose python3-yaml python3-kubernetes  # tests/deploy: promtool, compose, k8s schemas
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
