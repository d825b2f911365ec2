#!/usr/bin/env bash
# Smoke test of the compose stack (no registry needed), with Docker or podman:
#  0. installs what it needs from Debian (debootstrap; podman, podman-compose and runc unless a
#     Docker daemon answers) and picks the engine and OCI runtime with deploy/container-runtime.sh,
#     which runs a trivial container with each candidate (docker, podman+crun, podman+runc) and
#     says which one it takes and why; then checks the override (COLIBRI_CONTAINER_ENGINE) agrees:
#     the chosen candidate alone gives the same choice, each one refused is refused alone too,
#  1. makes a local Debian 12 base image with debootstrap (once; reused while it exists),
#  2. builds the colibri images from docker/ (ccache shared with the host's builds under podman,
#     a BuildKit cache mount under Docker), and a Prometheus image from Debian's package; podman's
#     builds get their runtime and ulimits from CONTAINERS_CONF only, as docs/DEPLOYMENT.md says,
#  3. brings deploy/docker-compose.yml up (Grafana left out: Debian has no package of it; the
#     dashboards are checked by tests/deploy instead), with 2 store nodes,
#  4. sends a chat completion and a completion through the router; the completion's tokens must
#     equal colibri-cli's on the same model (the embedded engine reading the model directory),
#  5. scales the store nodes from 2 to 3; compute must discover the third by DNS and read from it
#     (without a restart), Prometheus must have every target up, the answer must not change,
#  6. scales back to 2 while two clients send requests: no request may fail, and the answers
#     after the removal must have read expert bytes from the 2 remaining stores,
#  7. restarts compute (KV persistence on, in the compute-state volume): the next turn of a
#     conversation from before the restart prefills only its new tokens (usage.cached_tokens,
#     colibri_compute_kv_restored_tokens_total and colibri_compute_prompt_tokens_total agree),
#  8. checks Prometheus: every target up (2 stores, compute, router, itself), every rule evaluating
#     without error, the recording rules the traffic feeds holding values,
#  9. runs every service container's health check, and tears everything down (KEEP=1 leaves it up).
#
# Usage: deploy/smoke.sh   as root (podman runs rootful; sudo when not root already). About 3
#        minutes with warm caches; a first run is the compile (docs/DEPLOYMENT.md: timings).
# Environment: KEEP=1, WORK_DIR (default /var/tmp/colibri-smoke), DEBIAN_MIRROR, CCACHE_DIR,
#              COLIBRI_CONTAINER_ENGINE (docker | podman | podman:runc ...: try only that one),
#              SMOKE_ROUTER_PORT (18080), SMOKE_PROMETHEUS_PORT (19090), SMOKE_TIMEOUT (600 s),
#              SMOKE_BUILD_BUDGET (seconds for the image builds; unset: no limit),
#              SMOKE_CONTEXT (the images' build context; default: this checkout — point it at a
#              clean tree, e.g. `git archive HEAD | tar -x -C DIR`, while the checkout is mid-edit).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
WORK="${WORK_DIR:-/var/tmp/colibri-smoke}"
PROJECT=colibri-smoke
TAG=smoke
BASE_IMAGE=localhost/colibri-debian:bookworm
ROUTER_PORT="${SMOKE_ROUTER_PORT:-18080}"
PROM_PORT="${SMOKE_PROMETHEUS_PORT:-19090}"
ROUTER="http://127.0.0.1:$ROUTER_PORT"
PROM="http://127.0.0.1:$PROM_PORT"
TIMEOUT="${SMOKE_TIMEOUT:-600}"
CCACHE_HOST="${CCACHE_DIR:-$HOME/.cache/ccache}"
CONTEXT="$(cd "${SMOKE_CONTEXT:-$REPO}" && pwd)"
PY=/usr/bin/python3
CLIENT="$REPO/deploy/smoke/client.py"
T0=$(date +%s)
declare -a TIMES=()

