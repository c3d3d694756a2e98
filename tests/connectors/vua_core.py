#!/usr/bin/env python3
"""Replay of VAST Data VUA's core file layout and I/O (standalone VUA core).

Upstream (read with the search tool): vast-data/VUA src/vua/core.py
  current version (commit f6216b3), flat layout:
    VUAConfig.tokens_to_paths  one directory per token group: sha1 of ("hash:<prev>:" +
                               comma-joined hex of every token up to this group), chained
    VUA.put -> save_group (one thread per group)
        os.path.exists(root/<hash>) -> already there: return
        os.mkdir(root/<hash>.tmp) (OSError ignored)
        group > 0: os.symlink("../<parent hash>", <hash>.tmp/parent) (FileExistsError ignored)
        os.open(<tmp>/_data.safetensors, O_CREAT|O_WRONLY|O_TRUNC); write; os.fsync; close
        os.open(<tmp>/_tokens.safetensors, O_CREAT|O_WRONLY|O_TRUNC); write; os.fsync; close
        os.rename(<hash>.tmp, <hash>)           (a whole-directory rename)
    VUA.get_closest -> load_group (one thread per group)
        open(root/<hash>/_tokens.safetensors, "rb").read(); open(.../_data.safetensors).read()
        FileNotFoundError -> that group is missing
  older version (commit 0be157a), nested layout, *at() calls:
    put:  os.open(root, O_RDONLY|O_DIRECTORY); per group os.mkdir(group, dir_fd=cur) (OSError
          ignored); os.open(group, O_RDONLY|O_DIRECTORY, dir_fd=cur); files opened with
          O_CREAT|O_WRONLY|O_TRUNC relative to the group's dir fd
    get_closest: os.open("g1/g2/.../gk", O_RDONLY|O_DIRECTORY, dir_fd=root) for path groups of
          up to 3500 characters, then os.open(cumulative path, O_DIRECTORY, dir_fd) per
          component and os.open("_tokens.safetensors"/"_data.safetensors", O_RDONLY,
          dir_fd=that directory), read whole files
VUA has no eviction of its own; an operator deletes group directories (shutil.rmtree).
Scaled: split factor 64 tokens, 512 KiB of KV per group, 18 groups.
"""

import errno
import hashlib
import os
import shutil
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import ReplayFailure, sc, sys_open  # noqa: E402

SPLIT = 64
DATA_BYTES = 512 << 10


