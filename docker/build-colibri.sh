#!/bin/sh
# The build stage of every colibri image: configures and builds the binaries into /out/bin and
# writes /out/runtime-packages (the Debian packages that hold the shared libraries they link,
# found with ldd and dpkg -S), so the runtime stage installs exactly those.
# Environment: COLIBRI_CUDA (OFF|ON), JOBS (default: nproc); ccache through CCACHE_DIR.
set -eu
cd /src
# Locale build arguments not given arrive empty: unset them, as on a host without them (ccache
# hashes LANG and LC_ALL when they are set, even to nothing).
[ -n "${LANG:-}" ] || unset LANG
[ -n "${LC_ALL:-}" ] || unset LC_ALL
cuda="${COLIBRI_CUDA:-OFF}"
# "build", as scripts/test.sh names it: with CCACHE_BASEDIR the object hashes then match a
# checkout's own builds, so a ccache shared with the host (deploy/smoke.sh) hits.
build=build
targets="colibri-expert-store colibri-compute colibri-router colibri-convert colibri-cli colibri-health colibri-server"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLIBRI_TESTS=OFF -DCOLIBRI_BENCH=OFF \
  -DCOLIBRI_WERROR=ON -DCOLIBRI_CUDA="$cuda"
# This build's own ccache counters (the cache may be the host's, with its own history).
export CCACHE_STATSLOG="$(mktemp)"
# shellcheck disable=SC2086
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target $targets
echo "build-colibri: ccache of this build (limit $(ccache -k max_size 2>/dev/null)):"
ccache --show-log-stats 2>/dev/null | grep -E "^ *(Hits|Misses):" || true
rm -f "$CCACHE_STATSLOG"
mkdir -p /out/bin
for t in $targets; do
  install -m 0755 "$build/bin/$t" /out/bin/
  strip --strip-debug /out/bin/"$t"
done
install -m 0755 tools/gen_tiny_model.py /out/bin/
# Shared libraries -> the packages that ship them (usr-merged paths tried both ways).
for lib in $(ldd /out/bin/colibri-* | awk '/=> \// {print $3}' | sort -u); do
  dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null ||
    dpkg -S "/usr$lib" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null ||
    { echo "build-colibri: no package ships $lib" >&2; exit 1; }
done | cut -d: -f1 | sort -u > /out/runtime-packages
echo "build-colibri: runtime packages: $(tr '\n' ' ' < /out/runtime-packages)"