say() { printf '== [%4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
phase_start() { PHASE="$1"; PHASE_T=$(date +%s); say "$1"; }
phase_end() {
  TIMES+=("$(printf '%-38s %5ss' "$PHASE" "$(( $(date +%s) - PHASE_T ))")")
  [ "$PHASE" != "images ($ENGINE build)" ] || TIMES+=("${IMAGE_TIMES[@]}")
}
die() { echo "smoke: FAILED: $*" >&2; exit 1; }
# Exit 77: this host cannot run the test (no container runtime that works, no root, or the image
# builds did not finish within SMOKE_BUILD_BUDGET): not a failure of what is tested.
cannot() { echo "smoke: SKIPPED: $*" >&2; exit 77; }
client() { $PY "$CLIENT" "$@"; }
mkdir -p "$WORK/logs" "$CCACHE_HOST"
ENGINE=""; RUNTIME=""; COMPOSE=(); LOAD_PID=""

# The project's containers (running or not), by compose labels (podman-compose sets Docker's).
ctr() { "$ENGINE" "$@"; }
compose() { "${COMPOSE[@]}" -p "$PROJECT" "$@"; }
project_containers() {  # project_containers [--filter ...]...
  ctr ps -a --format '{{.Names}}' --filter "label=com.docker.compose.project=$PROJECT" "$@"
}
service_container() {  # service_container SERVICE [NUMBER]
  project_containers --filter "label=com.docker.compose.service=$1" \
    --filter "label=com.docker.compose.container-number=${2:-1}"
}
remove_project() {  # whatever compose left behind (podman-compose stops at the first error)
  project_containers | xargs -r "$ENGINE" rm -f >/dev/null 2>&1 || true
  ctr volume ls -q | grep "^${PROJECT}_" | xargs -r "$ENGINE" volume rm -f >/dev/null 2>&1 || true
}
save_logs() {
  for c in $(project_containers); do ctr logs "$c" > "$WORK/logs/$c.log" 2>&1 || true; done
}
cleanup() {
  local rc=$?
  [ -n "$LOAD_PID" ] && { touch "$WORK/load.stop"; wait "$LOAD_PID" 2>/dev/null || true; }
  if [ "${KEEP:-0}" = 1 ]; then
    say "KEEP=1: the stack stays up (router $ROUTER, prometheus $PROM); tear down with:"
    say "  cd $WORK/stack && ${CONTAINERS_CONF:+CONTAINERS_CONF=$CONTAINERS_CONF }STORE_REPLICAS=3 ${COMPOSE[*]} -p $PROJECT down -v"
  elif [ -f "$WORK/stack/docker-compose.yml" ] && [ ${#COMPOSE[@]} -gt 0 ]; then
    save_logs
    (cd "$WORK/stack" && STORE_REPLICAS=3 compose down -v >/dev/null 2>&1) || true
    remove_project
  fi
  echo
  echo "smoke timings (${ENGINE:-no engine}${RUNTIME:+ with $RUNTIME}):"
  for t in "${TIMES[@]}"; do echo "  $t"; done
  echo "  total                                  $(( $(date +%s) - T0 ))s"
  [ $rc -eq 0 ] && echo "smoke: PASSED" || echo "smoke: FAILED (rc $rc); logs in $WORK/logs"
}
trap cleanup EXIT
# A signal (CI's timeout sends TERM) must end in a failed exit status, which cleanup reports.
trap 'exit 143' TERM
trap 'exit 130' INT

# --- 0. packages and the container runtime ---------------------------------------------------
phase_start "packages + container runtime"
docker_answers() { command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; }
want=(debootstrap)
case "${COLIBRI_CONTAINER_ENGINE:-}" in
  docker) ;;
  podman*) want+=(podman podman-compose runc) ;;
  *) docker_answers || want+=(podman podman-compose runc) ;;
esac
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || cannot "${missing[*]} missing: run as root (sudo $0) to install them"
  say "installing ${missing[*]} from Debian"
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${missing[@]}"; }
  # A fresh machine may have no package lists yet.
  apt_install > "$WORK/logs/apt.log" 2>&1 || { apt-get update -qq && apt_install > "$WORK/logs/apt.log" 2>&1; } ||
    { tail -n 20 "$WORK/logs/apt.log"; die "apt-get install ${missing[*]}"; }
fi
CONTAINERS_CONF="$WORK/containers.conf"
choice=$("$REPO/deploy/container-runtime.sh" --containers-conf "$CONTAINERS_CONF" 2> "$WORK/logs/runtime.log") ||
  { cat "$WORK/logs/runtime.log" >&2
    cannot "no container runtime runs a trivial container here (a Docker daemon that cannot: COLIBRI_CONTAINER_ENGINE=podman)"; }
