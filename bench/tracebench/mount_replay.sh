#!/bin/bash
# Replays the conversation trace through real kvfs mounts: one fresh mount per policy and
# capacity share, each started with --eviction POLICY and a --capacity that is that share of the
# replayed requests' working set (distinct blocks x --block-bytes). tracebench --dir reads the
# mount's policy and watermarks from .kvfs/status and prints the same policy simulated at the
# high and the low watermark of that capacity beside the measured row.
#
#   bench/tracebench/mount_replay.sh [BUILD_BIN_DIR]
#   env: REQUESTS (1500), BLOCK (8192), POLICIES ("lru fifo lfu prefix"), CAPS ("0.10 0.25"),
#        OUT (/tmp/tracebench-mount), EXTRA (more kvfs options, e.g. "--durability close")
# Each mount is unmounted, its daemon stopped by PID and its data removed, also on errors.
set -u
BIN=${1:-build/bin}
REQUESTS=${REQUESTS:-1500}
BLOCK=${BLOCK:-8192}
POLICIES=${POLICIES:-"lru fifo lfu prefix"}
CAPS=${CAPS:-"0.10 0.25"}
OUT=${OUT:-/tmp/tracebench-mount}
EXTRA=${EXTRA:-"--durability async"}
mkdir -p "$OUT"

distinct=$("$BIN/tracebench" --max-requests "$REQUESTS" --policies lru --capacities 0.5 |
  sed -n 's/.*, \([0-9]*\) distinct blocks$/\1/p')
[ -n "$distinct" ] || { echo "cannot read the working set from tracebench" >&2; exit 1; }

base="" pid=""
cleanup() {
  if [ -n "$base" ]; then
    fusermount3 -u "$base/mnt" 2>/dev/null
    [ -n "$pid" ] && wait "$pid" 2>/dev/null
    rm -rf "$base"
  fi
  base="" pid=""
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

for policy in $POLICIES; do
  for cap in $CAPS; do
    # Capacity in KiB, a multiple of 4 KiB; kvfs wants at least 16M.
    kib=$(awk -v d="$distinct" -v b="$BLOCK" -v c="$cap" \
      'BEGIN { k = int(d * b * c / 4096) * 4; if (k < 16384) k = 16384; print k }')
    base=$(mktemp -d /tmp/kvfs-tracebench.XXXXXX)
    mkdir "$base/mnt"
    # shellcheck disable=SC2086
    "$BIN/kvfs" "$base/mnt" --data "$base/data" --capacity "${kib}K" --eviction "$policy" \
      $EXTRA -f >"$base/daemon.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do [ -e "$base/mnt/.kvfs/status" ] && break; sleep 0.1; done
    if [ ! -e "$base/mnt/.kvfs/status" ]; then
      echo "kvfs did not mount:" >&2; cat "$base/daemon.log" >&2; exit 1
    fi
    echo "== $policy at $cap of the working set: --capacity ${kib}K"
    "$BIN/tracebench" --max-requests "$REQUESTS" --dir "$base/mnt" --block-bytes "$BLOCK" \
      --json "$OUT/$policy-$cap.json" --csv "$OUT/$policy-$cap.csv" | grep -v '^$'
    cleanup
  done
done
