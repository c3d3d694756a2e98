#include "fuse_ops.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "op_failure_log.h"
#include "splice_reply.h"

namespace kvfs::fs {
namespace {

FsContext& Ctx(fuse_req_t req) { return *static_cast<FsContext*>(fuse_req_userdata(req)); }

void Err(fuse_req_t req, int err) { fuse_reply_err(req, err); }
void ReplyStatus(fuse_req_t req, const Status& st) { fuse_reply_err(req, st.err()); }

void ReplyEntry(fuse_req_t req, const EntryInfo& e) {
  fuse_entry_param p;
  std::memset(&p, 0, sizeof p);
  p.ino = e.attr.st_ino;
  p.generation = 1;
  p.attr = e.attr;
  p.attr_timeout = e.stable ? kStableTimeout : kVolatileTimeout;
  // Names change only through this mount, so the kernel sees every change itself.
  p.entry_timeout = Control::Owns(p.ino) ? kVolatileTimeout : kStableTimeout;
  fuse_reply_entry(req, &p);
}

void ReplyNegative(fuse_req_t req) {
  fuse_entry_param p;
  std::memset(&p, 0, sizeof p);
  p.ino = 0;  // a negative dentry the kernel may keep for entry_timeout
  p.entry_timeout = kNegativeTimeout;
  fuse_reply_entry(req, &p);
}

void ReplyAttr(fuse_req_t req, const EntryInfo& e) {
  fuse_reply_attr(req, &e.attr, e.stable ? kStableTimeout : kVolatileTimeout);
}

// The caller of a write or truncate (namespace.h, Caller). Its supplementary groups are read
// only if a set-id bit depends on them; when they cannot be read the bit goes (the safe side).
Caller CallerOf(fuse_req_t req) {
  const fuse_ctx* who = fuse_req_ctx(req);
  return Caller{who->uid, who->gid, [req](uint32_t gid) {
                  std::vector<gid_t> groups(32);
                  int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
                  if (n > static_cast<int>(groups.size())) {
                    groups.resize(static_cast<size_t>(n));
                    n = fuse_req_getgroups(req, n, groups.data());
                  }
                  if (n < 0) return false;
                  groups.resize(std::min(groups.size(), static_cast<size_t>(n)));
                  return std::find(groups.begin(), groups.end(), gid) != groups.end();
                }};
}

template <typename T>
T* HandleOf(fuse_file_info* fi) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(fi->fh));
}

void OnInit(void* userdata, fuse_conn_info* conn) {
  // No atomic O_TRUNC: with it the kernel sets i_size to 0 and drops every cached page at the
  // open, under readers of the published version. Without it the open arrives without
  // O_TRUNC and is followed by a setattr(size=0) that carries no handle: it truncates the
  // inode's write session, which that open started or joined (so nothing is published), and
  // its reply says which size the kernel keeps (Namespace::SetAttr).
  conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV) conn->want |= FUSE_CAP_HANDLE_KILLPRIV;
  // Plain readdir keeps lookup counting in one place (lookup); ls -l pays one lookup per name.
  conn->want &= ~FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Published versions are immutable and a new one is announced with notify_inval_inode, so
  // the kernel need not drop cached pages whenever it refreshes attributes (atime changes).
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  // Read replies go by splice from verified store buffers (splice_reply.h).
  const unsigned splice = FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
  if ((conn->capable & splice) == splice) conn->want |= splice;
  EnableSplicedReplies((conn->want & FUSE_CAP_SPLICE_WRITE) != 0);
  // Must match the max_read mount option (session.cc).
  conn->max_read = static_cast<FsContext*>(userdata)->max_read;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  spdlog::info("fuse: init done, max_write {} max_read {} max_readahead {}", conn->max_write,
               conn->max_read, conn->max_readahead);
}

void OnLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  FsContext& c = Ctx(req);
  auto e =
      Control::Handles(parent, name) ? c.control->Lookup(parent, name) : c.ns->Lookup(parent, name);
  if (e.ok()) return ReplyEntry(req, *e);
  if (e.status().err() == ENOENT && !Control::Owns(parent)) return ReplyNegative(req);
  ReplyStatus(req, e.status());
}

void OnForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  if (!Control::Owns(ino)) Ctx(req).ns->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OnForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i)
    if (!Control::Owns(forgets[i].ino)) Ctx(req).ns->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OnGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  FsContext& c = Ctx(req);
  // With a handle (fstat, or the kernel checking i_size for a read): that handle's view.
  auto e = Control::Owns(ino) ? c.control->GetAttr(ino)
                              : c.ns->GetAttr(ino, fi ? HandleOf<FileHandle>(fi) : nullptr);
  if (!e.ok()) return ReplyStatus(req, e.status());
  ReplyAttr(req, *e);
}

void OnSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  FsContext& c = Ctx(req);
  if (Control::Owns(ino)) {
    // The truncate of an O_TRUNC open: `echo sync > .kvfs/ctl` runs the command (its reply,
    // read on the same descriptor, is not wanted there) instead of failing with EPERM.
    if (ino != Control::kCtlIno || to_set != FUSE_SET_ATTR_SIZE || attr->st_size != 0)
      return Err(req, EPERM);
    auto e = c.control->GetAttr(ino);
    if (!e.ok()) return ReplyStatus(req, e.status());
    return ReplyAttr(req, *e);
  }
  SetAttrRequest r;
  if (to_set & FUSE_SET_ATTR_MODE) r.mode = attr->st_mode;
  if (to_set & FUSE_SET_ATTR_UID) r.uid = attr->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) r.gid = attr->st_gid;
  if (to_set & FUSE_SET_ATTR_SIZE) r.size = static_cast<uint64_t>(attr->st_size);
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    r.atime = SetAttrRequest::Time::kNow;
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    r.atime = SetAttrRequest::Time::kSet;
    r.atime_value = {attr->st_atim.tv_sec, attr->st_atim.tv_nsec};
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    r.mtime = SetAttrRequest::Time::kNow;
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    r.mtime = SetAttrRequest::Time::kSet;
    r.mtime_value = {attr->st_mtim.tv_sec, attr->st_mtim.tv_nsec};
  }
  if (r.size) r.who = CallerOf(req);
  constexpr int kSets = FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID |
                        FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                        FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW;
  r.touch = (to_set & kSets) == 0;
  FileHandle* fh = fi ? HandleOf<FileHandle>(fi) : nullptr;
  auto e = c.ns->SetAttr(ino, r, fh);
  if (!e.ok()) return ReplyStatus(req, e.status());
  ReplyAttr(req, *e);
}

void OnReadlink(fuse_req_t req, fuse_ino_t ino) {
  auto target = Ctx(req).ns->Readlink(ino);
  if (!target.ok()) return ReplyStatus(req, target.status());
  fuse_reply_readlink(req, target->c_str());
}

void OnMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  if (Control::Owns(parent)) return Err(req, EPERM);
  if (parent == kRootId && name == kControlDirName) return Err(req, EEXIST);
  const fuse_ctx* who = fuse_req_ctx(req);
  auto e = Ctx(req).ns->Mknod(parent, name, mode, rdev, who->uid, who->gid);
  if (!e.ok()) return ReplyStatus(req, e.status());
  ReplyEntry(req, *e);
}

void OnMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  if (Control::Owns(parent)) return Err(req, EPERM);
  const fuse_ctx* who = fuse_req_ctx(req);
  auto e = Ctx(req).ns->Mkdir(parent, name, mode, who->uid, who->gid);
  if (!e.ok()) return ReplyStatus(req, e.status());
  ReplyEntry(req, *e);
}

void OnSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  if (Control::Owns(parent)) return Err(req, EPERM);
  const fuse_ctx* who = fuse_req_ctx(req);
  auto e = Ctx(req).ns->Symlink(parent, name, link, who->uid, who->gid);
  if (!e.ok()) return ReplyStatus(req, e.status());
  ReplyEntry(req, *e);
}

void OnUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (Control::Handles(parent, name)) return Err(req, EPERM);
  ReplyStatus(req, Ctx(req).ns->Unlink(parent, name));
}

void OnRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (Control::Handles(parent, name)) return Err(req, EPERM);
  ReplyStatus(req, Ctx(req).ns->Rmdir(parent, name));
}

void OnRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  if (Control::Handles(parent, name) || Control::Handles(newparent, newname))
    return Err(req, EPERM);
  ReplyStatus(req, Ctx(req).ns->Rename(parent, name, newparent, newname, flags));
}

void OnLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  if (Control::Owns(ino) || Control::Owns(newparent)) return Err(req, EPERM);
  if (newparent == kRootId && newname == kControlDirName) return Err(req, EEXIST);
  auto e = Ctx(req).ns->Link(ino, newparent, newname);
  if (!e.ok()) return ReplyStatus(req, e.status());
  ReplyEntry(req, *e);
}

void OnOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  FsContext& c = Ctx(req);
  if (Control::Owns(ino)) {
    auto h = c.control->Open(ino, fi->flags);
    if (!h.ok()) return ReplyStatus(req, h.status());
    fi->fh = reinterpret_cast<uintptr_t>(*h);
    fi->direct_io = 1;  // generated content: the size in stat means nothing
    fi->nonseekable = ino == Control::kCtlIno;
    if (fuse_reply_open(req, fi) != 0) c.control->Release(*h);
    return;
  }
  auto fh = c.ns->Open(ino, fi->flags);
  if (!fh.ok()) return ReplyStatus(req, fh.status());
  // A read of a published version is a hit for the eviction policy (inode = object id).
  if ((*fh)->layout) c.store->Touch(ino, static_cast<uint64_t>(fuse_req_ctx(req)->pid));
  fi->fh = reinterpret_cast<uintptr_t>(*fh);
  fi->direct_io = (*fh)->direct_io;
  fi->keep_cache = (*fh)->keep_cache;
  if (fuse_reply_open(req, fi) != 0) (void)c.ns->Release(*fh);
}

void OnCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  FsContext& c = Ctx(req);
  if (Control::Owns(parent)) return Err(req, EPERM);
  if (parent == kRootId && name == kControlDirName) return Err(req, EEXIST);
  const fuse_ctx* who = fuse_req_ctx(req);
  auto r = c.ns->Create(parent, name, mode, fi->flags, who->uid, who->gid);
  if (!r.ok()) return ReplyStatus(req, r.status());
  auto [entry, fh] = *r;
  fi->fh = reinterpret_cast<uintptr_t>(fh);
  fi->direct_io = fh->direct_io;
  fi->keep_cache = 0;
  fuse_entry_param p;
  std::memset(&p, 0, sizeof p);
  p.ino = entry.attr.st_ino;
  p.generation = 1;
  p.attr = entry.attr;
  p.attr_timeout = kVolatileTimeout;
  p.entry_timeout = kStableTimeout;
  if (fuse_reply_create(req, &p, fi) != 0) {
    (void)c.ns->Release(fh);
    c.ns->Forget(p.ino, 1);
  }
}

void OnRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  FsContext& c = Ctx(req);
  if (Control::Owns(ino)) {
    thread_local std::vector<char> buf;
    if (buf.size() < size) buf.resize(size);
    auto n = c.control->Read(HandleOf<ControlHandle>(fi), off, buf.data(), size);
    if (!n.ok()) return ReplyStatus(req, n.status());
    return (void)fuse_reply_buf(req, buf.data(), *n);
  }
  // Verified bytes straight from the store's buffers, spliced into the reply (splice_reply.h).
  auto view = c.ns->ReadSpans(HandleOf<FileHandle>(fi), static_cast<uint64_t>(off), size);
  if (!view.ok()) {
    if (std::string note; OpFailureLog().Allow(&note)) {
      spdlog::warn("read of inode {} at {} failed: {}{}", ino, off, view.status().ToString(), note);
    }
    return ReplyStatus(req, view.status());
  }
  ReplyRead(req, *view);
}