sed 's/^/  /' "$WORK/logs/runtime.log"
read -r ENGINE RUNTIME <<< "$choice"
say "  engine: $ENGINE, runtime: $RUNTIME"
# The override a user sets (COLIBRI_CONTAINER_ENGINE, or the probe's --only) must say the same as
# the full probe: the candidate it chose runs alone, and each one it passed over because a
# container failed (crun on a hybrid host) is refused alone, with the same reason.
only() { case "$1" in docker*) echo docker ;; *) echo "$1" ;; esac; }
chosen=$(only "$ENGINE:$RUNTIME")
COLIBRI_CONTAINER_ENGINE="$chosen" "$REPO/deploy/container-runtime.sh" > "$WORK/logs/runtime-only.out" \
  2> "$WORK/logs/runtime-only.log" && [ "$(cat "$WORK/logs/runtime-only.out")" = "$choice" ] ||
  { cat "$WORK/logs/runtime-only.log"; die "COLIBRI_CONTAINER_ENGINE=$chosen does not give '$choice'"; }
say "  COLIBRI_CONTAINER_ENGINE=$chosen: $choice"
for c in $(sed -n 's/^container-runtime: \([a-z]*\) \([a-z]*\): a trivial container fails.*/\1:\2/p' "$WORK/logs/runtime.log"); do
  c=$(only "$c")
  log="$WORK/logs/runtime-only-${c/:/-}.log"
  ! COLIBRI_CONTAINER_ENGINE="$c" "$REPO/deploy/container-runtime.sh" > /dev/null 2> "$log" ||
    die "COLIBRI_CONTAINER_ENGINE=$c runs a container, where the probe found it failing"
  why=$(grep -o 'a trivial container fails: .*' "$log" || true)
  [ -n "$why" ] && grep -qF "$why" "$WORK/logs/runtime.log" ||
    { cat "$log"; die "COLIBRI_CONTAINER_ENGINE=$c is refused for another reason than the probe's"; }
  say "  COLIBRI_CONTAINER_ENGINE=$c: refused (exit 1), $why"
done
if [ "$ENGINE" = podman ]; then
  [ "$(id -u)" -eq 0 ] || cannot "podman runs rootful here: run as root (sudo $0)"
  export CONTAINERS_CONF
  COMPOSE=(podman-compose)
else
  unset CONTAINERS_CONF
  if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose); else COMPOSE=(docker-compose); fi
fi
phase_end

# --- 1. base image ---------------------------------------------------------------------------
phase_start "base image (debootstrap)"
if ! ctr image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  mirror="${DEBIAN_MIRROR:-$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
            | head -n 1 | grep -oE 'https?://[^ ]+' || true)}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" > "$WORK/logs/debootstrap.log" 2>&1 ||
    die "debootstrap from $mirror (see $WORK/logs/debootstrap.log)"
  # The image's apt uses the same mirror as this host.
  echo "deb $mirror bookworm main" > "$WORK/rootfs/etc/apt/sources.list"
  echo "deb $mirror bookworm-updates main" >> "$WORK/rootfs/etc/apt/sources.list"
  tar -C "$WORK/rootfs" -c . | ctr import - "$BASE_IMAGE" >/dev/null
  rm -rf "$WORK/rootfs"
fi
phase_end

