#!/usr/bin/env bash
# Configures and builds kvfs into build/ (RelWithDebInfo). Works from any directory.
#   KVFS_BUILD_DIR  build directory (default: build/ in the repository)
#   KVFS_JOBS       parallel jobs (default: nproc)
#   extra arguments are passed to the cmake configure step, e.g. -DKVFS_BUILD_BENCH=OFF
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

BUILD_DIR=${KVFS_BUILD_DIR:-build}
JOBS=${KVFS_JOBS:-$(nproc)}

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$BUILD_DIR" -j"$JOBS"
echo "build: binaries in $(readlink -f "$BUILD_DIR")/bin"