void OnWrite(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off,
             fuse_file_info* fi) {
  FsContext& c = Ctx(req);
  if (Control::Owns(ino)) {
    auto n = c.control->Write(HandleOf<ControlHandle>(fi), data, size);
    if (!n.ok()) return ReplyStatus(req, n.status());
    return (void)fuse_reply_write(req, *n);
  }
  Status st = c.ns->Write(HandleOf<FileHandle>(fi), off, data, size, CallerOf(req));
  if (!st.ok()) {
    if (std::string note; st.err() != ENOSPC && OpFailureLog().Allow(&note)) {
      spdlog::warn("write to inode {} failed: {}{}", ino, st.ToString(), note);
    }
    return ReplyStatus(req, st);
  }
  fuse_reply_write(req, size);
}

void OnFlush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (Control::Owns(ino)) return Err(req, 0);
  Status st = Ctx(req).ns->Flush(HandleOf<FileHandle>(fi));
  if (std::string note; !st.ok() && OpFailureLog().Allow(&note)) {
    spdlog::warn("publish of inode {} failed: {}{}", ino, st.ToString(), note);
  }
  ReplyStatus(req, st);
}

void OnRelease(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  FsContext& c = Ctx(req);
  if (Control::Owns(ino)) {
    c.control->Release(HandleOf<ControlHandle>(fi));
    return Err(req, 0);
  }
  ReplyStatus(req, c.ns->Release(HandleOf<FileHandle>(fi)));
}

void OnFsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  // Durability comes with publish at close (durability=close); an open writer's data is private
  // and not yet a version, so there is nothing to make durable early.
  fuse_reply_err(req, 0);
}

void OnReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  FsContext& c = Ctx(req);
  std::vector<char> buf(size);
  size_t used = 0;
  auto emit = [&](const std::string& name, uint64_t child, uint32_t type, uint64_t next) {
    struct stat st;
    std::memset(&st, 0, sizeof st);
    st.st_ino = child;
    st.st_mode = type;
    size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st,
                                    static_cast<off_t>(next));
    if (need > size - used) return false;
    used += need;
    return true;
  };
  Status st =
      Control::Owns(ino) ? c.control->Readdir(ino, off, emit) : c.ns->Readdir(ino, off, emit);
  if (!st.ok()) return ReplyStatus(req, st);
  fuse_reply_buf(req, buf.data(), used);
}

void OnStatfs(fuse_req_t req, fuse_ino_t) {
  StoreStats s = Ctx(req).store->Stats();
  struct statvfs sv;
  std::memset(&sv, 0, sizeof sv);
  sv.f_bsize = 4096;  // also the O_DIRECT alignment connectors derive from it
  sv.f_frsize = 4096;
  sv.f_blocks = s.capacity_bytes / 4096;
  uint64_t free_bytes = s.capacity_bytes > s.used_bytes ? s.capacity_bytes - s.used_bytes : 0;
  sv.f_bfree = sv.f_bavail = free_bytes / 4096;
  sv.f_ffree = sv.f_favail = 1ull << 32;
  sv.f_files = s.objects + sv.f_ffree;
  sv.f_namemax = kNameMax;
  fuse_reply_statfs(req, &sv);
}

constexpr int kEvictBusyTries = 100;  // 10 ms apart

// The bounded cache's controls: user.kvfs.pin = "1" | "0", user.kvfs.evict (any value),
// user.kvfs.parent = the chunk this one extends (namespace_parent.cc). Other "user." names are
// the file's own xattrs (namespace_xattr.cc); other namespaces are not kept (ENOTSUP).
void OnSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags) {
  FsContext& c = Ctx(req);
  if (Control::Owns(ino)) return Err(req, ENOTSUP);
  const std::string_view v(value, size);
  if (std::strcmp(name, "user.kvfs.pin") == 0) {
    if (v != "1" && v != "0") return Err(req, EINVAL);
    return ReplyStatus(req, c.ns->SetPinned(ino, v == "1"));
  }
  if (std::strcmp(name, "user.kvfs.evict") == 0) {
    // close(2) returns before the kernel sends the writer's RELEASE (FUSE sends it
    // asynchronously), so an evict right after the writer's close can find the file still
    // open for writing: EBUSY stands only once it has stayed so for about a second.
    Status st = c.store->Evict(ino);
    for (int i = 0; i < kEvictBusyTries && st.err() == EBUSY; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      st = c.store->Evict(ino);
    }
    if (st.ok()) c.ns->AwaitInvalidations();
    return ReplyStatus(req, st);
  }
  if (std::strcmp(name, "user.kvfs.parent") == 0) {
    return ReplyStatus(req, c.ns->SetPrefixParent(ino, v));
  }
  ReplyStatus(req, c.ns->SetXattr(ino, name, v, flags));
}

void OnRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  if (Control::Owns(ino)) return Err(req, ENOTSUP);
  ReplyStatus(req, Ctx(req).ns->RemoveXattr(ino, name));
}

// A reply to getxattr or listxattr: the size alone when asked with size 0.
void ReplyXattr(fuse_req_t req, const Result<std::string>& value, size_t size) {
  if (!value.ok()) return ReplyStatus(req, value.status());
  if (size == 0) return (void)fuse_reply_xattr(req, value->size());
  if (size < value->size()) return Err(req, ERANGE);
  fuse_reply_buf(req, value->data(), value->size());
}

void OnGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  // The kernel asks for security.capability on writes: answer without touching any lock.
  if (std::strncmp(name, "user.", 5) != 0 || Control::Owns(ino)) return Err(req, ENODATA);
  if (std::strncmp(name, "user.kvfs.", 10) != 0) {
    return ReplyXattr(req, Ctx(req).ns->GetXattr(ino, name), size);
  }
  Result<std::string> value = std::string();
  if (std::strcmp(name, "user.kvfs.pin") == 0) {
    auto rec = Ctx(req).ns->Record(ino);
    if (!rec.ok()) return ReplyStatus(req, rec.status());
    value = std::string((rec->flags & kFlagPinned) ? "1" : "0");
  } else if (std::strcmp(name, "user.kvfs.parent") == 0) {
    value = Ctx(req).ns->PrefixParent(ino);
  } else {
    value = Ctx(req).control->GetXattr(ino, name);
  }
  ReplyXattr(req, value, size);
}

// The file's own xattrs only: the user.kvfs.* attributes are computed status, not data of the
// file. Listed, they were copied by `cp -a`, `tar --xattrs` and `rsync -X` onto the copies
// (another filesystem's files carrying this mount's stale location and stat JSON), as CephFS
// found with its virtual xattrs. getxattr answers them by name (kvfsctl(8)).
void OnListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  if (Control::Owns(ino)) return ReplyXattr(req, std::string(), size);
  ReplyXattr(req, Ctx(req).ns->ListXattrs(ino), size);
}

void OnFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                 fuse_file_info* fi) {
  if (Control::Owns(ino)) return Err(req, EOPNOTSUPP);
  if (offset < 0 || length <= 0) return Err(req, EINVAL);
  ReplyStatus(req,
              Ctx(req).ns->Fallocate(HandleOf<FileHandle>(fi), mode, static_cast<uint64_t>(offset),
                                     static_cast<uint64_t>(length)));
}

// The last line of defence: libfuse is C, so an exception unwinding out of a callback would
// abort the daemon and leave every process using the mount with ENOTCONN. Whatever escapes a
// handler (a bug, bad_alloc) is logged and the request answered EIO; the daemon keeps serving.
void ReplyAfterException(fuse_req_t req, const char* op, const char* what, bool no_reply) {
  try {
    spdlog::error("fuse {}: unexpected exception: {}; answered {}", op, what,
                  no_reply ? "nothing" : "EIO");
  } catch (...) {
  }
  if (no_reply) {
    fuse_reply_none(req);
  } else {
    fuse_reply_err(req, EIO);
  }
}

