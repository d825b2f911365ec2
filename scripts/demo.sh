#!/usr/bin/env bash
# From a fresh Debian 12 machine to a streamed chat completion:
# installs the packages, builds colibri, generates a small demo MoE model (random weights in the
# real Mixtral layout), converts it, starts colibri-server and streams a chat completion.
# Usage: scripts/demo.sh [--keep]     (--keep leaves the server running on port 8080)
set -euo pipefail
cd "$(dirname "$0")/.."
KEEP=0
[ "${1:-}" = "--keep" ] && KEEP=1
PORT="${PORT:-8080}"
DEMO_DIR="${DEMO_DIR:-$PWD/demo}"

scripts/install-deps.sh
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLIBRI_TESTS=OFF -DCOLIBRI_BENCH=OFF
cmake --build build -j "$(nproc)" --target colibri-server colibri-convert colibri-cli

echo "== generating a demo Mixtral-layout model (random weights) in $DEMO_DIR/hf"
/usr/bin/python3 tools/gen_tiny_model.py --out "$DEMO_DIR/hf" --preset demo --seed 0 >/dev/null
echo "== converting it (Q8_0) into $DEMO_DIR/demo"
build/bin/colibri-convert --input "$DEMO_DIR/hf" --output "$DEMO_DIR/demo" --quantize q8_0 --overwrite

echo "== starting colibri-server on port $PORT"
build/bin/colibri-server --model "$DEMO_DIR/demo" --port "$PORT" --expert-cache-size 64M &
SERVER=$!
trap '[ $KEEP = 1 ] || kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { echo "colibri-server exited"; exit 1; }
  sleep 0.1
done

echo "== streaming a chat completion (the weights are random, so the text is too)"
curl -sN "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "demo",
  "messages": [{"role": "user", "content": "Tell me about the sea."}],
  "max_tokens": 24, "temperature": 0.7, "seed": 1, "stream": true}'
echo
if [ $KEEP = 1 ]; then
  echo "== colibri-server keeps running (pid $SERVER): http://127.0.0.1:$PORT/v1"
  wait $SERVER
fi
