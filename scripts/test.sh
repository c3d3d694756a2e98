#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (unit, integration, connector
# patterns) with ctest. Exits non-zero when anything fails. Works from any directory, as root.
#   KVFS_BUILD_DIR        build directory (default: build/)
#   CTEST_PARALLEL_LEVEL  ctest jobs (default: 1); extra arguments go to ctest, e.g. -R integration
#   CI=true               also builds with -DCMAKE_BUILD_TYPE=Release (into build-release/), as a
#                         packager would, so its warnings (errors here) are caught too
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

BUILD_DIR=${KVFS_BUILD_DIR:-build}

bash scripts/install-deps.sh
bash scripts/build.sh -DKVFS_BUILD_TESTS=ON
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 600 "$@"
if [ "${CI:-}" = "true" ]; then
  cmake -S . -B "${BUILD_DIR}-release" -DCMAKE_BUILD_TYPE=Release
  cmake --build "${BUILD_DIR}-release" -j"${KVFS_JOBS:-$(nproc)}"
  echo "test: the Release build is warning-free"
fi
echo "test: all tests passed"
