// Directory: one directory's entries (name -> inode number) and the readdir cookies that stay
// valid while other entries come and go.
//
// Connectors put a model's chunks in one directory, so a directory may hold millions of names
// and this is a large share of the daemon's memory. Entries live in one sequence in cookie
// order (a deque: appending never moves them) and a flat hash index of 8-byte slots finds them
// by name: 56 bytes per entry plus 11-23 of index, where a tree node for readdir order and a
// hash node for lookups cost about 160. An unlinked entry stays in the sequence, marked dead, until
// dead entries outnumber live ones; then the sequence is compacted (cookies are kept, so
// offsets handed to the kernel stay valid) and the index rebuilt.
//
// Not thread-safe: the namespace's lock guards it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvfs::fs {

class Directory {
 public:
  // Readdir cookies 1 and 2 are "." and ".."; entries get 3, 4, ... as they are linked.
  static constexpr uint64_t kFirstCookie = 3;

  struct Entry {
    uint64_t cookie = 0;
    uint64_t ino = 0;  // 0: unlinked (dead until the next compaction)
    std::string name;
    bool is_dir = false;
  };

  // The inode number linked under `name`, or 0.
  uint64_t Find(std::string_view name) const;
  // Links `name` with the next cookie; false (nothing changes) when the name is there.
  bool Link(std::string_view name, uint64_t ino, bool is_dir);
  // Unlinks `name`; false when it is not there.
  bool Unlink(std::string_view name);

  bool empty() const { return live_ == 0; }
  size_t size() const { return live_; }
  uint32_t subdirs() const { return subdirs_; }
  // Calls `fn` for each linked entry whose cookie is above `offset`, in cookie order, until it
  // returns false.
  void ForEachAfter(uint64_t offset, const std::function<bool(const Entry&)>& fn) const;

 private:
  // An index slot: 1 + the entry's position in entries_ (0: empty) and 32 bits of its hash.
  struct Slot {
    uint32_t pos = 0;
    uint32_t hash = 0;
  };
  static uint64_t Hash(std::string_view name);
  // The slot holding `name`, or the empty slot where it would go.
  size_t Probe(std::string_view name, uint64_t hash) const;
  void Insert(uint32_t pos, uint64_t hash);
  void Erase(size_t slot);
  void Rehash(size_t capacity);
  void Compact();

  std::deque<Entry> entries_;
  std::vector<Slot> index_;  // linear probing, power-of-two size, at most 70% full
  size_t live_ = 0;
  uint32_t subdirs_ = 0;
  uint64_t next_cookie_ = kFirstCookie;
};

}  // namespace kvfs::fs
