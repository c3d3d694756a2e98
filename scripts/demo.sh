#!/usr/bin/env bash
# kvfs demo: installs dependencies, builds, mounts kvfs on a temp directory, publishes KV-cache
# chunk files the way an inference connector does (temp file + rename, chained prefix-hash
# names), lists them, reads them back and compares with the source, shows kvfsctl status,
# remounts to show that the cache survives a restart, then unmounts and cleans up.
# Works from any directory, as root. Every exit path (also a failure or Ctrl-C) unmounts.
#   KVFS_DEMO_CHUNKS      number of chunk files (default 40)
#   KVFS_DEMO_CHUNK_MB    size of one chunk in MiB (default 8)
#   KVFS_DEMO_SKIP_BUILD  set to 1 to use the binaries already in build/bin
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
REPO=$PWD

CHUNKS=${KVFS_DEMO_CHUNKS:-40}
CHUNK_MB=${KVFS_DEMO_CHUNK_MB:-8}
CHUNK_TOKENS=64   # Llama-3-8B: 128 KiB of KV per token (bf16) -> 64 tokens = 8 MiB
MODEL=llama3-8b

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }

if [ "${KVFS_DEMO_SKIP_BUILD:-0}" != 1 ]; then
  step "install dependencies (Debian packages)"
  bash scripts/install-deps.sh
  step "build"
  bash scripts/build.sh
fi
KVFS=${KVFS_BIN:-$REPO/build/bin/kvfs}
KVFSCTL=${KVFSCTL_BIN:-$REPO/build/bin/kvfsctl}
for b in "$KVFS" "$KVFSCTL"; do
  [ -x "$b" ] || { echo "demo: $b was not built" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/kvfs-demo.XXXXXX)
MNT=$WORK/mnt
DATA=$WORK/data
SRC=$WORK/src
LOG=$WORK/kvfs.log
mkdir -p "$MNT" "$DATA" "$SRC"
KVFS_PID=""

is_mounted() { grep -qs " $(readlink -f "$1") " /proc/self/mountinfo; }

