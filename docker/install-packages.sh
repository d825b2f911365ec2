#!/bin/sh
# Installs the Debian packages named on the command line that are not installed yet, then drops
# apt's lists. A base image that already has them (a debootstrap --include base) builds offline.
# Usage: install-packages.sh [--non-free] PACKAGE...   (--non-free: also contrib and non-free,
# for nvidia-cuda-toolkit and the CUDA runtime libraries)
set -eu
if [ "${1:-}" = "--non-free" ]; then
  shift
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    [ -f "$f" ] || continue
    sed -i -e 's/^Components: main$/Components: main contrib non-free non-free-firmware/' \
           -e 's/^\(deb .* main\)$/\1 contrib non-free non-free-firmware/' "$f"
  done
fi
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "install-packages: all $# packages present"
  exit 0
fi
echo "install-packages: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
apt-get clean
rm -rf /var/lib/apt/lists/*
