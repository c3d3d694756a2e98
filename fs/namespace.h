// Namespace: the in-memory tree of inodes built from the store's records at mount, and every
// operation that changes it. FUSE-free, so it is unit-tested over MemoryStore.
//
// Inode numbers are object ids (ids are never reused, so no generation numbers are needed). An
// inode stays in memory while it is linked into the tree, looked up by the kernel (nlookup > 0)
// or open; an unlinked inode goes away when the last of those ends.
//
// Locks: `mu_` guards the tree and every Inode field; a WriteSession's own mutex guards its
// ChunkWriter. Order: WriteSession::mu before mu_. Store calls that can wait for the disk
// (Apply, Finish, Read) are made without `mu_` held; Apply calls keep the order in which the
// in-memory changes were made through a ticket (see ApplyInOrder).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "directory.h"
#include "inode_table.h"
#include "kvfs/chunk_store.h"
#include "kvfs/object.h"
#include "kvfs/status.h"
#include "open_file.h"

namespace kvfs::fs {

constexpr size_t kNameMax = 255;
// A file rewritten in place this recently is read with direct I/O rather than through the
// kernel's page cache (see Namespace::ChooseCacheMode).
constexpr int64_t kRewriteQuietSeconds = 5;
// How long a reader's open waits for a closed writer's RELEASE (Namespace::Open).
constexpr std::chrono::milliseconds kReleaseWait{200};
// Names the namespace refuses in the root: the control directory lives there.
constexpr std::string_view kControlDirName = ".kvfs";

// Told about inodes whose kernel caches went stale (a new version was published, atime moved).
// Implementations must not call back into the kernel from the caller's thread.
class InvalidationSink {
 public:
  virtual ~InvalidationSink() = default;
  virtual void InvalidateInode(uint64_t ino, bool data) = 0;
  // A name vanished without a request from the kernel (the store dropped its record).
  virtual void InvalidateEntry(uint64_t /*parent*/, const std::string& /*name*/) {}
  // Returns once everything asked for before the call reached the kernel, or after `max`.
  virtual void Drain(std::chrono::milliseconds /*max*/) {}
};

// What an inode holds only while handles are open on it, or for a while after a writer opened
// it in place: most inodes of a big namespace never have one, so it sits behind a pointer
// (Inode::open), made at the first open and dropped once nothing in it matters (file_handle.cc).
struct OpenState {
  std::shared_ptr<WriteSession> writing;  // while a handle is open for writing
  uint64_t cache_view_size = 0;           // the size of cache_view when it is a published version
  uint32_t opens = 0;
  uint32_t cache_handles = 0;  // handles open through the page cache, all on cache_view
  // Monotonic seconds when a writer last opened this published file in place (0: never);
  // readers that open within kRewriteQuietSeconds of it use direct I/O (file_handle.cc).
  int64_t rewritten_at = 0;
  // The kernel has one page cache and one i_size per inode, but readers of an old version, a
  // private writer and readers of the new version may have the file open at once. Only one
  // view owns the page cache: `cache_view` (the id of a published version, `version`, or of a
  // write session) with `cache_handles` handles open on it; handles of any other view are
  // direct I/O, so no reply about them lands in the cache (file_handle.cc). Without an
  // OpenState, Inode::cache_current says whether the cache holds the published version: the
  // next open of it keeps those pages.
  uint64_t version = 0;  // id of rec.layout's content; a new id whenever it changes
  uint64_t cache_view = 0;
};

struct Inode {
  // rec.id is the inode number; rec.layout is the published version. While `linked`, the tree
  // holds exactly the names the record lists ((parent, name) and extra_links; namespace_links.cc).
  // (Fields ordered to leave little padding: a daemon keeps one Inode per name.)
  //
  // The first name (rec.parent and a name) lives in the parent directory only, as the entry
  // with readdir cookie `name_cookie`. An inode with no entry there (unlinked: the last name
  // it had, for logs; being loaded) has `kept_name` set and its name in the namespace's
  // kept_names_ (FirstName, RecordOf). A name is most of an inode's memory when held twice.
  NamelessRecord rec;
  bool journaled : 1 = false;      // the store holds a record for it
  bool linked : 1 = true;          // reachable by at least one name
  bool lazy_dirty : 1 = false;     // atime or a directory time changed, persisted at shutdown
  bool kept_name : 1 = false;      // its first name is in Namespace::kept_names_
  bool cache_current : 1 = false;  // no `open`: the page cache holds the published version
  uint64_t name_cookie : 59 = 0;   // the first name's readdir cookie in rec.parent; 0: none
  uint64_t nlookup = 0;
  std::unique_ptr<Directory> dir;  // directories only
  // Made at the first open (Namespace::Opened), dropped once nothing in it matters.
  std::unique_ptr<OpenState> open;

