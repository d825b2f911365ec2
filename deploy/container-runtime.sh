#!/usr/bin/env bash
# Finds a container engine and OCI runtime that can run containers on this host, by running a
# trivial container (/bin/sh of this host, `echo`) with each candidate in turn:
#   docker        when its daemon answers (`docker info`): the daemon's default runtime;
#   podman crun   rootful podman with crun;
#   podman runc   rootful podman with runc.
# The first that prints the probe's line wins. Why try: crun 1.8 (Debian 12's, which podman
# brings) refuses a host whose cgroups are hybrid (v1 controllers with a v2 tree at
# /sys/fs/cgroup/unified): "cgroups in hybrid mode not supported, drop all controllers from
# cgroupv2", while runc runs there; a host with both installed cannot go by which one exists.
#
# Usage: deploy/container-runtime.sh [--containers-conf FILE] [--only ENGINE[:RUNTIME]]
#   stdout: the choice, "ENGINE RUNTIME" ("podman runc", "docker default"); stderr: the host's
#   cgroup layout and, for every candidate, why it was taken or passed over. Exit 1 when none
#   runs a container.
#   --containers-conf FILE: where podman's configuration is written (default: a temporary file,
#     removed): the runtime chosen, cgroupfs and file events (no systemd needed), and ulimits
#     under this host's hard limits (podman's defaults exceed lowered ones: "error setting rlimit
#     type 7: operation not permitted"). Use it as CONTAINERS_CONF=FILE podman / podman-compose.
#   --only ENGINE[:RUNTIME] (or COLIBRI_CONTAINER_ENGINE): try only that candidate ("docker",
#     "podman", "podman:runc").
set -euo pipefail
conf=""
only="${COLIBRI_CONTAINER_ENGINE:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --containers-conf) conf="${2:?--containers-conf needs a file}"; shift 2 ;;
    --only) only="${2:?--only needs ENGINE[:RUNTIME]}"; shift 2 ;;
    *) echo "container-runtime: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
case "$only" in
  ""|docker|podman|podman:crun|podman:runc) ;;
  *) echo "container-runtime: --only '$only': expected docker, podman, podman:crun or podman:runc" >&2; exit 2 ;;
esac

note() { echo "container-runtime: $*" >&2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
[ -n "$conf" ] || conf="$tmp/containers.conf"

cgroups="$(stat -fc %T /sys/fs/cgroup 2>/dev/null || echo unknown)"
case "$cgroups" in
  cgroup2fs) note "host cgroups: v2 (unified)" ;;
  tmpfs)
    if [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
      note "host cgroups: hybrid (v1 controllers, v2 at /sys/fs/cgroup/unified)"
    else
      note "host cgroups: v1"
    fi ;;
  *) note "host cgroups: $cgroups" ;;
esac

nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] && nproc=1048576
[ "$nofile" -gt 65536 ] && nofile=65536
[ "$nproc" -gt 32768 ] && nproc=32768
write_conf() {  # write_conf RUNTIME
  mkdir -p "$(dirname "$conf")"
  cat > "$conf" <<EOF
# Written by deploy/container-runtime.sh: podman with CONTAINERS_CONF=$conf
[containers]
default_ulimits = ["nofile=$((nofile * 4 / 5)):$((nofile * 4 / 5))", "nproc=$((nproc / 2)):$((nproc / 2))"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "$1"
EOF
}

# The probe image: this host's /bin/sh and the libraries it loads, nothing else.
probe_tar="$tmp/probe.tar"
mkdir -p "$tmp/rootfs/bin" "$tmp/rootfs/tmp"
cp -L /bin/sh "$tmp/rootfs/bin/sh"
for lib in $(ldd /bin/sh 2>/dev/null | grep -oE '/[^ ]+'); do
  mkdir -p "$tmp/rootfs$(dirname "$lib")"
  cp -L "$lib" "$tmp/rootfs$lib"
done
tar -C "$tmp/rootfs" -cf "$probe_tar" .
PROBE_IMAGE=localhost/colibri-runtime-probe:1
PROBE_LINE=colibri-runtime-probe-ok

# try ENGINE RUNTIME: 0 when a trivial container prints the probe line; else prints why.
try() {
  local engine="$1" runtime="$2" out
  local -a run=("$engine" run --rm)
  [ "$runtime" = default ] || run+=(--runtime "$runtime")
  if ! out=$("$engine" import - "$PROBE_IMAGE" < "$probe_tar" 2>&1); then
    echo "cannot import the probe image: $(printf '%s' "$out" | tail -n 1)"
    return 1
  fi
  out=$(timeout 120 "${run[@]}" "$PROBE_IMAGE" /bin/sh -c "echo $PROBE_LINE" 2>&1) || true
  "$engine" rmi -f "$PROBE_IMAGE" >/dev/null 2>&1 || true
  if printf '%s\n' "$out" | grep -qx "$PROBE_LINE"; then
    return 0
  fi
  echo "a trivial container fails: $(printf '%s' "$out" | grep -v '^$' | tail -n 1)"
  return 1
}

candidates=()
for c in docker podman:crun podman:runc; do
  case "$only" in ""|"$c"|"${c%%:*}") candidates+=("$c") ;; esac
done
for c in "${candidates[@]}"; do
  engine="${c%%:*}"
  if [ "$engine" = docker ]; then
    runtime=default
    if ! command -v docker >/dev/null; then note "docker: not installed"; continue; fi
    if ! out=$(timeout 20 docker info --format '{{.ServerVersion}}' 2>&1); then
      note "docker: no daemon answers ($(printf '%s' "$out" | grep -v '^$' | head -n 1))"
      continue
    fi
  else
    runtime="${c#*:}"
    if ! command -v podman >/dev/null; then note "podman $runtime: podman not installed"; continue; fi
    if ! command -v "$runtime" >/dev/null; then note "podman $runtime: $runtime not installed"; continue; fi
    [ "$(id -u)" -eq 0 ] || { note "podman $runtime: needs root (rootful podman)"; continue; }
    write_conf "$runtime"
    export CONTAINERS_CONF="$conf"
  fi
  if why=$(try "$engine" "$runtime"); then
    note "$engine $runtime: runs a trivial container: using it"
    echo "$engine $runtime"
    exit 0
  fi
  note "$engine $runtime: $why"
done
note "no container engine and runtime here can run a container (candidates: ${candidates[*]})"
exit 1
