#!/bin/sh
# Entrypoint of the compute and router images: waits until the model directory is complete
# (colibri-convert renames it into place whole, so manifest.json present means done), then runs
# the command. COLIBRI_MODEL: the model directory; COLIBRI_MODEL_WAIT: seconds (default 1800).
set -eu
# As PID 1 a shell ignores SIGTERM unless it traps it: stop promptly while waiting.
trap 'exit 143' TERM INT
model="${COLIBRI_MODEL:?COLIBRI_MODEL must name the model directory}"
wait_s="${COLIBRI_MODEL_WAIT:-1800}"
waited=0
while [ ! -f "$model/manifest.json" ]; do
  if [ "$waited" -ge "$wait_s" ]; then
    echo "wait-for-model: no model at $model after ${wait_s}s (did the convert service fail?)" >&2
    exit 1
  fi
  [ $((waited % 30)) -eq 0 ] && echo "wait-for-model: waiting for $model/manifest.json"
  sleep 1
  waited=$((waited + 1))
done
exec "$@"
