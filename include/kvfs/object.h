// The persistent object model shared by the engine (which stores and journals it) and the fs
// layer (which builds the directory tree from it). One ObjectRecord per file, directory, symlink
// or special file; the namespace is the set of (parent, name) pairs in these records (a file
// with hard links has several).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvfs/rare_fields.h"

namespace kvfs {

using ObjectId = uint64_t;
constexpr ObjectId kInvalidId = 0;
constexpr ObjectId kRootId = 1;  // the root directory always exists and is never journaled

enum class Codec : uint8_t { kNone = 0, kLz4 = 1 };

// One stored segment of a chunk: a 4 KiB-aligned extent on one device. The checksum covers the
// stored (possibly compressed) bytes, so it is checked before decompression.
struct Segment {
  uint16_t device = 0;  // index into the engine's device list
  Codec codec = Codec::kNone;
  uint32_t index = 0;       // its place in the file: raw bytes [index * S, ...), S = segment size
  uint64_t offset = 0;      // byte offset on the device, 4 KiB aligned
  uint32_t stored_len = 0;  // bytes of payload on the device (extent is this rounded up to 4 KiB)
  uint32_t raw_len = 0;     // bytes after decoding
  uint64_t checksum = 0;    // XXH3_64bits of the stored payload
};

// The immutable content of one published file version. Segments are in ascending index order;
// segment i holds raw bytes [i * S, min((i + 1) * S, size)) of the file. An index with no
// segment is a hole (zeros, nothing stored), so a sparse file costs what was written, not its
// size. A file written from start to end has segments[i].index == i.
struct Layout {
  // A layer whose layouts derive from this one (the cluster's) marks them, so that it can
  // tell its own from the engine's without a registry of live layouts.
  enum class Kind : uint8_t { kSegments = 0, kClusterChunk = 1 };

  uint64_t size = 0;
  // Behind one pointer: a cluster's layouts (one per file, millions of them) have none.
  RareVector<Segment> segments;
  Kind kind = Kind::kSegments;

  // The segment with this index, or null when that part of the file is a hole.
  const Segment* Find(uint64_t index) const {
    if (index < segments.size() && segments[index].index == index) return &segments[index];
    auto it = std::lower_bound(segments.begin(), segments.end(), index,
                               [](const Segment& s, uint64_t i) { return s.index < i; });
    return it != segments.end() && it->index == index ? &*it : nullptr;
  }
};

// A Layout is shared by the index and by every open reader. Its extents return to the allocator
// only when the last reference goes away (and the journal no longer names them), which is what
// keeps unlinked-but-open and evicted-but-open files readable.
using LayoutRef = std::shared_ptr<const Layout>;

// Special files (FIFOs, device nodes, sockets) are metadata only: the kernel serves their I/O.
enum class ObjectType : uint8_t {
  kFile = 1,
  kDirectory = 2,
  kSymlink = 3,
  kFifo = 4,
  kCharDevice = 5,
  kBlockDevice = 6,
  kSocket = 7,
};
constexpr uint8_t kMaxObjectType = 7;
// Names one object may have; link(2) beyond it fails with EMLINK. Every change journals the
// whole record with all its names, so the bound keeps a record (and the journal traffic of
// each link and unlink) small: a user cannot grow the journal quadratically.
constexpr uint32_t kMaxLinks = 1000;
// User xattrs: a name is "user." and at most 250 more bytes (XATTR_NAME_MAX is 255); an
// object's names and values together take at most kMaxXattrBytes (ext4's bound with 4 KiB
// blocks; more fails with ENOSPC, as there). Every change of an object journals (and, in a
// cluster, commits to etcd) the whole record, so the bound keeps each change small.
constexpr size_t kXattrNameMax = 255;
constexpr size_t kMaxXattrBytes = 4096;
constexpr std::string_view kUserXattrPrefix = "user.";
// Whether `list` is what a record may hold: sorted, unique, "user." names within the bounds.
inline bool ValidXattrs(const std::vector<Xattr>& list) {
  size_t bytes = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string& n = list[i].name;
    if (n.size() <= kUserXattrPrefix.size() || n.size() > kXattrNameMax ||
        !n.starts_with(kUserXattrPrefix) || n.find('\0') != std::string::npos) {
      return false;
    }
    if (i > 0 && list[i - 1].name >= n) return false;
    bytes += n.size() + list[i].value.size();
  }
  return bytes <= kMaxXattrBytes;
}

// A directory entry: one name of an object.
struct Link {
  uint64_t parent = 0;
  std::string name;
  bool operator==(const Link&) const = default;
};

enum ObjectFlags : uint32_t {
  kFlagPinned = 1u << 0,  // never evicted
};

struct Timespec64 {
  int64_t sec = 0;
  int64_t nsec = 0;
};

// A record without its first name. The fs keeps one per inode and leaves the name to the
// parent directory's entry (a name held twice is most of a big namespace's memory).
struct NamelessRecord {
  ObjectId id = kInvalidId;
  ObjectId parent = kInvalidId;  // the directory of the first name
  // (Fields ordered and sized to leave little padding: a daemon keeps one record per name.)
  ObjectType type = ObjectType::kFile;
  uint16_t mode = 0;  // permission bits only (07777); the type is in `type`
  uint32_t flags = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  Timespec64 atime, mtime, ctime;
  // A symlink's target, a device's number (kCharDevice, kBlockDevice) and the optional chain
  // link a writer gives a file (an eviction hint): few records have any, so all three sit
  // behind one pointer. Read and set them through the accessors below.
  RareFields rare;
  LayoutRef layout;  // kFile only; null means empty file
  // Hard links: names beyond the first (parent, name). Never directories.
  RareVector<Link> extra_links;
  // The store's version of this record (the cluster: the etcd revision that wrote it), 0 for a
  // record never committed. Opaque to the fs, which hands it back unchanged in the batches it
  // builds, so a shared store can refuse a change based on an older version (Status::Conflict).
  uint64_t revision = 0;

  uint32_t nlink() const { return 1 + static_cast<uint32_t>(extra_links.size()); }
  const std::string& symlink_target() const { return rare.symlink_target(); }
  uint64_t rdev() const { return rare.rdev(); }
  ObjectId prefix_parent() const { return rare.prefix_parent(); }
  void set_symlink_target(std::string t) { rare.set_symlink_target(std::move(t)); }
  void set_rdev(uint64_t v) { rare.set_rdev(v); }
  void set_prefix_parent(ObjectId v) { rare.set_prefix_parent(v); }
  const std::vector<Xattr>& xattrs() const { return rare.xattrs(); }
  void set_xattrs(std::vector<Xattr> v) { rare.set_xattrs(std::move(v)); }

  uint64_t size() const {
    if (type == ObjectType::kSymlink) return symlink_target().size();
    return layout ? layout->size : 0;
  }
};

// What the store journals and hands back: the whole record, first name included.
struct ObjectRecord : NamelessRecord {
  std::string name;  // the first name, in `parent`

  // Every name the record gives its object: the first, then the extra links.
  std::vector<Link> links() const {
    std::vector<Link> all{{parent, name}};
    all.insert(all.end(), extra_links.begin(), extra_links.end());
    return all;
  }
};

}  // namespace kvfs
