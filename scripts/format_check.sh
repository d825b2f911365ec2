#!/usr/bin/env bash
# Checks that every C++ and CUDA source in the repository is formatted as .clang-format says
# (clang-format 14, Debian 12's). Usage: scripts/format_check.sh [--fix]
# Exits non-zero and lists the files that differ; --fix rewrites them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT="${CLANG_FORMAT:-clang-format-14}"
command -v "$CLANG_FORMAT" >/dev/null || { echo "format_check: $CLANG_FORMAT not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.cpp')
if [ "${1:-}" = "--fix" ]; then
  printf '%s\0' "${files[@]}" | xargs -0 "$CLANG_FORMAT" -i
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$CLANG_FORMAT" --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -ne 0 ]; then
  echo "format_check: ${#bad[@]} of ${#files[@]} files are not formatted (scripts/format_check.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
