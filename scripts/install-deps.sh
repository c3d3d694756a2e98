#!/usr/bin/env bash
# Installs every build, test and bench dependency of kvfs from Debian 12 packages. Idempotent:
# skips apt entirely when everything is already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git ca-certificates
  libfuse3-dev fuse3
  liburing-dev libxxhash-dev liblz4-dev
  libspdlog-dev libfmt-dev
  libibverbs-dev librdmacm-dev
  libssl-dev libcurl4-openssl-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libtoml11-dev
  python3 man-db attr procps psmisc util-linux iproute2 kmod
  gnuplot-nox redis-server iperf3
  etcd-server etcd-client
)

missing=()
for p in "${PACKAGES[@]}"; do
  # No pipe into grep -q: under pipefail an early exit of grep could fail the pipeline.
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
