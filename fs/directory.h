// Directory: one directory's entries (name -> inode number) and the readdir cookies that stay
// valid while other entries come and go.
//
// Connectors put a model's chunks in one directory, so a directory may hold millions of names
// and this is a large share of the daemon's memory. Entries live in one vector in cookie
// order (the index holds positions, so growing it moves nothing that is pointed at; an empty
// directory allocates nothing, where a deque takes 600 bytes), their names in an arena of
// chunks (each name once, NUL-terminated, no allocation per name), and a flat hash index of
// 8-byte slots finds them by name: 24 bytes per entry, the name plus one byte, and 11-23 bytes
// of index, where a
// tree node for readdir order and a hash node for lookups cost about 160 plus the name's own
// allocation. An unlinked entry stays in the sequence, marked dead, until dead entries
// outnumber live ones; then entries and names are compacted (cookies are kept, so offsets
// handed to the kernel stay valid) and the index rebuilt. The directory is the only holder of
// its names: an inode refers to its first name by cookie (CookieOf, NameAt).
//
// Not thread-safe: the namespace's lock guards it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvfs::fs {

class Directory {
 public:
  // Readdir cookies 1 and 2 are "." and ".."; entries get 3, 4, ... as they are linked.
  static constexpr uint64_t kFirstCookie = 3;

  // What readdir sees of an entry. `name` is NUL-terminated (name.data()[name.size()] == 0) and
  // valid until the directory next changes.
  struct Item {
    uint64_t cookie = 0;
    uint64_t ino = 0;
    std::string_view name;
    bool is_dir = false;
  };
  static constexpr size_t kMaxName = 255;

  // The inode number linked under `name`, or 0.
  uint64_t Find(std::string_view name) const;
  // Links `name` with the next cookie; false (nothing changes) when the name is there, is
  // longer than kMaxName, or `ino` is 0 (no inode has that number: it marks dead entries).
  bool Link(std::string_view name, uint64_t ino, bool is_dir);
  // Unlinks `name`; false when it is not there.
  bool Unlink(std::string_view name);
  // The cookie of `name` when it is linked to `ino`, else 0. An inode keeps the cookie of its
  // first name instead of a copy of the name (namespace_links.cc): the directory is the only
  // owner of names, which are most of a big namespace's memory.
  uint64_t CookieOf(std::string_view name, uint64_t ino) const;
  // The name linked under `cookie`, valid until the directory next changes; empty when that
  // entry is gone.
  std::string_view NameAt(uint64_t cookie) const;

  bool empty() const { return live_ == 0; }
  size_t size() const { return live_; }
  uint32_t subdirs() const { return subdirs_; }
  // Calls `fn` for each linked entry whose cookie is above `offset`, in cookie order, until it
  // returns false.
  void ForEachAfter(uint64_t offset, const std::function<bool(const Item&)>& fn) const;

 private:
  struct Entry {  // 24 bytes
    uint64_t cookie = 0;
    uint64_t ino = 0;    // 0: unlinked (dead until the next compaction)
    uint32_t chunk = 0;  // where the name is in the arena
    uint16_t offset = 0;
    uint8_t len = 0;
    bool is_dir = false;
  };
  // Names, NUL-terminated, in chunks that never move: 256 bytes first, doubling to 64 KiB (a
  // small directory stays small; offsets fit 16 bits).
  class NameArena {
   public:
    // False when `name` is longer than kMaxName.
    bool Add(std::string_view name, Entry* e);
    std::string_view Get(const Entry& e) const {
      return {chunks_[e.chunk].get() + e.offset, e.len};
    }
    // Forgets the last name added, when `e` holds it (a temp name renamed away at once).
    void DropLast(const Entry& e);

   private:
    static size_t ChunkSize(size_t i) { return size_t{256} << std::min<size_t>(i, 8); }
    std::vector<std::unique_ptr<char[]>> chunks_;
    size_t used_ = 0;  // bytes used in the last chunk
  };

  // An index slot: 1 + the entry's position in entries_ (0: empty) and the name's hash, which
  // is also where its probe starts: the index grows and shrinks without reading a name.
  struct Slot {
    uint32_t pos = 0;
    uint32_t hash = 0;
  };
  static uint32_t Hash(std::string_view name);
  // The slot holding `name`, or the empty slot where it would go.
  size_t Probe(std::string_view name, uint32_t hash) const;
  void Place(Slot slot);
  void Resize(size_t capacity);  // the same slots in a table of `capacity`
  void Compact();

  std::string_view NameOf(const Entry& e) const { return names_.Get(e); }

  std::vector<Entry> entries_;
  NameArena names_;
  std::vector<Slot> index_;  // linear probing, power-of-two size, at most 70% full
  size_t live_ = 0;
  uint32_t subdirs_ = 0;
  uint64_t next_cookie_ = kFirstCookie;
};

}  // namespace kvfs::fs
