#!/bin/sh
# The one-time model step of the compose stack (the `convert` service): makes the colibri model
# directory /models/$MODEL_NAME unless it is there already.
#   MODEL_SOURCE a path: converts /source/$MODEL_SOURCE (a Hugging Face directory or a .gguf
#   file, from the host directory MODEL_SOURCE_DIR) with --quantize $QUANTIZE.
#   MODEL_SOURCE "demo" (or empty): generates the demo model (random weights, Mixtral layout,
#   fixed seed) with tools/gen_tiny_model.py and converts that.
set -eu
name="${MODEL_NAME:-demo}"
out="/models/$name"
if [ -f "$out/manifest.json" ]; then
  echo "prepare-model: $out is ready"
  exit 0
fi
if [ -n "${MODEL_SOURCE:-}" ] && [ "$MODEL_SOURCE" != demo ]; then
  src="/source/$MODEL_SOURCE"
  [ -e "$src" ] || { echo "prepare-model: $src not found (MODEL_SOURCE_DIR/MODEL_SOURCE in .env)" >&2; exit 1; }
else
  src="$(mktemp -d)/hf"
  echo "prepare-model: generating the demo model (preset ${DEMO_PRESET:-demo}) in $src"
  python3 /usr/local/bin/gen_tiny_model.py --out "$src" --preset "${DEMO_PRESET:-demo}" --seed 0 >/dev/null
fi
echo "prepare-model: converting $src -> $out (--quantize ${QUANTIZE:-q8_0})"
# --overwrite: a directory without manifest.json is an interrupted earlier run.
exec colibri-convert --input "$src" --output "$out" --quantize "${QUANTIZE:-q8_0}" --name "$name" --overwrite