stop_kvfs() {
  # Unmount (which stops the daemon); if the daemon does not exit, kill it by its PID.
  if is_mounted "$MNT"; then
    fusermount3 -u "$MNT" 2>/dev/null || { sleep 1; fusermount3 -u "$MNT" 2>/dev/null; } ||
      fusermount3 -u -z "$MNT" 2>/dev/null || true
  fi
  if [ -n "$KVFS_PID" ]; then
    for _ in $(seq 100); do kill -0 "$KVFS_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$KVFS_PID" 2>/dev/null; then
      kill -KILL "$KVFS_PID" 2>/dev/null || true
      is_mounted "$MNT" && fusermount3 -u -z "$MNT" 2>/dev/null || true
    fi
    wait "$KVFS_PID" 2>/dev/null || true
    KVFS_PID=""
  fi
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  cd /
  stop_kvfs
  if [ $rc -ne 0 ] && [ -s "$LOG" ]; then
    echo "demo: failed (exit $rc); last lines of the kvfs log:" >&2
    tail -n 30 "$LOG" >&2
  fi
  is_mounted "$MNT" || rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_kvfs() {
  # -f keeps kvfs in the foreground so the demo knows its PID; without -f it daemonizes and
  # returns once the mount is ready.
  "$KVFS" "$MNT" --data "$DATA" --capacity 2G -f >>"$LOG" 2>&1 &
  KVFS_PID=$!
  for _ in $(seq 200); do
    [ -e "$MNT/.kvfs/status" ] && return 0
    kill -0 "$KVFS_PID" 2>/dev/null || { echo "demo: kvfs exited before mounting" >&2; return 1; }
    sleep 0.1
  done
  echo "demo: kvfs did not mount within 20 s" >&2
  return 1
}

step "mount kvfs"
echo "\$ kvfs $MNT --data $DATA --capacity 2G"
start_kvfs
show findmnt -n -o TARGET,SOURCE,FSTYPE "$MNT"
show df -h "$MNT"

step "make $CHUNKS source chunks of $CHUNK_MB MiB (one request of $((CHUNKS * CHUNK_TOKENS)) tokens)"
# Chained prefix hashes, as LMCache and SGLang HiCache name chunks: the name of chunk i is
# sha256(name of chunk i-1, tokens of chunk i), so one name stands for the whole prefix.
names=()
prev=$(printf 'kvfs-demo' | sha256sum | cut -c1-64)
for i in $(seq 0 $((CHUNKS - 1))); do
  tokens=$(seq -s, $((i * CHUNK_TOKENS + 1000)) $((i * CHUNK_TOKENS + 1000 + CHUNK_TOKENS - 1)))
  prev=$(printf '%s|%s' "$prev" "$tokens" | sha256sum | cut -c1-64)
  names+=("$prev")
  head -c "${CHUNK_MB}M" /dev/urandom >"$SRC/$prev"
done
(cd "$SRC" && sha256sum -- * >"$WORK/SHA256SUMS")
echo "first names: ${names[0]:0:16}... ${names[1]:0:16}... ${names[2]:0:16}..."

step "publish them under $MODEL/ like a connector: write a temp file, then rename it"
mkdir -p "$MNT/$MODEL"
start=$(date +%s.%N)
for n in "${names[@]}"; do
  cp "$SRC/$n" "$MNT/$MODEL/$n.tmp.$$"
  mv "$MNT/$MODEL/$n.tmp.$$" "$MNT/$MODEL/$n"
done
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v mb=$((CHUNKS * CHUNK_MB)) \
  'BEGIN { printf "published %d MiB in %.2f s (%.0f MiB/s, page cache of the source warm)\n", mb, e - s, mb / (e - s) }'

step "list them"
echo "\$ ls -l $MNT/$MODEL | head"
# sed reads to the end: with pipefail, `head` exiting early could kill ls with SIGPIPE (141).
ls -l "$MNT/$MODEL" | sed -n 1,6p
echo "... ($(ls "$MNT/$MODEL" | wc -l) files)"
show du -sh "$MNT/$MODEL"
show stat "$MNT/$MODEL/${names[0]}"

step "read them back: sha256sum against the source, cmp byte by byte, cat into a pipe"
(cd "$MNT/$MODEL" && sha256sum --quiet -c "$WORK/SHA256SUMS")
echo "sha256sum: all $CHUNKS match"
for n in "${names[@]}"; do
  cmp "$SRC/$n" "$MNT/$MODEL/$n"
done
echo "cmp: all $CHUNKS identical"
bytes=$(cat "$MNT/$MODEL/"* | wc -c)
echo "cat: read $bytes bytes (expected $((CHUNKS * CHUNK_MB * 1024 * 1024)))"
[ "$bytes" -eq $((CHUNKS * CHUNK_MB * 1024 * 1024)) ]
# A connector's lookup: stop at the first missing chunk of the prefix.
hits=0
for n in "${names[@]}" "0000000000000000000000000000000000000000000000000000000000000000"; do
  [ -e "$MNT/$MODEL/$n" ] || break
  hits=$((hits + 1))
done
echo "prefix lookup: $hits of $CHUNKS chunks found before the first miss"

step "kvfsctl"
show "$KVFSCTL" status "$MNT"
show "$KVFSCTL" stat "$MNT/$MODEL/${names[0]}"

step "restart: unmount, mount again on the same data directory, verify everything"
show fusermount3 -u "$MNT"
stop_kvfs
start_kvfs
(cd "$MNT/$MODEL" && sha256sum --quiet -c "$WORK/SHA256SUMS")
echo "after restart: all $CHUNKS chunks intact"

step "unmount"
show fusermount3 -u "$MNT"
stop_kvfs
echo "demo: done"