# --- 2. images -------------------------------------------------------------------------------
phase_start "images ($ENGINE build)"
BUILD_DEADLINE=$(( $(date +%s) + ${SMOKE_BUILD_BUDGET:-1000000000} ))
# The host cache's size limit (its ccache.conf or CCACHE_MAXSIZE), for the builds that mount it.
CCACHE_LIMIT=$(CCACHE_DIR="$CCACHE_HOST" ccache -k max_size 2>/dev/null || echo "${CCACHE_MAXSIZE:-}")
build() {  # build IMAGE DOCKERFILE
  local left=$(( BUILD_DEADLINE - $(date +%s) ))
  [ "$left" -gt 0 ] || cannot "the image builds did not finish within SMOKE_BUILD_BUDGET=${SMOKE_BUILD_BUDGET}s (a cold compile; ccache keeps what it compiled for the next run)"
  local -a limit=(timeout -k 30 "$left")
  local log
  log="$WORK/logs/build-$(basename "$1" | cut -d: -f1).log"
  local -a args=(-f "$2" --build-arg BASE="$BASE_IMAGE" --build-arg RUNTIME_BASE="$BASE_IMAGE" -t "$1")
  if [ "$ENGINE" = podman ]; then
    # The build's RUN steps get the runtime and the ulimits from CONTAINERS_CONF alone, as in
    # docs/DEPLOYMENT.md's podman commands (without it, runc/crun fail on this host's limits or
    # cgroups). Docker's format keeps the images' HEALTHCHECK; the host's ccache is mounted.
    args+=(--format docker -v "$CCACHE_HOST:/ccache")
    [ -z "$CCACHE_LIMIT" ] || args+=(--build-arg CCACHE_MAXSIZE="$CCACHE_LIMIT")
    # ccache hashes the locale: the host's, so its builds' objects hit in the image's build.
    [ -z "${LANG:-}" ] || args+=(--build-arg LANG="$LANG")
    [ -z "${LC_ALL:-}" ] || args+=(--build-arg LC_ALL="$LC_ALL")
    local rc=0
    "${limit[@]}" podman build "${args[@]}" "$CONTEXT" > "$log" 2>&1 || rc=$?
  else
    local rc=0
    DOCKER_BUILDKIT=1 "${limit[@]}" docker build "${args[@]}" "$CONTEXT" > "$log" 2>&1 || rc=$?
    if grep -q "buildx component is missing" "$log"; then
      cannot "docker build: this Docker client ($(docker version --format '{{.Client.Version}}' 2>/dev/null)) needs the buildx plugin for BuildKit (the Dockerfiles' cache mount); install it, use a client of Docker 20.10-22 (Debian 12's docker.io), or COLIBRI_CONTAINER_ENGINE=podman"
    fi
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    cannot "building $1 ran past SMOKE_BUILD_BUDGET=${SMOKE_BUILD_BUDGET}s (a cold compile; ccache keeps what it compiled for the next run)"
  fi
  [ "$rc" -eq 0 ] || { tail -n 30 "$log"; die "$ENGINE build $2"; }
}
IMAGE_TIMES=()
timed_build() {  # timed_build NAME DOCKERFILE: build, and keep how long it took for the summary
  local t=$(date +%s)
  build "localhost/colibri-$1:$TAG" "$2"
  IMAGE_TIMES+=("$(printf '  image colibri-%-22s %5ss' "$1" "$(( $(date +%s) - t ))")")
  say "  built localhost/colibri-$1:$TAG in $(( $(date +%s) - t ))s"
}
for svc in expert-store compute router tools; do
  timed_build "$svc" "$CONTEXT/docker/Dockerfile.$svc"
done
timed_build prometheus "$REPO/deploy/smoke/Dockerfile.prometheus"
grep -hE '^ *(Hits|Misses):' "$WORK"/logs/build-colibri-*.log | sed 's/^ */  ccache of the compile: /' || true
ctr images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "colibri-.*:$TAG" | sed 's/^/  /'
phase_end

# --- 3. stack up -----------------------------------------------------------------------------
phase_start "stack up (2 store nodes)"
# A copy of deploy/ with its own .env, so a user's deploy/.env never mixes in.
rm -rf "$WORK/stack"
mkdir -p "$WORK/stack"
cp -r "$REPO"/deploy/docker-compose.yml "$REPO"/deploy/prometheus.yml "$REPO"/deploy/prometheus "$REPO"/deploy/grafana \
  "$WORK/stack/"
