// The value of a namespace record key in etcd (namespace_keys.h): one object's names,
// attributes and chunk reference, in a compact binary form (etcd stores and every node keeps
// millions of them). Decoding is strict: a value that does not parse exactly is refused, so a
// damaged or foreign key can never become a wrong file.
//
//   u8 format (2, or 3), u16 origin (the node that wrote this version), u64 id, u8 type,
//   u32 mode, uid, gid, flags, 3 x (i64 sec, u32 nsec) atime/mtime/ctime,
//   u64 prefix_parent, u64 rdev, u16 n (1..kMaxLinks) x (u64 parent, u8 len, name),
//   u16 len + symlink target, u64 size, u64 chunk, u64 content checksum (not in format 1;
//   format 1 values still decode, checksum unknown), u8 k (<= 7) x u16 holder; format 3 (a
//   record with user xattrs) then u16 count x (u8 len, name, u16 len, value)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs::cluster {

struct RecordValue {
  ObjectRecord record;  // layout: a ClusterLayout (files with data) or null
  uint16_t origin = 0;
};

// `rec.layout` must be null or a ClusterLayout (a file with data always has one).
std::string EncodeRecordValue(const ObjectRecord& rec, uint16_t origin);
// `revision` becomes record.revision.
Result<RecordValue> DecodeRecordValue(std::string_view value, uint64_t revision);

}  // namespace kvfs::cluster
