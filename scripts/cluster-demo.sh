#!/usr/bin/env bash
# kvfs cluster demo: starts its own etcd and three kvfs nodes on loopback (127.0.0.1, free
# ports), publishes KV-cache chunk files on node 1, reads them byte for byte on node 3, shows
# `kvfsctl nodes` and `kvfsctl where`, kills node 2 with SIGKILL, shows the surviving nodes
# copying the chunks it held until every chunk has 2 live copies again, then stops everything
# by PID and removes its temporary directory. Run scripts/demo.sh (or build) first.
#   KVFS_DEMO_CHUNKS    number of chunk files (default 12)
#   KVFS_DEMO_CHUNK_MB  size of one chunk in MiB (default 4)
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
REPO=$PWD
KVFS=${KVFS_BIN:-$REPO/build/bin/kvfs}
KVFSCTL=${KVFSCTL_BIN:-$REPO/build/bin/kvfsctl}
ETCD=${KVFS_ETCD_BIN:-$(command -v etcd || echo /usr/bin/etcd)}
CHUNKS=${KVFS_DEMO_CHUNKS:-12}
CHUNK_MB=${KVFS_DEMO_CHUNK_MB:-4}
for b in "$KVFS" "$KVFSCTL"; do
  [ -x "$b" ] || { echo "cluster-demo: $b is missing: run scripts/demo.sh or scripts/build.sh" >&2; exit 1; }
done
[ -x "$ETCD" ] || { echo "cluster-demo: etcd is missing: bash scripts/install-deps.sh" >&2; exit 1; }

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

WORK=$(mktemp -d /tmp/kvfs-cluster-demo.XXXXXX)
ETCD_PID=""
declare -A PID
cleanup() {
  set +e
  for k in 1 2 3; do
    mountpoint -q "$WORK/n$k/mnt" && fusermount3 -u "$WORK/n$k/mnt"
  done
  for k in 1 2 3; do
    p=${PID[$k]:-}
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
      for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$p" 2>/dev/null
    fi
  done
  if [ -n "$ETCD_PID" ]; then kill "$ETCD_PID" 2>/dev/null; wait "$ETCD_PID" 2>/dev/null; fi
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

step "etcd: the cluster's membership and namespace (its own data dir, loopback only)"
EP=$(free_port); PP=$(free_port)
"$ETCD" --name demo --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$EP" \
  --advertise-client-urls "http://127.0.0.1:$EP" --listen-peer-urls "http://127.0.0.1:$PP" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PP" --initial-cluster "demo=http://127.0.0.1:$PP" \
  --log-level warn >"$WORK/etcd.log" 2>&1 &
ETCD_PID=$!
for _ in $(seq 100); do
  python3 -c 'import sys,urllib.request as u; u.urlopen(u.Request(sys.argv[1], data=b"{\"key\":\"Lw==\"}"), timeout=1)' \
    "http://127.0.0.1:$EP/v3/kv/range" 2>/dev/null && break
  sleep 0.1
done
echo "etcd (pid $ETCD_PID) at http://127.0.0.1:$EP"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/secret"
chmod 600 "$WORK/secret"

step "three nodes: the same command on each, only the id and address differ"
for k in 1 2 3; do
  mkdir -p "$WORK/n$k/mnt" "$WORK/n$k/data"
  port=$(free_port)
  show "$KVFS" "$WORK/n$k/mnt" --data "$WORK/n$k/data" --capacity 512M \
    --etcd "http://127.0.0.1:$EP" --node-id "$k" --listen "127.0.0.1:$port" \
    --secret-file "$WORK/secret" --replicas 2 --lease-ttl 3
  PID[$k]=$(sed -n '/"pid"/{s/.*"pid": *\([0-9]*\).*/\1/p;q}' "$WORK/n$k/mnt/.kvfs/status")
done
show "$KVFSCTL" nodes "$WORK/n1/mnt"

step "publish $CHUNKS chunk files of $CHUNK_MB MiB on node 1 (temp file + rename, as connectors do)"
mkdir -p "$WORK/src" "$WORK/n1/mnt/llama3-8b"
for i in $(seq -w 1 "$CHUNKS"); do
  head -c $((CHUNK_MB << 20)) /dev/urandom >"$WORK/src/chunk-$i.kv"
  cp "$WORK/src/chunk-$i.kv" "$WORK/n1/mnt/llama3-8b/.chunk-$i.tmp"
  mv "$WORK/n1/mnt/llama3-8b/.chunk-$i.tmp" "$WORK/n1/mnt/llama3-8b/chunk-$i.kv"
done
show ls "$WORK/n3/mnt/llama3-8b"

step "read them on node 3 and compare byte for byte"
for f in "$WORK"/src/*.kv; do cmp "$f" "$WORK/n3/mnt/llama3-8b/$(basename "$f")"; done
echo "all $CHUNKS chunks identical on node 3"
show "$KVFSCTL" where "$WORK/n3/mnt/llama3-8b/chunk-$(printf "%0${#CHUNKS}d" 1).kv"

step "kill -9 node 2 (pid ${PID[2]}): its lease expires, the others copy what it held"
kill -9 "${PID[2]}"
fusermount3 -u "$WORK/n2/mnt" 2>/dev/null || umount -l "$WORK/n2/mnt" 2>/dev/null || true
t0=$(date +%s)
for _ in $(seq 100); do  # the lease (3 s here) runs out
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if any(n["id"]==2 and n["state"]=="down" for n in d["nodes"]) else 1)' \
    "$WORK/n1/mnt/.kvfs/nodes" && break
  sleep 0.2
done
echo "node 2 is down for the cluster after $(( $(date +%s) - t0 )) s"
for _ in $(seq 120); do
  bad=0
  for f in "$WORK"/n1/mnt/llama3-8b/*.kv; do
    loc=$(getfattr --only-values -n user.kvfs.location "$f" 2>/dev/null || echo '{}')
    n=$(printf '%s' "$loc" | grep -o '"state":"\(self\|up\)"' | wc -l)
    [ "$n" -ge 2 ] || bad=$((bad + 1))
  done
  [ "$bad" -eq 0 ] && break
  sleep 0.5
done
echo "every chunk has 2 live copies again, $(( $(date +%s) - t0 )) s after the kill"
show "$KVFSCTL" nodes "$WORK/n1/mnt" || true
for f in "$WORK"/src/*.kv; do cmp "$f" "$WORK/n3/mnt/llama3-8b/$(basename "$f")"; done
echo "node 3 still reads all $CHUNKS chunks byte for byte"

step "clean up: unmount, stop the nodes and etcd by PID, remove $WORK"