cat > "$WORK/stack/.env" <<EOF
IMAGE_PREFIX=localhost/colibri
IMAGE_TAG=$TAG
PROMETHEUS_IMAGE=localhost/colibri-prometheus:$TAG
MODEL_NAME=demo
DEMO_PRESET=micro
QUANTIZE=f32
EXPERT_CACHE_SIZE=300K
COMPUTE_THREADS=2
ROUTER_PORT=$ROUTER_PORT
ROUTER_GRPC_PORT=$((ROUTER_PORT + 1))
PROMETHEUS_PORT=$PROM_PORT
GRAFANA_ADMIN_PASSWORD=$(openssl rand -hex 12)
COLIBRI_API_KEY=
EOF
cd "$WORK/stack"
STORE_REPLICAS=3 compose down -v >/dev/null 2>&1 || true
remove_project
SERVICES=(convert expert-store compute router prometheus)
# podman-compose 1.0 ignores --scale: the compose file's replica count (STORE_REPLICAS) is the
# knob there; Docker's `up --scale` is the documented one.
scale_stores() {  # scale_stores N LOG
  if [ "$ENGINE" = podman ]; then
    STORE_REPLICAS="$1" compose up -d "${SERVICES[@]}"
  else
    compose up -d --no-build --scale "expert-store=$1" "${SERVICES[@]}"
  fi > "$2" 2>&1
}
scale_stores 2 "$WORK/logs/compose-up.log" || { tail -n 30 "$WORK/logs/compose-up.log"; die "compose up"; }

