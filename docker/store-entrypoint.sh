#!/bin/bash
# Entrypoint of the expert-store image: each replica claims a node directory on every disk,
# imports the model into it from the read-only models volume (once: the import is atomic and
# resumable, a finished one is skipped), then serves it.
#
# Disks: COLIBRI_DISKS, space-separated mount points (default "/data/disk0 /data/disk1"), each a
# volume or a host NVMe path shared by the replicas. A replica takes the first node-K directory
# whose lock it can hold (flock on <first disk>/node-K.lock, kept for the life of the server),
# so `docker compose up --scale expert-store=N` gives every replica its own stripes, and a
# restarted replica finds its finished import again.
# COLIBRI_MODEL: the converted model directory to import (empty: serve what the disks hold).
# Arguments: extra colibri-expert-store serving flags.
set -euo pipefail
trap 'exit 143' TERM INT  # PID 1: stop promptly while waiting or importing
read -r -a disks <<< "${COLIBRI_DISKS:-/data/disk0 /data/disk1}"
model="${COLIBRI_MODEL:-}"
max_nodes="${COLIBRI_MAX_NODES:-64}"

slot=""
for ((k = 0; k < max_nodes; k++)); do
  exec 9>>"${disks[0]}/node-$k.lock"
  if flock -n 9; then slot=$k; break; fi
  exec 9>&-
done
if [ -z "$slot" ]; then
  echo "store-entrypoint: all $max_nodes node directories on ${disks[0]} are in use" >&2
  exit 1
fi
disk_flags=()
for d in "${disks[@]}"; do
  mkdir -p "$d/node-$slot"
  disk_flags+=(--disk "$d/node-$slot")
done
echo "store-entrypoint: node-$slot on ${disks[*]}"

if [ -n "$model" ]; then
  /usr/local/bin/wait-for-model.sh true
  name="$(sed -n 's/^ *"name": *"\([^"]*\)".*/\1/p' "$model/manifest.json" | head -n 1)"
  if colibri-expert-store list "${disk_flags[@]}" 2>/dev/null | awk -v n="$name" '$1 == n && $2 == "ready" {f = 1} END {exit !f}'; then
    echo "store-entrypoint: model '$name' already imported"
  else
    colibri-expert-store import --model "$model" "${disk_flags[@]}" ${COLIBRI_STRIPE_SIZE:+--stripe-size "$COLIBRI_STRIPE_SIZE"}
  fi
fi
# fd 9 (the node lock) stays open in the server.
exec colibri-expert-store "${disk_flags[@]}" "$@"
