#!/usr/bin/env bash
# Smoke test of the compose stack with podman (no Docker engine or registry needed):
#  1. makes a local Debian 12 base image with debootstrap (once; reused while it exists),
#  2. builds the colibri images from docker/ with podman (ccache shared with the host's builds),
#     and a Prometheus image from Debian's package,
#  3. brings deploy/docker-compose.yml up with podman-compose (Grafana left out: Debian has no
#     package of it; the dashboards are checked by tests/deploy instead), with 2 store nodes,
#  4. sends a chat completion and a completion through the router; the completion's tokens must
#     equal colibri-cli's on the same model (the embedded engine reading the model directory),
#  5. scales the store nodes from 2 to 3; compute must discover the third by DNS and read from it
#     (without a restart), Prometheus must have every target up, the answer must not change,
#  6. runs every container's health check, and tears everything down (KEEP=1 leaves it up).
#
# Usage: sudo deploy/smoke.sh     (root: rootful podman; about 1-2 minutes with warm caches,
#                                 ~15 minutes for the first image build on 2 cores)
# Environment: KEEP=1, WORK_DIR (default /var/tmp/colibri-smoke), DEBIAN_MIRROR, CCACHE_DIR,
#              SMOKE_ROUTER_PORT (18080), SMOKE_PROMETHEUS_PORT (19090), SMOKE_TIMEOUT (600 s),
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
TIMEOUT="${SMOKE_TIMEOUT:-600}"
CCACHE_HOST="${CCACHE_DIR:-$HOME/.cache/ccache}"
CONTEXT="$(cd "${SMOKE_CONTEXT:-$REPO}" && pwd)"
PY=/usr/bin/python3
T0=$(date +%s)
declare -a TIMES=()

say() { printf '== [%4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
phase_start() { PHASE="$1"; PHASE_T=$(date +%s); say "$1"; }
phase_end() { TIMES+=("$(printf '%-34s %5ss' "$PHASE" "$(( $(date +%s) - PHASE_T ))")"); }
die() { echo "smoke: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (rootful podman): sudo $0"
missing=()
for p in podman podman-compose debootstrap runc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
mkdir -p "$WORK" "$CCACHE_HOST"

# Podman in a sandbox: the default open-file and process limits podman asks for exceed the
# lowered hard limits here (runc: "error setting rlimit type 7: operation not permitted"), so
# ask for what the limits allow; cgroupfs and file events work without systemd; runc when crun
# is absent.
nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] && nproc=1048576
[ "$nofile" -gt 65536 ] && nofile=65536
[ "$nproc" -gt 32768 ] && nproc=32768
runtime=crun; command -v crun >/dev/null || runtime=runc
cat > "$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$((nofile * 4 / 5)):$((nofile * 4 / 5))", "nproc=$((nproc / 2)):$((nproc / 2))"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "$runtime"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"

# Whatever podman-compose left behind (it stops at the first error).
remove_project() {
  podman ps -aq --filter "label=io.podman.compose.project=$PROJECT" | xargs -r podman rm -f >/dev/null 2>&1 || true
  podman volume ls -q | grep "^${PROJECT}_" | xargs -r podman volume rm -f >/dev/null 2>&1 || true
}
cleanup() {
  local rc=$?
  if [ "${KEEP:-0}" = 1 ]; then
    say "KEEP=1: the stack stays up (router http://127.0.0.1:$ROUTER_PORT, prometheus :$PROM_PORT);"
    say "tear down with: cd $WORK/stack && CONTAINERS_CONF=$CONTAINERS_CONF podman-compose -p $PROJECT down -v"
  else
    if [ -f "$WORK/stack/docker-compose.yml" ]; then
      (cd "$WORK/stack" && STORE_REPLICAS=3 podman-compose -p "$PROJECT" down -v >/dev/null 2>&1) || true
      remove_project
    fi
  fi
  echo
  echo "smoke timings:"
  for t in "${TIMES[@]}"; do echo "  $t"; done
  echo "  total                              $(( $(date +%s) - T0 ))s"
  [ $rc -eq 0 ] && echo "smoke: PASSED" || echo "smoke: FAILED (rc $rc); logs in $WORK/logs"
}
trap cleanup EXIT

# --- 1. base image ---------------------------------------------------------------------------
phase_start "base image (debootstrap)"
if ! podman image exists "$BASE_IMAGE"; then
  mirror="${DEBIAN_MIRROR:-$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
            | head -n 1 | grep -oE 'https?://[^ ]+' || true)}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" > "$WORK/debootstrap.log" 2>&1 ||
    die "debootstrap from $mirror (see $WORK/debootstrap.log)"
  # The image's apt uses the same mirror as this host.
  echo "deb $mirror bookworm main" > "$WORK/rootfs/etc/apt/sources.list"
  echo "deb $mirror bookworm-updates main" >> "$WORK/rootfs/etc/apt/sources.list"
  tar -C "$WORK/rootfs" -c . | podman import - "$BASE_IMAGE" >/dev/null
  rm -rf "$WORK/rootfs"