# Waits until `cmd` succeeds, up to TIMEOUT seconds.
wait_for() {  # wait_for WHAT CMD...
  local what="$1"; shift
  local deadline=$(( $(date +%s) + TIMEOUT ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      save_logs
      for c in $(project_containers); do echo "--- $c"; tail -n 8 "$WORK/logs/$c.log"; done
      die "timed out waiting for $what"
    fi
    sleep 1
  done
}
promql() { client promql "$PROM" "$1"; }
promql_eq() { [ "$(promql "$1")" = "$2" ]; }
wait_for "the router's /health" client health "$ROUTER/health"
phase_end

# --- 4. answers ------------------------------------------------------------------------------
phase_start "chat completion + reference"
PROMPT_IDS="1,275,290,300,13,350,400,268,281,450,511,32,100,269,300,301"
ANSWER1=$(client ask "$ROUTER" "$PROMPT_IDS") || die "requests through the router"
say "  router: $ANSWER1"
REFERENCE=$(ctr run --rm -v "${PROJECT}_models:/models:ro" "localhost/colibri-tools:$TAG" \
  colibri-cli run --model /models/demo --prompt-tokens "$PROMPT_IDS" --max-tokens 16 --temperature 0 --threads 2 \
  2>"$WORK/logs/reference.log" | tail -n 1) || { cat "$WORK/logs/reference.log"; die "colibri-cli reference"; }
say "  colibri-cli (embedded, model dir): $REFERENCE"
$PY - "$ANSWER1" "$REFERENCE" <<'EOF' || die "the cluster's completion differs from colibri-cli's"
import json, sys
got, ref = json.loads(sys.argv[1])['completion'], json.loads(sys.argv[2])
ref = ref['tokens'] if isinstance(ref, dict) else ref
assert got == ref, f'cluster {got} != reference {ref}'
EOF
phase_end

phase_start "prometheus targets (2 stores)"
wait_for "compute to use 2 stores" promql_eq 'count(colibri_compute_store_up == 1)' 2
wait_for "Prometheus: 2 store, 1 compute, 1 router targets up" \
  promql_eq 'count(up{job=~"colibri-.*"} == 1)' 4
phase_end

# --- 5. scale the store nodes 2 -> 3 ---------------------------------------------------------
phase_start "scale expert-store 2 -> 3"
stores_running() { project_containers --filter status=running --filter "label=com.docker.compose.service=expert-store" | wc -l; }
scale_stores 3 "$WORK/logs/compose-scale-up.log" || true
[ "$(stores_running)" = 3 ] || { tail -n 20 "$WORK/logs/compose-scale-up.log"; die "a third store container did not start"; }
wait_for "compute to discover the third store (no restart)" promql_eq 'count(colibri_compute_store_up == 1)' 3
wait_for "Prometheus: 3 store targets up" promql_eq 'count(up{job="colibri-expert-store"} == 1)' 3
# Traffic until the new store has delivered expert bytes to compute.
new_store_reads() { client ask "$ROUTER" "$PROMPT_IDS" >/dev/null; [ "$(promql 'count(colibri_compute_store_received_bytes_total > 0)')" = 3 ]; }
wait_for "compute to read from all 3 stores" new_store_reads
ANSWER2=$(client ask "$ROUTER" "$PROMPT_IDS") || die "requests after scaling"
[ "$ANSWER2" = "$ANSWER1" ] || die "answer changed after scaling: $ANSWER1 -> $ANSWER2"
COMPUTE=$(service_container compute)
say "  same answer with 3 stores; compute restarts: $(ctr inspect --format '{{.RestartCount}}' "$COMPUTE")"
[ "$(ctr inspect --format '{{.RestartCount}}' "$COMPUTE")" = 0 ] || die "compute restarted"
phase_end

# --- 6. scale back 3 -> 2 while serving ------------------------------------------------------
phase_start "scale expert-store 3 -> 2 under load"
rm -f "$WORK/load.stop" "$WORK/load.json" "$WORK/load.json.count"
client load "$ROUTER" "$PROMPT_IDS" "$WORK/load.json" "$WORK/load.stop" & LOAD_PID=$!
load_done() { cat "$WORK/load.json.count" 2>/dev/null || echo 0; }
load_beyond() { [ "$(load_done)" -ge "$1" ]; }
wait_for "the load clients' first answers" load_beyond 4
STORE3=$(service_container expert-store 3)
# docs/DEPLOYMENT.md names the replica to remove by podman-compose's rule: PROJECT_SERVICE_N.
[ "$ENGINE" != podman ] || [ "$STORE3" = "${PROJECT}_expert-store_3" ] ||
  die "the third store is '$STORE3', not ${PROJECT}_expert-store_3 as docs/DEPLOYMENT.md says"
REMOVE_T0=$(date +%s.%N)
if [ "$ENGINE" = podman ]; then
  # podman-compose 1.0 does not scale down: stop (SIGTERM, 10 s grace) and remove the replica.
  # (stderr to the log: without systemd, podman complains it cannot remove a health-check timer)
  { podman stop -t 10 "$STORE3" && podman rm "$STORE3"; } > "$WORK/logs/compose-scale-down.log" 2>&1 ||
    { cat "$WORK/logs/compose-scale-down.log"; die "removing $STORE3"; }
else
  compose up -d --no-build --scale expert-store=2 "${SERVICES[@]}" > "$WORK/logs/compose-scale-down.log" 2>&1
fi
REMOVE_T1=$(date +%s.%N)
[ "$(stores_running)" = 2 ] || die "expected 2 store containers after scaling down"
wait_for "compute to mark the removed store down" promql_eq 'count(colibri_compute_store_up == 1)' 2
wait_for "8 more answers with 2 stores" load_beyond $(( $(load_done) + 8 ))
touch "$WORK/load.stop"; wait "$LOAD_PID"; LOAD_PID=""
LOAD_END=$(date +%s)
REPORT=$(client load-report "$WORK/load.json" "$REMOVE_T0" "$REMOVE_T1") || die "requests failed while a store was removed"
say "  $REPORT"
# The answers after the removal must have read experts from the 2 remaining stores (a cache
# holding every expert would make removing a store trivial): their bytes at a scrape after the
# load ended less their bytes at the removal, with PromQL's @ modifier.
wait_for "Prometheus to scrape compute after the load" \
  promql_eq "count(timestamp(colibri_compute_requests_total) > $LOAD_END)" 1
UP='and on(store) colibri_compute_store_up == 1'
READ=$(promql "sum(colibri_compute_store_received_bytes_total $UP) - sum(colibri_compute_store_received_bytes_total @ $REMOVE_T1 $UP)")
say "  compute read ${READ:-no} bytes from the 2 remaining stores after the removal"
$PY -c 'import sys; sys.exit(not float(sys.argv[1] or 0) > 0)' "${READ:-0}" ||
  die "compute read nothing from the remaining stores after the removal: the load did not exercise them"
say "  compute failovers: $(promql 'sum(colibri_compute_store_failovers_total)')"
phase_end

# --- 7. compute restart with KV persistence ------------------------------------------------------
phase_start "compute restart, KV persisted"
TURN1='[{"role": "user", "content": "Tell me about the sea."}]'
FIRST=$(client chat "$ROUTER" "$TURN1" 6) || die "turn 1 before the restart"
TURN2=$($PY - "$TURN1" "$FIRST" <<'EOF'
import json, sys
msgs, first = json.loads(sys.argv[1]), json.loads(sys.argv[2])
msgs += [{'role': 'assistant', 'content': first['choices'][0]['message']['content']},
         {'role': 'user', 'content': 'And the mountains?'}]
print(json.dumps(msgs))
EOF
)
STARTED=$(ctr inspect --format '{{.State.StartedAt}}' "$COMPUTE")
compose restart compute > "$WORK/logs/compose-restart.log" 2>&1 || { cat "$WORK/logs/compose-restart.log"; die "compose restart compute"; }
[ "$(ctr inspect --format '{{.State.StartedAt}}' "$COMPUTE")" != "$STARTED" ] || die "compute did not restart"
# A fresh process has answered no request yet; Prometheus scraping 0 means it sees the new one.
wait_for "Prometheus to scrape the restarted compute" promql_eq 'colibri_compute_requests_total' 0
SECOND=$(client chat "$ROUTER" "$TURN2" 8 "$TIMEOUT") || die "turn 2 after the restart"
read -r P1 P2 CACHED UNAVAILABLE <<< "$($PY - "$FIRST" "$SECOND" <<'EOF'
import json, sys
first, second = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(first['usage']['prompt_tokens'], second['usage']['prompt_tokens'],
      second['usage']['prompt_tokens_details']['cached_tokens'], second['smoke_unavailable_answers'])
EOF
)"
say "  turn 1: $P1 prompt tokens; turn 2 after the restart: $P2 prompt tokens, $CACHED from the persisted KV ($UNAVAILABLE 503s while compute came back)"
[ "$CACHED" -ge $((P1 - 1)) ] && [ "$CACHED" -lt "$P2" ] || die "turn 2 reused $CACHED of turn 1's $P1 prompt tokens"
wait_for "compute to count $CACHED restored tokens" promql_eq 'colibri_compute_kv_restored_tokens_total' "$CACHED"
wait_for "compute to have prefilled only the $((P2 - CACHED)) new tokens" \
  promql_eq 'colibri_compute_prompt_tokens_total' "$((P2 - CACHED))"
phase_end

# --- 8. Prometheus: targets and rules -------------------------------------------------------
phase_start "prometheus targets + rules"
wait_for "every target up: 2 stores, compute, router, Prometheus" client targets "$PROM" \
  colibri-expert-store=2 colibri-compute=1 colibri-router=1 prometheus=1
REPORT=$(client targets "$PROM" colibri-expert-store=2 colibri-compute=1 colibri-router=1 prometheus=1) || die "targets"
say "  targets up: $REPORT"
RECORDS=(colibri:router_completion_tokens:rate1m colibri:router_prompt_tokens:rate1m colibri:router_requests:rate1m
         colibri:router_time_to_first_token_seconds:p95 colibri:compute_generated_tokens:rate1m
         colibri:compute_pending_requests:ratio colibri:expert_cache_lookups:rate5m colibri:expert_cache_hit_ratio:rate5m
         colibri:store_disk_read_bytes:rate1m colibri:store_bytes_served:rate1m
         colibri:compute_store_received_bytes:rate1m)
# The restarted compute's rates need two scrapes of traffic: keep asking until every one has a value.
rules_answer() { client ask "$ROUTER" "$PROMPT_IDS" >/dev/null; client rules "$PROM" "${RECORDS[@]}"; }
wait_for "every rule evaluating and ${#RECORDS[@]} recording rules with values" rules_answer
REPORT=$(client rules "$PROM" "${RECORDS[@]}") || die "rules"
say "  rules: $REPORT"
phase_end

# --- 9. health checks ------------------------------------------------------------------------
phase_start "container health checks"
for c in $(service_container expert-store 1) $(service_container expert-store 2) "$COMPUTE" "$(service_container router)"; do
  ctr exec "$c" sh -c "$(ctr inspect --format '{{join .Config.Healthcheck.Test " "}}' "$c" | sed 's/^CMD //; s/^CMD-SHELL //')" \
    > "$WORK/logs/health-$c.log" 2>&1 || { cat "$WORK/logs/health-$c.log"; die "health check of $c"; }
  say "  $c: $(tail -n 1 "$WORK/logs/health-$c.log")"
done
say "  alerts firing: $(promql 'count(ALERTS{alertstate="firing"})')"
phase_end
save_logs
