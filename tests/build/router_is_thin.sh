#!/bin/sh
# colibri-router links neither the engine, a backend nor compute (issue 19): none of their
# symbols is in its binary, while colibri-server (which links them) has them, so the pattern
# is known to find what it looks for. Usage: router_is_thin.sh BIN_DIR
set -eu
bin=$1
pattern=' colibri::(engine|backend|compute)::'
server=$(nm -C "$bin/colibri-server" | grep -cE "$pattern" || true)
if [ "$server" -eq 0 ]; then
  echo "no engine/backend/compute symbols found in colibri-server either: the check is broken" >&2
  exit 1
fi
router=$(nm -C "$bin/colibri-router" | grep -E "$pattern" || true)
if [ -n "$router" ]; then
  echo "colibri-router links engine, backend or compute code:" >&2
  echo "$router" | head -20 >&2
  exit 1
fi
echo "colibri-router: no engine/backend/compute symbols (colibri-server: $server)"
