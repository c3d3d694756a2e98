// Helpers of the tests of the engine's metadata files (journal_test.cc, checkpoint_test.cc):
// a directory record, a journal record of one batch, and a flipped byte in a file.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "file_system.h"
#include "journal.h"
#include "record_codec.h"

namespace kvfs::testing {

inline ObjectRecord Dir(ObjectId id, const std::string& name) {
  ObjectRecord r;
  r.id = id;
  r.parent = kRootId;
  r.name = name;
  r.type = ObjectType::kDirectory;
  r.mode = 0755;
  return r;
}

inline std::string BatchRecord(const MetaBatch& b) {
  std::string out;
  Journal::EncodeRecord(RecordType::kBatch, RecordCodec::EncodeBatch(b), &out);
  return out;
}

inline void FlipByte(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
  c ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

inline FileSystem& Fs() { return *FileSystem::Posix(); }

}  // namespace kvfs::testing