fi
phase_end

# --- 2. images -------------------------------------------------------------------------------
phase_start "images (podman build)"
mkdir -p "$WORK/logs"
build() {  # build IMAGE DOCKERFILE
  podman build --format docker --ulimit "nofile=$((nofile * 4 / 5)):$((nofile * 4 / 5))" \
    -f "$2" --build-arg BASE="$BASE_IMAGE" --build-arg RUNTIME_BASE="$BASE_IMAGE" \
    -v "$CCACHE_HOST:/ccache" -t "$1" "$CONTEXT" > "$WORK/logs/build-$(basename "$1" | cut -d: -f1).log" 2>&1 ||
    { tail -n 30 "$WORK/logs/build-$(basename "$1" | cut -d: -f1).log"; die "podman build $2"; }
}
for svc in expert-store compute router tools; do
  build "localhost/colibri-$svc:$TAG" "$CONTEXT/docker/Dockerfile.$svc"
  say "  built localhost/colibri-$svc:$TAG"
done
build "localhost/colibri-prometheus:$TAG" "$REPO/deploy/smoke/Dockerfile.prometheus"
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "colibri-.*:$TAG" | sed 's/^/  /'
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
EOF
cd "$WORK/stack"
compose() { podman-compose -p "$PROJECT" "$@"; }
STORE_REPLICAS=3 compose down -v >/dev/null 2>&1 || true
remove_project
SERVICES=(convert expert-store compute router prometheus)
STORE_REPLICAS=2 compose up -d "${SERVICES[@]}" > "$WORK/logs/compose-up.log" 2>&1 ||
  { tail -n 30 "$WORK/logs/compose-up.log"; die "podman-compose up"; }

# Waits until `cmd` succeeds, up to TIMEOUT seconds.
wait_for() {  # wait_for WHAT CMD...
  local what="$1"; shift
  local deadline=$(( $(date +%s) + TIMEOUT ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      for c in $(podman ps -a --format '{{.Names}}' --filter "label=io.podman.compose.project=$PROJECT"); do
        podman logs "$c" > "$WORK/logs/$c.log" 2>&1 || true
        echo "--- $c"; tail -n 8 "$WORK/logs/$c.log"
      done
      die "timed out waiting for $what"
    fi
    sleep 1
  done
}
http_ok() { $PY - "$1" <<'EOF'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    sys.exit(0 if r.status == 200 else 1)
EOF
}
# promql EXPR: prints the query's first value (or nothing).
promql() { $PY - "http://127.0.0.1:$PROM_PORT" "$1" <<'EOF'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1] + '/api/v1/query?' + urllib.parse.urlencode({'query': sys.argv[2]})
with urllib.request.urlopen(url, timeout=5) as r:
    res = json.load(r)['data']['result']
print(res[0]['value'][1] if res else '')
EOF
}
promql_eq() { [ "$(promql "$1")" = "$2" ]; }
wait_for "the router's /health" http_ok "http://127.0.0.1:$ROUTER_PORT/health"
phase_end

# --- 4. answers ------------------------------------------------------------------------------
phase_start "chat completion + reference"
PROMPT_IDS="1,275,290,300,13,350,400,268,281,450,511,32,100,269,300,301"
ask() { $PY - "http://127.0.0.1:$ROUTER_PORT" "$PROMPT_IDS" <<'EOF'
import json, sys, urllib.request
base, ids = sys.argv[1], [int(x) for x in sys.argv[2].split(',')]
def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)
chat = post('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'Why is the sky blue?'}],
                                     'max_tokens': 12, 'temperature': 0, 'return_token_ids': True})