def tokens_to_paths(tokens):
    comps, prev = [], ""
    for i in range(len(tokens) // SPLIT):
        comp = ",".join(format(t, "x") for t in tokens[:(i + 1) * SPLIT])
        h = hashlib.sha1((prev + comp).encode()).hexdigest()
        prev = "hash:" + h + ":"
        comps.append(h)
    return comps


def tokens_bytes(tokens):
    return b"".join(t.to_bytes(8, "little") for t in tokens)


class VUA:
    def __init__(self, ctx, root):
        self.ctx, self.root = ctx, root
        self.errors = []

    def save_group(self, comps, idx, tokens):
        group_hash = comps[idx]
        group_dir = os.path.join(self.root, group_hash)
        if common.exists(group_dir):
            return "exists"
        tmp = group_dir + ".tmp"
        sc(f"mkdir({tmp!r})", os.mkdir, tmp, expect=(errno.EEXIST,))
        if idx > 0:
            sc(f"symlink('../{comps[idx - 1]}', {tmp}/parent)", os.symlink,
               os.path.join("..", comps[idx - 1]), os.path.join(tmp, "parent"),
               expect=(errno.EEXIST,))
        for name, data in (("_data.safetensors", common.payload(group_hash, DATA_BYTES)),
                           ("_tokens.safetensors",
                            tokens_bytes(tokens[idx * SPLIT:(idx + 1) * SPLIT]))):
            p = os.path.join(tmp, name)
            fd = sys_open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o777)
            try:
                common.sys_write_all(fd, data, p)
                sc(f"fsync({p!r})", os.fsync, fd)
            finally:
                common.sys_close(fd, p)
        common.sys_rename(tmp, group_dir)
        return "stored"

    def put(self, tokens):
        comps = tokens_to_paths(tokens)
        out = [None] * len(comps)

        def run(i):
            try:
                out[i] = self.save_group(comps, i, tokens)
            except Exception as e:          # a thread's exception: VUA loses that group
                self.errors.append(e)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(comps))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.errors:
            e = self.errors[0]
            self.errors = []
            raise e
        return out

    def get_closest(self, tokens):
        comps = tokens_to_paths(tokens[:len(tokens) - len(tokens) % SPLIT])
        results, errs = [], []

        def load(idx, h):
            gdir = os.path.join(self.root, h)
            try:
                with open(os.path.join(gdir, "_tokens.safetensors"), "rb") as f:
                    toks = f.read()
                with open(os.path.join(gdir, "_data.safetensors"), "rb") as f:
                    data = f.read()
                results.append((idx, h, toks, data))
            except FileNotFoundError:
                pass
            except OSError as e:
                errs.append(ReplayFailure(f"open/read of {gdir}/_*.safetensors -> "
                                          f"{common.errname(e.errno)}"))
        threads = [threading.Thread(target=load, args=(i, h)) for i, h in enumerate(comps)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errs:
            raise errs[0]
        return sorted(results)


def nested_components(tokens):
    """Old layout: per-group sha1 of that group's tokens only (not chained)."""
    return [hashlib.sha1(",".join(format(t, "x") for t in tokens[i * SPLIT:(i + 1) * SPLIT])
                         .encode()).hexdigest() for i in range(len(tokens) // SPLIT)]


def nested_put(ctx, root, tokens):
    comps = nested_components(tokens)
    cur = sys_open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for idx, g in enumerate(comps):
            sc(f"mkdirat(dir_fd, {g!r})", os.mkdir, g, dir_fd=cur, expect=(errno.EEXIST,))
            nxt = sys_open(g, os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
            os.close(cur)
            cur = nxt
            for name, data in (("_data.safetensors", common.payload("nested" + g, DATA_BYTES)),
                               ("_tokens.safetensors",
                                tokens_bytes(tokens[idx * SPLIT:(idx + 1) * SPLIT]))):
                fd = sys_open(name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o777, dir_fd=cur)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
    finally:
        os.close(cur)
    return comps


def nested_get(ctx, root, tokens):
    comps = nested_components(tokens)
    root_fd = sys_open(root, os.O_RDONLY | os.O_DIRECTORY)
    found = []
    try:
        sub = "/".join(comps)            # < 3500 characters: one path group
        r = sc(f"openat(root, {len(comps)}-level path, O_DIRECTORY)", os.open, sub,
               os.O_RDONLY | os.O_DIRECTORY, dir_fd=root_fd, expect=(errno.ENOENT,))
        if not isinstance(r, OSError):
            os.close(r)
        cum = ""
        for idx, g in enumerate(comps):
            cum = os.path.join(cum, g)
            d = sc(f"openat(root, {cum[:20]}..., O_DIRECTORY)", os.open, cum,
                   os.O_RDONLY | os.O_DIRECTORY, dir_fd=root_fd, expect=(errno.ENOENT,))
            if isinstance(d, OSError):
                break
            try:
                fd = sys_open("_tokens.safetensors", os.O_RDONLY, dir_fd=d)
                with os.fdopen(fd, "rb") as f:
                    toks = f.read()
                fd = sys_open("_data.safetensors", os.O_RDONLY, dir_fd=d)
                with os.fdopen(fd, "rb") as f:
                    data = f.read()
                found.append((idx, g, toks, data))
            finally:
                os.close(d)
    finally:
        os.close(root_fd)
    return found


def scenario(ctx):
    seq_a = list(range(1, 1 + 12 * SPLIT))
    seq_b = seq_a[:6 * SPLIT] + list(range(40_000, 40_000 + 6 * SPLIT))
    vua = VUA(ctx, ctx.root)
    groups = {}     # hash -> (idx, tokens bytes)

    def remember(tokens):
        for i, h in enumerate(tokens_to_paths(tokens)):
            groups[h] = (i, tokens_bytes(tokens[i * SPLIT:(i + 1) * SPLIT]))

    def check_closest(tokens, want_groups, what):
        res = vua.get_closest(tokens)
        ctx.check([h for _, h, _, _ in res] == want_groups,
                  f"{what}: got {len(res)} groups, want {len(want_groups)}")
        for idx, h, toks, data in res:
            ctx.check(toks == groups[h][1], f"{what}: tokens of group {idx} differ")
            common.check_bytes(f"{what}: data of group {idx}", data,
                               common.payload(h, DATA_BYTES))

    with ctx.phase("put: mkdir <hash>.tmp, parent symlink, O_CREAT|O_WRONLY|O_TRUNC + fsync, rename dir (parallel)") as run:
        if run:
            common.sys_makedirs(ctx.root)
            out = vua.put(seq_a)
            ctx.check(out == ["stored"] * 12, f"put A: {out}")
            out = vua.put(seq_b)
            ctx.check(out == ["exists"] * 6 + ["stored"] * 6, f"put B: {out}")
            remember(seq_a)
            remember(seq_b)
            names = common.sys_listdir(ctx.root)
            ctx.check(not any(n.endswith(".tmp") for n in names), "temp dirs left behind")
            ctx.check(len(names) == 18, f"{len(names)} group directories, want 18")
    put = "put: mkdir <hash>.tmp, parent symlink, O_CREAT|O_WRONLY|O_TRUNC + fsync, rename dir (parallel)"

    with ctx.phase("parent symlinks resolve through renamed directories", needs=(put,)) as run:
        if run:
            comps = tokens_to_paths(seq_b)
            for i in range(1, len(comps)):
                link = os.path.join(ctx.root, comps[i], "parent")
                target = sc(f"readlink({link!r})", os.readlink, link)
                ctx.check(target == os.path.join("..", comps[i - 1]),
                          f"readlink gave {target!r}")
                lst = common.sys_stat(link, follow=False)
                ctx.check((lst.st_mode & 0o170000) == 0o120000, "parent is not a symlink")
                st = common.sys_stat(link)
                ctx.check(os.path.samestat(st, common.sys_stat(
                    os.path.join(ctx.root, comps[i - 1]))), "parent does not lead to the parent")
            # walking up the chain from the last group reaches the first
            p, hops = os.path.join(ctx.root, comps[-1]), 0
            while os.path.lexists(os.path.join(p, "parent")):
                p = os.path.join(p, "parent")
                hops += 1
            ctx.check(hops == len(comps) - 1, f"parent chain has {hops} hops")
            ctx.check(os.path.samefile(p, os.path.join(ctx.root, comps[0])),
                      "parent chain does not end at group 0")

    with ctx.phase("get_closest: whole-file reads of every group, byte-exact; misses", needs=(put,)) as run:
        if run:
            check_closest(seq_a, tokens_to_paths(seq_a), "get A")
            check_closest(seq_b + [7, 8, 9], tokens_to_paths(seq_b), "get B (+partial group)")
            other = list(range(90_000, 90_000 + 8 * SPLIT))
            ctx.check(vua.get_closest(other) == [], "get of an unknown sequence found groups")

    with ctx.phase("racing writer: rename of a second <hash>.tmp onto an existing group fails", needs=(put,)) as run:
        if run:
            comps = tokens_to_paths(seq_a)
            gdir = os.path.join(ctx.root, comps[3])
            tmp = gdir + ".tmp"       # the loser passed the exists() check before the winner
            sc(f"mkdir({tmp!r})", os.mkdir, tmp)
            with open(os.path.join(tmp, "_data.safetensors"), "wb") as f:
                f.write(b"loser")
            r = sc(f"rename({tmp!r}, existing non-empty {gdir!r})", os.rename, tmp, gdir,
                   expect=(errno.ENOTEMPTY, errno.EEXIST))
            ctx.check(isinstance(r, OSError), "rename of a directory onto a non-empty "
                                              "directory succeeded")
            shutil.rmtree(tmp)
            check_closest(seq_a, comps, "get A after the failed race")

    with ctx.phase("operator eviction: shutil.rmtree of the newest groups", needs=(put,)) as run:
        if run:
            comps_b = tokens_to_paths(seq_b)
            for h in comps_b[9:]:
                sc(f"rmtree({h})", shutil.rmtree, os.path.join(ctx.root, h))
                groups.pop(h)
            check_closest(seq_b, comps_b[:9], "get B after rmtree of groups 9-11")
            ctx.check(len(common.sys_listdir(ctx.root)) == 15, "rmtree left directories")

    with ctx.phase("old nested layout: mkdirat/openat(O_DIRECTORY) chain, *at() file I/O", needs=(put,)) as run:
        if run:
            nroot = os.path.join(ctx.root + "-nested")
            common.sys_makedirs(nroot)
            seq = list(range(500, 500 + 10 * SPLIT))
            comps = nested_put(ctx, nroot, seq)
            comps2 = nested_put(ctx, nroot, seq[:5 * SPLIT] + list(range(7000, 7000 + 3 * SPLIT)))
            ctx.check(comps2[:5] == comps[:5], "nested prefix mismatch")
            found = nested_get(ctx, nroot, seq)
            ctx.check(len(found) == 10, f"nested get found {len(found)} of 10 levels")
            for idx, g, toks, data in found:
                ctx.check(toks == tokens_bytes(seq[idx * SPLIT:(idx + 1) * SPLIT]),
                          f"nested tokens differ at level {idx}")
                common.check_bytes(f"nested data level {idx}", data,
                                   common.payload("nested" + g, DATA_BYTES))
            miss = nested_get(ctx, nroot, seq[:3 * SPLIT] + list(range(1, 1 + 2 * SPLIT)))
            ctx.check(len(miss) == 3, f"nested get of a diverging sequence found {len(miss)}")

    with ctx.phase("kill -9: every group directory present is complete (fsync'd files, renamed dir)", needs=(put,), restart=True) as run:
        if run:
            ctx.crash_restart()
            for name in common.sys_listdir(ctx.root):
                gdir = os.path.join(ctx.root, name)
                if name.endswith(".tmp"):
                    continue          # an unfinished put; VUA ignores it
                ctx.check(name in groups, f"unknown group directory {name} after kill -9")
                for fname in ("_data.safetensors", "_tokens.safetensors"):
                    ctx.check(common.exists(os.path.join(gdir, fname)),
                              f"group {name} lost {fname} in the crash")
            missing = [h for h in groups if not common.exists(os.path.join(ctx.root, h))]
            if missing:
                ctx.note(f"{len(missing)} group renames lost by the kill -9 (VUA never fsyncs "
                         f"the directory; allowed)")
            res = vua.get_closest(seq_a)
            for idx, h, toks, data in res:
                ctx.check(toks == groups[h][1], f"tokens of group {idx} differ after kill -9")
                common.check_bytes(f"data of group {idx} after kill -9", data,
                                   common.payload(h, DATA_BYTES))

    with ctx.phase("restart keeps every group, symlinks and nested tree", needs=(put,), restart=True) as run:
        if run:
            ctx.remount()
            check_closest(seq_a, tokens_to_paths(seq_a), "get A after restart")
            check_closest(seq_b, tokens_to_paths(seq_b)[:9], "get B after restart")
            comps = tokens_to_paths(seq_a)
            link = os.path.join(ctx.root, comps[5], "parent")
            ctx.check(os.readlink(link) == os.path.join("..", comps[4]),
                      "parent symlink changed after restart")
            if os.path.isdir(ctx.root + "-nested"):
                seq = list(range(500, 500 + 10 * SPLIT))
                ctx.check(len(nested_get(ctx, ctx.root + "-nested", seq)) == 10,
                          "nested tree incomplete after restart")


if __name__ == "__main__":
    sys.exit(common.main("vua_core", scenario))