template <auto Fn>
struct Guarded;
template <typename... Args, void (*Fn)(fuse_req_t, Args...)>
struct Guarded<Fn> {
  // `op` names the request in the log; forget-style requests get no reply.
  template <const char* op, bool no_reply = false>
  static void Call(fuse_req_t req, Args... args) noexcept {
    try {
      Fn(req, args...);
    } catch (const std::exception& e) {
      ReplyAfterException(req, op, e.what(), no_reply);
    } catch (...) {
      ReplyAfterException(req, op, "unknown exception", no_reply);
    }
  }
};

constexpr char kLookupName[] = "lookup";
constexpr char kForgetName[] = "forget";
constexpr char kForgetMultiName[] = "forget_multi";
constexpr char kGetattrName[] = "getattr";
constexpr char kSetattrName[] = "setattr";
constexpr char kReadlinkName[] = "readlink";
constexpr char kMknodName[] = "mknod";
constexpr char kMkdirName[] = "mkdir";
constexpr char kUnlinkName[] = "unlink";
constexpr char kRmdirName[] = "rmdir";
constexpr char kSymlinkName[] = "symlink";
constexpr char kRenameName[] = "rename";
constexpr char kLinkName[] = "link";
constexpr char kOpenName[] = "open";
constexpr char kCreateName[] = "create";
constexpr char kReadName[] = "read";
constexpr char kWriteName[] = "write";
constexpr char kFlushName[] = "flush";
constexpr char kReleaseName[] = "release";
constexpr char kFsyncName[] = "fsync";
constexpr char kReaddirName[] = "readdir";
constexpr char kStatfsName[] = "statfs";
constexpr char kSetxattrName[] = "setxattr";
constexpr char kGetxattrName[] = "getxattr";
constexpr char kListxattrName[] = "listxattr";
constexpr char kRemovexattrName[] = "removexattr";
constexpr char kFallocateName[] = "fallocate";

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof ops);
  ops.init = OnInit;
  ops.lookup = Guarded<OnLookup>::Call<kLookupName>;
  ops.forget = Guarded<OnForget>::Call<kForgetName, true>;
  ops.forget_multi = Guarded<OnForgetMulti>::Call<kForgetMultiName, true>;
  ops.getattr = Guarded<OnGetattr>::Call<kGetattrName>;
  ops.setattr = Guarded<OnSetattr>::Call<kSetattrName>;
  ops.readlink = Guarded<OnReadlink>::Call<kReadlinkName>;
  ops.mknod = Guarded<OnMknod>::Call<kMknodName>;
  ops.mkdir = Guarded<OnMkdir>::Call<kMkdirName>;
  ops.unlink = Guarded<OnUnlink>::Call<kUnlinkName>;
  ops.rmdir = Guarded<OnRmdir>::Call<kRmdirName>;
  ops.symlink = Guarded<OnSymlink>::Call<kSymlinkName>;
  ops.rename = Guarded<OnRename>::Call<kRenameName>;
  ops.link = Guarded<OnLink>::Call<kLinkName>;
  ops.open = Guarded<OnOpen>::Call<kOpenName>;
  ops.create = Guarded<OnCreate>::Call<kCreateName>;
  ops.read = Guarded<OnRead>::Call<kReadName>;
  ops.write = Guarded<OnWrite>::Call<kWriteName>;
  ops.flush = Guarded<OnFlush>::Call<kFlushName>;
  ops.release = Guarded<OnRelease>::Call<kReleaseName>;
  ops.fsync = Guarded<OnFsync>::Call<kFsyncName>;
  ops.readdir = Guarded<OnReaddir>::Call<kReaddirName>;
  ops.statfs = Guarded<OnStatfs>::Call<kStatfsName>;
  ops.setxattr = Guarded<OnSetxattr>::Call<kSetxattrName>;
  ops.getxattr = Guarded<OnGetxattr>::Call<kGetxattrName>;
  ops.listxattr = Guarded<OnListxattr>::Call<kListxattrName>;
  ops.removexattr = Guarded<OnRemovexattr>::Call<kRemovexattrName>;
  ops.fallocate = Guarded<OnFallocate>::Call<kFallocateName>;
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& KvfsOperations() {
  static const fuse_lowlevel_ops ops = MakeOps();
  return ops;
}

}  // namespace kvfs::fs