c = chat['choices'][0]
assert chat['object'] == 'chat.completion' and c['message']['role'] == 'assistant', chat
assert chat['usage']['completion_tokens'] == len(c['token_ids']) > 0, chat
comp = post('/v1/completions', {'prompt': ids, 'max_tokens': 16, 'temperature': 0, 'return_token_ids': True})
print(json.dumps({'chat': c['token_ids'], 'completion': comp['choices'][0]['token_ids']}))
EOF
}
ANSWER1=$(ask) || die "requests through the router"
say "  router: $ANSWER1"
REFERENCE=$(podman run --rm -v "${PROJECT}_models:/models:ro" "localhost/colibri-tools:$TAG" \
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
# podman-compose 1.0 ignores --scale; the compose file's replica count is the same knob
# (`docker compose up -d --scale expert-store=3` with Docker).
STORE_REPLICAS=3 compose up -d "${SERVICES[@]}" > "$WORK/logs/compose-scale.log" 2>&1 || true
[ "$(podman ps --filter "label=io.podman.compose.project=$PROJECT" --filter "label=com.docker.compose.service=expert-store" -q | wc -l)" = 3 ] ||
  { tail -n 20 "$WORK/logs/compose-scale.log"; die "a third store container did not start"; }
wait_for "compute to discover the third store (no restart)" promql_eq 'count(colibri_compute_store_up == 1)' 3
wait_for "Prometheus: 3 store targets up" promql_eq 'count(up{job="colibri-expert-store"} == 1)' 3
# Traffic until the new store has delivered expert bytes to compute.
new_store_reads() { ask >/dev/null; [ "$(promql 'count(colibri_compute_store_received_bytes_total > 0)')" = 3 ]; }
wait_for "compute to read from all 3 stores" new_store_reads
ANSWER2=$(ask) || die "requests after scaling"
[ "$ANSWER2" = "$ANSWER1" ] || die "answer changed after scaling: $ANSWER1 -> $ANSWER2"
say "  same answer with 3 stores; compute restarts: $(podman inspect --format '{{.RestartCount}}' "${PROJECT}_compute_1")"
[ "$(podman inspect --format '{{.RestartCount}}' "${PROJECT}_compute_1")" = 0 ] || die "compute restarted"
phase_end

# --- 6. health checks ------------------------------------------------------------------------
phase_start "container health checks"
for c in "${PROJECT}_expert-store_1" "${PROJECT}_expert-store_2" "${PROJECT}_expert-store_3" \
         "${PROJECT}_compute_1" "${PROJECT}_router_1"; do
  podman exec "$c" sh -c "$(podman inspect --format '{{join .Config.Healthcheck.Test " "}}' "$c" | sed 's/^CMD //; s/^CMD-SHELL //')" \
    > "$WORK/logs/health-$c.log" 2>&1 || { cat "$WORK/logs/health-$c.log"; die "health check of $c"; }
  say "  $c: $(tail -n 1 "$WORK/logs/health-$c.log")"
done
say "  alerts firing: $(promql 'count(ALERTS{alertstate="firing"})')"
phase_end
for c in $(podman ps -a --format '{{.Names}}' --filter "label=io.podman.compose.project=$PROJECT"); do
  podman logs "$c" > "$WORK/logs/$c.log" 2>&1 || true
done
