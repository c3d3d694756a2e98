// InodeTable: the daemon's in-memory inodes by number, owning them. An open-addressing table
// of pointers keyed by each inode's own number (rec.id, which never changes), so an inode costs
// one 8-byte slot here (11-23 bytes at the table's 35-70% fill) instead of a hash node, its
// allocation and a bucket (about 45): the daemon keeps one inode per name, millions of them.
//
// Not thread-safe: the namespace's lock guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace kvfs::fs {

struct Inode;

class InodeTable {
 public:
  InodeTable() = default;
  ~InodeTable();
  InodeTable(const InodeTable&) = delete;
  InodeTable& operator=(const InodeTable&) = delete;

  Inode* Find(uint64_t ino) const;
  // Adds `in` under in->rec.id, replacing (and freeing) an inode already there.
  Inode* Put(std::unique_ptr<Inode> in);
  // Frees the inode with this number, if there is one.
  void Erase(uint64_t ino);
  size_t size() const { return size_; }
  // Calls `fn` for every inode, in no particular order. `fn` must not add or erase.
  void ForEach(const std::function<void(Inode*)>& fn) const;

 private:
  size_t Probe(uint64_t ino) const;  // the slot holding `ino`, or the empty one where it goes
  void Grow();

  std::vector<Inode*> slots_;  // null: empty; power-of-two size
  size_t size_ = 0;
};

}  // namespace kvfs::fs