  uint32_t opens() const { return open ? open->opens : 0; }
  uint32_t cache_handles() const { return open ? open->cache_handles : 0; }
  const std::shared_ptr<WriteSession>& writing() const {
    static const std::shared_ptr<WriteSession> none;
    return open ? open->writing : none;
  }
};

// One per name in a big namespace: keep it in glibc's 160-byte size class.
static_assert(sizeof(Inode) <= 152);

struct EntryInfo {
  struct stat attr {};
  bool stable = false;  // published and not being written: the kernel may cache it long
};

// Who writes or truncates: a caller without CAP_FSETID (any uid but 0: a FUSE daemon sees no
// capabilities) takes a file's set-id bits away, as on ext4. The kernel drops them itself
// before a write through the page cache, but not for direct_io writes (O_APPEND, O_DIRECT),
// and it keeps an S_ISGID without S_IXGRP that the VFS drops for a caller outside the group.
struct Caller {
  uint32_t uid = 0, gid = 0;
  // Whether the caller has this supplementary group; asked only when it decides (reading them
  // costs a /proc read).
  std::function<bool(uint32_t gid)> in_group;
};

struct SetAttrRequest {
  std::optional<uint32_t> mode, uid, gid;
  std::optional<uint64_t> size;
  enum class Time { kKeep, kNow, kSet };
  Time atime = Time::kKeep, mtime = Time::kKeep;
  Timespec64 atime_value, mtime_value;
  Caller who;  // for a size change (see Caller)
  // Nothing to set, as `chown(f, -1, -1)` sends: only ctime moves, as on ext4 and tmpfs
  // (POSIX allows either).
  bool touch = false;
};

// lookups/hits/misses: the LOOKUP requests kvfs answered (the kernel answers repeats from its
// caches). read_hits and cache_misses are the cache's hit rate as kvfsctl(8) defines it: opens
// of a published file for reading, and lookups of a missing name other than the kernel's own
// lookup right before it creates or renames onto that name.
struct LookupCounters {
  std::atomic<uint64_t> lookups{0}, hits{0}, misses{0};
  std::atomic<uint64_t> read_hits{0}, cache_misses{0};
};

class Namespace {
 public:
  Namespace(ChunkStore* store, InvalidationSink* sink);
  ~Namespace();

  // Builds the tree from store->Records(). Records whose parent is missing are logged and
  // skipped (the store keeps them until removed).
  Status Load();

