#!/usr/bin/env bash
# CI: runs deploy/smoke.sh (the compose stack in real containers) when the tree changes docker/,
# deploy/ or services/ against the last main commit whose CI run passed, on a fixed time budget.
#
# "The last green main" is a commit CI records itself (`record`, at the end of a green run on
# main) in $CI_STATE_DIR/last-green-main, beside the other caches CI keeps on its machine between
# runs: ccache ($CCACHE_DIR, mounted into the image builds) and the container engine's image store
# (podman's /var/lib/containers, with the debootstrap base image and every build layer). A recorded
# commit serves a branch and main alike, however many commits lie between; a merge-base with main
# would not (on main it is HEAD itself) and HEAD~N would miss changes in a push of more than N
# commits. No record, or one this clone does not have (shallow, history rewritten): the smoke runs.
#
# Usage: scripts/smoke_ci.sh [run]   decide, and run the smoke when needed (exit: the smoke's)
#        scripts/smoke_ci.sh record  after a green run: remember HEAD when on main
#        scripts/smoke_ci.sh skip WHY  the run could not afford the smoke (CI's time budget)
# A smoke that was needed and skipped (77, no root, `skip`) leaves $CI_STATE_DIR/smoke-skipped:
# `record` then keeps the old commit, so the next run compares against it and runs the smoke.
# A host that cannot run the test (deploy/smoke.sh exits 77: no working container runtime, no root,
# or the image builds past SMOKE_BUILD_BUDGET, as a cold compile on a fresh CI machine is) is
# reported and skipped, not failed; every check that runs must pass, within SMOKE_BUDGET.
# Environment: SMOKE (auto | always | never; default auto), SMOKE_BUDGET (seconds, default 2400),
#              SMOKE_BUILD_BUDGET (seconds for the image builds, default 1200),
#              CI_STATE_DIR (default ~/.cache/colibri-ci), CI_BRANCH (default: the checked-out
#              branch), and deploy/smoke.sh's own (WORK_DIR, CCACHE_DIR, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE="${CI_STATE_DIR:-$HOME/.cache/colibri-ci}"
RECORD="$STATE/last-green-main"
SKIPPED="$STATE/smoke-skipped"
skipped() { mkdir -p "$STATE" && echo "$1" > "$SKIPPED"; }
BRANCH="${CI_BRANCH:-$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)}"
PATHS=(docker deploy services)

case "${1:-run}" in
  record)
    if [ -e "$SKIPPED" ]; then
      echo "smoke_ci: not recorded: the smoke was needed and skipped ($(cat "$SKIPPED")); the next run tries it again"
      rm -f "$SKIPPED"
      exit 0
    fi
    if [ "$BRANCH" = main ]; then
      mkdir -p "$STATE"
      git rev-parse HEAD > "$RECORD.tmp" && mv "$RECORD.tmp" "$RECORD"
      echo "smoke_ci: recorded $(cat "$RECORD") as the last green main"
    fi
    exit 0 ;;
  skip)
    skipped "${2:-no reason given}"
    echo "smoke_ci: smoke not run: ${2:-no reason given}"
    exit 0 ;;
  run) ;;
  *) echo "smoke_ci: unknown command '$1' (run | record | skip)" >&2; exit 2 ;;
esac

case "${SMOKE:-auto}" in
  auto|always) ;;
  never) echo "smoke_ci: skipped (SMOKE=never)"; exit 0 ;;
  *) echo "smoke_ci: SMOKE='$SMOKE': expected auto, always or never" >&2; exit 2 ;;
esac
# Prints why the smoke runs; exit 1 when it need not.
needed() {
  if [ "${SMOKE:-auto}" = always ]; then echo "SMOKE=always"; return 0; fi
  if [ ! -s "$RECORD" ]; then echo "no green main recorded in $RECORD"; return 0; fi
  local base
  base="$(cat "$RECORD")"
  if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
    echo "the last green main $base is not in this clone"
    return 0
  fi
  local changed
  changed="$(git diff --name-only "$base" HEAD -- "${PATHS[@]}")"
  # Uncommitted edits count too (a local run of .ci/run).
  changed+="$(git status --porcelain -- "${PATHS[@]}")"
  [ -n "$changed" ] || return 1
  echo "${PATHS[*]} changed since the last green main ${base:0:12}: $(echo "$changed" | wc -l) files"
}

if ! why="$(needed)"; then
  echo "smoke_ci: skipped (${PATHS[*]} unchanged since the last green main $(cut -c1-12 "$RECORD" 2>/dev/null); SMOKE=always forces it)"
  exit 0
fi
BUDGET="${SMOKE_BUDGET:-2400}"
export SMOKE_BUILD_BUDGET="${SMOKE_BUILD_BUDGET:-1200}"
echo "smoke_ci: running deploy/smoke.sh ($why), budget ${BUDGET}s"
run=(deploy/smoke.sh)
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null || ! sudo -n true 2>/dev/null; then
    echo "smoke_ci: SKIPPED: not root and no password-less sudo (podman runs rootful)"
    skipped "not root"
    exit 0
  fi
  run=(sudo -E deploy/smoke.sh)
fi
SECONDS=0
rc=0
timeout -k 60 "$BUDGET" "${run[@]}" || rc=$?
[ $rc -eq 124 ] && echo "smoke_ci: deploy/smoke.sh ran past its budget of ${BUDGET}s" >&2
echo "smoke_ci: deploy/smoke.sh took ${SECONDS}s (rc $rc)"
if [ $rc -eq 77 ]; then
  echo "smoke_ci: SKIPPED: this host cannot run the smoke test now (see the SKIPPED line above)"
  skipped "deploy/smoke.sh exit 77"
  exit 0
fi
exit $rc