  // --- names and attributes (namespace.cc)
  Result<EntryInfo> Lookup(uint64_t parent, std::string_view name);  // counts a lookup
  void Forget(uint64_t ino, uint64_t n);
  // With `fh` (fstat, or the kernel refreshing i_size for an open file): that handle's view,
  // e.g. the version a reader opened, though a newer one is published since.
  Result<EntryInfo> GetAttr(uint64_t ino, const FileHandle* fh = nullptr);
  Result<EntryInfo> SetAttr(uint64_t ino, const SetAttrRequest& req, FileHandle* fh);
  Result<EntryInfo> Mkdir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                          uint32_t gid);
  Result<EntryInfo> Symlink(uint64_t parent, std::string_view name, std::string_view target,
                            uint32_t uid, uint32_t gid);
  // A regular file (published at once, empty: nothing else would publish it), a FIFO, a
  // character or block device node (`rdev`) or a socket; `mode` carries the S_IF* type.
  Result<EntryInfo> Mknod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
                          uint32_t uid, uint32_t gid);
  // A hard link: one more name for a file or special file (namespace_links.cc).
  Result<EntryInfo> Link(uint64_t ino, uint64_t new_parent, std::string_view new_name);
  Status Unlink(uint64_t parent, std::string_view name);
  Status Rmdir(uint64_t parent, std::string_view name);
  Status Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                std::string_view new_name, unsigned flags);
  Result<std::string> Readlink(uint64_t ino);
  // Streams entries from `offset` (a cookie); `emit(name, ino, type_bits, next_offset)` returns
  // false when the reply buffer is full.
  Status Readdir(uint64_t ino, uint64_t offset,
                 const std::function<bool(const std::string&, uint64_t, uint32_t, uint64_t)>& emit);
  // The record as the kernel would see it now, for xattrs and the control surface.
  Result<ObjectRecord> Record(uint64_t ino);
  bool Journaled(uint64_t ino);
  // Persists times changed in memory only (atime, directory mtimes). Called at shutdown.
  Status PersistLazy();
  // The store removed this record on its own (namespace_store_removal.cc): unlinks the name
  // without journaling anything and tells the kernel to forget the entry. Open handles keep
  // working. An eviction also drops the inode's layout reference (the space frees once open
  // handles close) and never takes a name from under its writer.
  enum class StoreRemoval { kCorrupt, kEvicted };
  void ForgetStoreRemoval(ObjectId id, StoreRemoval why);
  // The store undid a change it had accepted (a journal write failed; namespace_rollback.cc):
  // puts `id` back to its durable `record`, or takes it out of the tree when there is none
  // (null), and tells the kernel. Nothing is journaled. Open handles keep working.
  // A shared store's reset (origin non-zero) gives way to what overtook it: a change of the
  // object, or of the holder of a name it would take, made here after the refused one or
  // committed after the store's read.
  void RestoreStoreRecord(ObjectId id, const ObjectRecord* record, ResetOrigin origin = {});
  // A shared store committed the batch of ticket seq at `revision` (StoreListener::OnCommitted):
  // the objects it put carry that revision from now on, before ApplyInOrder hears of it.
  void NoteCommitted(uint64_t seq, uint64_t revision);
  // user.kvfs.pin (namespace_pin.cc): sets or clears kFlagPinned, journaled when published.
  Status SetPinned(uint64_t ino, bool pinned);
  // Waits (at most a second) until the kernel was told of every name and page this namespace
  // dropped so far: after an explicit eviction the evicted names are gone from the kernel's
  // caches before the request that asked for it returns.
  void AwaitInvalidations() {
    if (sink_) sink_->Drain(std::chrono::seconds(1));
  }
  // user.kvfs.parent (namespace_parent.cc): the chunk this file extends, for prefix-aware
  // eviction. `value` is a name in the file's directory or a path from the mount root; ENOENT
  // when nothing is there, empty clears it. Journaled when published.
  Status SetPrefixParent(uint64_t ino, std::string_view value);
  // The linked parent's name (same directory) or "/path" from the root; ENODATA when none.
  Result<std::string> PrefixParent(uint64_t ino);
  // User xattrs (namespace_xattr.cc): "user." names other than user.kvfs.* (ENOTSUP), on files
  // and directories (EPERM), not the root (ENOTSUP). `flags`: XATTR_CREATE (EEXIST when set)
  // or XATTR_REPLACE (ENODATA when not); an object's names and values past kMaxXattrBytes:
  // ENOSPC. Journaled when published, with a new ctime.
  Status SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags);
  Status RemoveXattr(uint64_t ino, std::string_view name);  // ENODATA when not set
  Result<std::string> GetXattr(uint64_t ino, std::string_view name);
  // The names, each followed by a NUL, as listxattr(2) returns them.
  Result<std::string> ListXattrs(uint64_t ino);

  // --- changes made on other cluster nodes (namespace_remote.cc). Nothing is applied to the
  // store (it already holds them); the kernel is told through the InvalidationSink, never
  // from the caller's thread. A change older than what the tree holds (its revision) is
  // ignored, so applying one twice is a no-op.
  // One commit of another node: records created, renamed, republished or changed, and ids
  // removed (unlink, rmdir, the replaced side of a rename).
  void ApplyRemoteChanges(const std::vector<ObjectRecord>& puts,
                          const std::vector<ObjectId>& removes);
  // The shared namespace was re-read at `revision`: committed objects not in `present`
  // (sorted) are gone.
  void ApplyRemoteResync(const std::vector<ObjectId>& present, uint64_t revision);
  // The shared namespace lost its history (StoreListener::OnRemoteHistoryLost): every committed
  // record's revision becomes 1, older than any of the new history, so the re-read that
  // follows replaces each record etcd holds and removes each it lacks.
  void ForgetRemoteRevisions();

  // --- open files (file_handle.cc)
  // A new, unpublished file open for writing (flags as in open(2)).
  Result<std::pair<EntryInfo, FileHandle*>> Create(uint64_t parent, std::string_view name,
                                                   uint32_t mode, int flags, uint32_t uid,
                                                   uint32_t gid);
  Result<FileHandle*> Open(uint64_t ino, int flags);
  // Copies what ReadSpans gives (tests, tools).
  Result<size_t> Read(FileHandle* fh, uint64_t offset, void* out, size_t len);
  // The same bytes as verified spans of store buffers (no copy), for a spliced reply.
  Result<ReadView> ReadSpans(FileHandle* fh, uint64_t offset, size_t len);
  Status Write(FileHandle* fh, uint64_t offset, const void* data, size_t len,
               const Caller& who = {});
  // Publishes the handle's session if it changed: Finish() then one Apply. close(2) waits on it.
  Status Flush(FileHandle* fh);
  // Publishes if still dirty, then frees the handle.
  Status Release(FileHandle* fh);
  Status Fallocate(FileHandle* fh, int mode, uint64_t offset, uint64_t len);
  // The set-id bits of a file with `mode` and group `gid` that a write or truncate by `who`
  // drops (Caller).
  static uint32_t SetIdBitsDropped(uint32_t mode, uint32_t gid, const Caller& who);

  const LookupCounters& counters() const { return counters_; }
  size_t inode_count();
  // Inodes holding an OpenState; walks every inode (tests).
  size_t CountInodesWithOpenState();
  // Names kept aside for inodes with no entry in their parent (tests: linked inodes keep none).
  size_t KeptNameCount();

 private:
  Inode* Find(uint64_t ino);                                          // mu_ held
  Result<Inode*> FindDir(uint64_t ino);                               // mu_ held
  Inode* Child(Inode* dir, std::string_view name);                    // mu_ held
  void LinkChild(Inode* dir, const std::string& name, Inode* child);  // mu_ held
  void UnlinkChild(Inode* dir, const std::string& name);              // mu_ held
  // --- an inode's names (namespace_links.cc), mu_ held. Each keeps the tree and the record's
  // name list in step.
  // Links `in` as `name` in `dir` (the record's first name when it had none).
  void AddName(Inode* in, Inode* dir, const std::string& name);
  // Takes the name out of `dir` and the record; the next name becomes the first one.
  void RemoveName(Inode* in, Inode* dir, const std::string& name);
  // Renames one of `in`'s names in the record (its position in the list is kept); `first`:
  // it was the first name (IsFirstName, asked before the old entry went). The new name must be
  // linked already.
  void RenameInRecord(Inode* in, const kvfs::Link& from, const kvfs::Link& to, bool first);
  bool IsFirstName(const Inode* in, const kvfs::Link& name) const;
  // The first name: the parent directory's entry, or the kept name while the inode has no
  // entry (unlinked: the last name it had, for logs). Valid until that directory changes.
  std::string_view FirstName(const Inode* in) const;
  // Makes (parent, name) its first name: held by the directory when linked to `in` there,
  // else kept aside.
  void SetFirstName(Inode* in, uint64_t parent, std::string_view name);
  // Keeps a copy of the first name before its entry goes (the inode stays unlinked).
  void KeepFirstName(Inode* in);
  void KeepName(Inode* in, std::string name);
  void DropKeptName(Inode* in);
  // The record as the store sees it: in->rec with its first name filled in.
  ObjectRecord RecordOf(const Inode* in) const;
  // Takes everything of `rec` but its names, which SetNames has settled.
  void TakeAllButNames(Inode* in, const ObjectRecord& rec);
  // Moves one of `in`'s names in the tree and the record.
  void MoveName(Inode* in, Inode* src_dir, const std::string& name, Inode* dst_dir,
                const std::string& new_name);
  // Every name of `in` (none when unlinked), first name first.
  std::vector<kvfs::Link> NamesOf(const Inode* in) const;
  // NamesOf, for an inode the store holds a record of (namespace_names.cc).
  std::vector<kvfs::Link> StoredNames(const Inode* in) const;
  // Makes the tree show `in` under exactly `names` (a record's list, first name first), for
  // records that arrive from the store or a peer. A name held by another inode is asked of
  // `take(dir, name)`, which frees it or says no; a name it keeps, or whose directory is
  // missing, is left out. `changed` gets each name that appeared or went.
  void SetNames(Inode* in, const std::vector<kvfs::Link>& names,
                const std::function<bool(Inode*, const std::string&)>& take,
                std::vector<std::pair<uint64_t, std::string>>* changed);
  // Takes every name of `in` out of the tree (the record keeps them, for logs).
  void UnlinkAllNames(Inode* in, std::vector<std::pair<uint64_t, std::string>>* gone);
  // mu_ held: frees an unlinked inode nobody refers to, unless a directory that still lists
  // entries (it is given a name again; see namespace.cc).
  void MaybeDrop(Inode* in);
  // mu_ held: the same for an object the store no longer has, also a directory that still
  // lists entries (this node's files being written there, whose publishes are refused).
  void DropGone(Inode* in);
  void EraseInode(Inode* in);  // mu_ held: frees `in` now
  // mu_ held: drops the layout of a file nobody can read any more (no name, no open handle),
  // so its extents free now rather than when the kernel forgets the inode.
  void ReleaseUnreachableData(Inode* in);
  // mu_ held: the inode has no name and no handle (see GetAttr).
  bool ReachedThroughStaleName(const Inode* in) const;
  // mu_ held: takes the name `name` of `in` out of `dir` (unlink, or the target a rename
  // replaces). Its last name: queues its removal in `batch` when it was journaled and frees it
  // when nobody refers to it; otherwise queues its record with the names left.
  void DetachEntry(Inode* dir, Inode* in, const std::string& name, Timespec64 now,
                   MetaBatch* batch);
  EntryInfo MakeEntry(const Inode* in, const FileHandle* fh = nullptr) const;  // mu_ held
  // mu_ held: installs a new published content (a new version id for the page cache).
  void SetLayout(Inode* in, LayoutRef layout);
  // mu_ held: rec.layout's content changed: pages cached of the old one are not current.
  void NewVersion(Inode* in);
  // mu_ held: the inode's OpenState, made (with an id for the published version) if needed.
  OpenState& Opened(Inode* in);
  // mu_ held: decides direct_io/keep_cache of a handle opening on `view` (file_handle.cc).
  void ChooseCacheMode(Inode* in, FileHandle* fh, uint64_t view);
  // Undoes what opening `fh` added to `in` and to its session's handle count, and frees the
  // inode's OpenState once nothing in it matters.
  void CloseHandleOf(Inode* in, const FileHandle& fh);
  // mu_ held: a directory with the set-group-ID bit passes on its group (and, to a new
  // directory, the bit itself), as on ext4.
  Result<Inode*> NewChild(uint64_t parent, std::string_view name, ObjectType type, uint32_t mode,
                          uint32_t uid, uint32_t gid);
  // mu_ held: checks a new name in `parent` (valid, directory linked, not taken).
  Result<Inode*> DirForNewName(uint64_t parent, std::string_view name);
  Status RemoveEntry(uint64_t parent, std::string_view name, bool dir);
  // Submits the batch in ticket order and waits for it; then the puts carry the revision the
  // store gave them and the layouts it replaced (Committed).
  Status ApplyInOrder(uint64_t ticket, const MetaBatch& batch);
  Status RenameOnce(uint64_t parent, std::string_view name, uint64_t new_parent,
                    std::string_view new_name, unsigned flags);
  Result<EntryInfo> SetAttrOnce(uint64_t ino, const SetAttrRequest& req, FileHandle* fh);
  // Sets `name` to *value, or removes it when value is null.
  Status ChangeXattrOnce(uint64_t ino, std::string_view name, const std::string_view* value,
                         int flags);
  void UndoLookup(uint64_t ino);  // an entry reply that failed after its lookup was counted
  Result<EntryInfo> LinkOnce(uint64_t ino, uint64_t new_parent, std::string_view new_name);
  // A shared namespace (namespace_names.cc), mu_ held. A change notes each inode it touches
  // before changing it; FinishNames then adds to the batch every name that changed hands
  // (MetaBatch::names), which the shared store checks and moves. No-ops for a local store.
  using NameLedger = std::vector<std::pair<ObjectId, std::vector<kvfs::Link>>>;
  void NoteNames(NameLedger& ledger, const Inode* in) const;
  void FinishNames(const NameLedger& ledger, MetaBatch* batch);
  // Adds `dir` and its ancestors below the root, at their revisions here, to the records the
  // batch requires unchanged (MetaBatch::unchanged). No-op for a local store.
  void NoteAncestors(Inode* dir, MetaBatch* batch);
  // Runs `op` again while the shared store refuses it as based on an old view (the view is
  // brought up to date before each refusal returns).
  template <typename Op>
  auto RetryConflicts(Op op) {
    // Every change made this way goes to the store: one the store refuses up front must not
    // change the tree first (see ChunkStore::CheckWritable).
    if (Status st = store_->CheckWritable(); !st.ok()) return decltype(op())(std::move(st));
    for (int attempt = 1;; ++attempt) {
      auto result = op();
      if (result.ok() || !StatusOf(result).IsConflict() || attempt == kConflictAttempts)
        return result;
      BeforeRetry(attempt);
    }
  }
  // Between two attempts of a change refused as a conflict: the conflict may be with another
  // change of this node still on its way (a publish waiting on a slow peer's copy), whose answer
  // settles the objects both touch; from the third attempt on, a random pause that doubles
  // (at most 64 ms), so changes racing for the same names from several nodes stop meeting.
  void BeforeRetry(int attempt);
  static const Status& StatusOf(const Status& st) { return st; }
  template <typename T>
  static Status StatusOf(const Result<T>& r) {
    return r.status();
  }
  // Then EAGAIN. Three nodes renaming and publishing over the same 8 names without a pause
  // saw 5 immediate attempts all refused (a rename built on a state another node had just
  // replaced, every time); with the pauses of BeforeRetry the worst case is under a second.
  static constexpr int kConflictAttempts = 12;
  // mu_ held: the batch's place in the order of changes; its objects remember it (seq).
  uint64_t TakeTicket(MetaBatch& batch);
  // Whether a shared store's reset was overtaken by `x`'s newer state (see RestoreStoreRecord).
  bool Overtakes(const Inode* x, ResetOrigin origin) const;
  // Whether the newest change of `id` this node made was refused (shared stores only).
  bool LastChangeRefusedLocked(ObjectId id) const;
  // mu_ held: whether a directory holds one of `names` now.
  bool HeldByDirectoryLocked(const std::vector<kvfs::Link>& names);
  // mu_ held, at a close: the reset that waited for `in`'s writer (resets_behind_writer_), when
  // the writer is gone and made no change of it since.
  std::optional<ResetOrigin> ResetAfterWriterLocked(const Inode* in);
  // namespace_in_flight.cc. The batch of ticket seq was answered: its objects are no longer on
  // their way, and the records that waited for their names are applied. `refused`: where the
  // batch is its objects' newest change, that change gets a reset of its own and overtakes no
  // other (Overtakes).
  void EndInFlight(uint64_t seq, bool refused = false);
  // A shared store answered `batch` with an error: the kernel kept its view from before the
  // change (the operation failed), while this tree keeps the change until its reset, and etcd
  // may yet have taken it (a transaction that timed out here and committed there). The reset
  // tells the kernel only of what it changes in this tree, so the kernel forgets every name
  // and attribute the batch touched now and asks this tree again.
  void ForgetRefusedInKernel(const MetaBatch& batch);
  // Waits (at most 2 s) until every batch given to the store so far has been answered.
  void AwaitEarlierChanges();
  bool InFlightLocked(ObjectId id) const;
  // Whether a name `rec` takes is held by another object whose change is on its way, or by a
  // file of this node not published yet.
  bool NameBlockedLocked(const ObjectRecord& rec);
  // Publishes session `s` of inode `ino` when it holds private changes (dirty); s.mu held.
  Status PublishLocked(WriteSession& s, uint64_t ino);
  void TouchAtime(Inode* in);     // mu_ held
  void NoteRead(FileHandle* fh);  // a read on fh: atime, without mu_ mostly
  // namespace_remote.cc, mu_ held: the names whose dentries and the inodes whose caches went
  // stale are appended for the caller to announce after unlocking.
  struct Stale {
    std::vector<std::pair<uint64_t, std::string>> entries;
    std::vector<std::pair<uint64_t, bool>> inodes;  // ino, data
  };
  // Drops the notifications the kernel has no use for: entries under a directory it does not
  // know (it forgot the inode, so it has no dentries there, negative ones included) and inodes
  // it does not know. Every node applies every change of the cluster, most of them in
  // directories it never looked at; each notification is a write to /dev/fuse.
  void KeepKnownToKernelLocked(Stale& stale) const;
  // Tells the kernel (through the sink's thread) what went stale; mu_ not held.
  void Announce(const Stale& stale);
  // Whether two states of an object show the same attributes (stat's fields; not its names
  // nor, beyond its size, its data).
  static bool SameAttrs(const NamelessRecord& a, const NamelessRecord& b);
  // mu_ held, after a remote commit: the directories whose entries it changed take the time
  // of the change (mtime, ctime), as the node that made it showed.
  void TouchChangedDirectoriesLocked(const Stale& stale);
  // mu_ held: the remote records parked until directory `in` arrived (remote_orphans_) are
  // applied, once it is in the tree: by a remote record of it, or by a reset that gives it
  // back (it left the tree while its name waited, and records for it came meanwhile).
  void AdoptParkedLocked(Inode* in, Stale& stale);
  bool KnownToKernelLocked(uint64_t ino) const;
  void RemotePutLocked(const ObjectRecord& rec, Stale& stale);
  void RemoteRemoveLocked(ObjectId id, Stale& stale);
  // mu_ held: applies the other nodes' records that waited for a name, once no change on its
  // way and no file in writing holds it.
  void ApplyDeferredClaimsLocked(Stale& stale);
  bool ClaimNameLocked(Inode* dir, const std::string& name, const ObjectRecord& rec, Stale& stale);

  ChunkStore* store_;
  InvalidationSink* sink_;
  const bool shared_;  // store_->SharedNamespace(): other nodes change the same names
  std::mutex mu_;
  InodeTable inodes_;
  uint64_t next_ticket_ = 0;
  // Objects by the seq of their newest change made here, and whether the store refused it
  // (shared stores only; the newest entries are kept, see TakeTicket).
  struct LastChangeOf {
    uint64_t seq = 0;
    bool refused = false;
  };
  std::unordered_map<ObjectId, LastChangeOf> last_change_;
  // Batches given to a shared store and not answered yet (seq -> their objects), and those
  // objects with the number of such batches each is in.
  struct InFlightBatch {
    std::vector<ObjectId> puts, removes;
  };
  std::unordered_map<uint64_t, InFlightBatch> in_flight_;
  std::unordered_map<ObjectId, uint32_t> in_flight_ids_;
  // Resets that gave way to a name holder's change still on its way, by that holder: when the
  // change is refused they run again (its own reset does not give the name back), when it
  // commits they are dropped (it is newer than them).
  struct ResetBehind {
    ObjectId id = 0;
    std::optional<ObjectRecord> record;
    ResetOrigin origin;
  };
  std::unordered_map<ObjectId, std::vector<ResetBehind>> resets_behind_;
  // Resets whose record names a directory this node's tree does not have, by that directory:
  // it left the tree with a refused change of this node and comes back with its own reset,
  // which may come later (resets come in id order, and another node's child has a lower id
  // than this node's directory), or with a remote record. AdoptParkedLocked moves them to
  // resets_ready_ when it is back; RunReadyResets runs them once mu_ is released.
  std::unordered_map<ObjectId, std::vector<ResetBehind>> resets_behind_dir_;
  std::vector<ResetBehind> resets_ready_;
  void RunReadyResets();  // mu_ not held
  // Resets to "gone" of objects etcd never held that a writer had open (RestoreStoreRecord):
  // the writer's close publishes them. Run at its last close if it made no change of them.
  std::unordered_map<ObjectId, ResetOrigin> resets_behind_writer_;
  std::condition_variable in_flight_cv_;  // with mu_: a batch left in_flight_
  std::condition_variable sessions_cv_;   // with mu_: a write session lost its last handle
  // Other nodes' records that would have taken a name held by an object of an in-flight batch
  // or by a file not published yet (ClaimNameLocked), by id: applied when that batch is
  // answered or that file leaves the name, unless a newer state of theirs (a put, a removal, a
  // reset) came first.
  std::unordered_map<ObjectId, ObjectRecord> deferred_claims_;
  // The objects the remote commit being applied puts (ApplyRemoteChanges): a name one of them
  // holds goes to the record that claims it, since the holder's own record follows.
  std::unordered_set<ObjectId> applying_;
  uint64_t next_view_ = 0;  // ids of versions and write sessions (OpenState::cache_view)
  std::mutex apply_mu_;
  std::condition_variable apply_cv_;
  uint64_t serving_ticket_ = 0;
  LookupCounters counters_;
  // Missing names looked up in the last kCreateLookupWindow (mu_): a create or rename onto one
  // of them takes its miss back out of cache_misses (the kernel's own lookup before it).
  struct RecentMiss {
    uint64_t parent;
    std::string name;
    int64_t at_ns;
  };
  std::vector<RecentMiss> recent_misses_;
  void NoteMiss(uint64_t parent, std::string_view name);     // mu_ held
  void ForgiveMiss(uint64_t parent, std::string_view name);  // mu_ held
  // Peer records whose parent directory has not arrived yet, by parent id (namespace_remote.cc).
  std::unordered_map<uint64_t, std::vector<ObjectRecord>> remote_orphans_;
  size_t remote_since_trim_ = 0;  // remote records applied since the last malloc_trim (mu_)
  // The first names of inodes with `kept_name` set, by inode number (namespace_links.cc).
  std::unordered_map<uint64_t, std::string> kept_names_;
};

Timespec64 Now();
Status CheckName(std::string_view name);

}  // namespace kvfs::fs
