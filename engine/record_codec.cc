#include "record_codec.h"

#include <spdlog/fmt/fmt.h>

namespace kvfs {
namespace {

constexpr size_t kMaxName = 4096;
constexpr uint32_t kMaxSegments = 1u << 24;
// Set in the type byte when the record ends with its extensions (rdev, hard links): records
// without them keep the original encoding, so older records decode and older readers still
// read the records of plain files.
constexpr uint8_t kHasExtensions = 0x80;
// Set in the type byte when the record ends with its user xattrs (after the extensions, when
// it has those): u16 count, then (name, value) strings. Same reasoning: records without
// xattrs keep the encoding older readers know.
constexpr uint8_t kHasXattrs = 0x40;

bool HasExtensions(const ObjectRecord& rec) { return rec.rdev() != 0 || !rec.extra_links.empty(); }

void EncodeTime(const Timespec64& t, ByteWriter& w) {
  w.I64(t.sec);
  w.I64(t.nsec);
}
Timespec64 DecodeTime(ByteReader& r) {
  Timespec64 t;
  t.sec = r.I64();
  t.nsec = r.I64();
  return t;
}

}  // namespace

void RecordCodec::EncodeRecord(const ObjectRecord& rec, ByteWriter& w) {
  w.U64(rec.id);
  w.U64(rec.parent);
  w.Str(rec.name);
  const bool extended = HasExtensions(rec);
  const bool xattrs = !rec.xattrs().empty();
  w.U8(static_cast<uint8_t>(rec.type) | (extended ? kHasExtensions : 0) |
       (xattrs ? kHasXattrs : 0));
  w.U32(rec.mode);
  w.U32(rec.uid);
  w.U32(rec.gid);
  EncodeTime(rec.atime, w);
  EncodeTime(rec.mtime, w);
  EncodeTime(rec.ctime, w);
  w.U32(rec.flags);
  w.Str(rec.symlink_target());
  w.U64(rec.prefix_parent());
  // 1: dense (segment i has index i), 2: sparse (each segment says its index).
  bool dense = true;
  if (rec.layout) {
    for (size_t i = 0; i < rec.layout->segments.size() && dense; ++i)
      dense = rec.layout->segments[i].index == i;
  }
  w.U8(!rec.layout ? 0 : dense ? 1 : 2);
  if (rec.layout) {
    w.U64(rec.layout->size);
    w.U32(static_cast<uint32_t>(rec.layout->segments.size()));
    for (const Segment& s : rec.layout->segments) {
      if (!dense) w.U32(s.index);
      w.U16(s.device);
      w.U8(static_cast<uint8_t>(s.codec));
      w.U64(s.offset);
      w.U32(s.stored_len);
      w.U32(s.raw_len);
      w.U64(s.checksum);
    }
  }
  if (extended) {
    w.U64(rec.rdev());
    w.U32(static_cast<uint32_t>(rec.extra_links.size()));
    for (const Link& l : rec.extra_links) {
      w.U64(l.parent);
      w.Str(l.name);
    }
  }
  if (!xattrs) return;
  w.U16(static_cast<uint16_t>(rec.xattrs().size()));
  for (const Xattr& x : rec.xattrs()) {
    w.Str(x.name);
    w.Str(x.value);
  }
}

bool RecordCodec::DecodeRecord(ByteReader& r, DecodedRecord* out) {
  ObjectRecord& rec = out->record;
  rec.id = r.U64();
  rec.parent = r.U64();
  rec.name = r.Str(kMaxName);
  const uint8_t type_byte = r.U8();
  const uint8_t type = type_byte & ~(kHasExtensions | kHasXattrs);
  if (type < 1 || type > kMaxObjectType) return false;
  rec.type = static_cast<ObjectType>(type);
  rec.mode = static_cast<uint16_t>(r.U32() & 07777);
  rec.uid = r.U32();
  rec.gid = r.U32();
  rec.atime = DecodeTime(r);
  rec.mtime = DecodeTime(r);
  rec.ctime = DecodeTime(r);
  rec.flags = r.U32();
  rec.set_symlink_target(r.Str(kMaxName));
  rec.set_prefix_parent(r.U64());
  const uint8_t has_layout = r.U8();
  if (has_layout == 1 || has_layout == 2) {
    const bool sparse = has_layout == 2;
    auto layout = std::make_unique<Layout>();
    layout->size = r.U64();
    const uint32_t n = r.U32();
    if (n > kMaxSegments || n > r.remaining() / (sparse ? 31 : 27)) return false;
    layout->segments.resize(n);
    uint64_t next = 0;
    for (Segment& s : layout->segments) {
      const uint64_t index = sparse ? r.U32() : next;
      if (index < next) return false;  // indexes strictly ascend
      s.index = static_cast<uint32_t>(index);
      next = index + 1;
      s.device = r.U16();
      const uint8_t codec = r.U8();
      if (codec > 1) return false;
      s.codec = static_cast<Codec>(codec);
      s.offset = r.U64();
      s.stored_len = r.U32();
      s.raw_len = r.U32();
      s.checksum = r.U64();
    }
    out->layout = std::move(layout);
  } else if (has_layout != 0) {
    return false;
  }
  if (type_byte & kHasExtensions) {
    rec.set_rdev(r.U64());
    const uint32_t links = r.U32();
    // Each link takes at least 12 bytes (parent and the name's length).
    if (links >= kMaxLinks || links > r.remaining() / 12) return false;
    rec.extra_links.resize(links);
    for (Link& l : rec.extra_links) {
      l.parent = r.U64();
      l.name = r.Str(kMaxName);
    }
  }
  if (type_byte & kHasXattrs) {
    const uint16_t n = r.U16();
    // Each takes at least 8 bytes (two lengths); an empty list is never written.
    if (n == 0 || n > r.remaining() / 8) return false;
    std::vector<Xattr> list(n);
    for (Xattr& x : list) {
      x.name = r.Str(kXattrNameMax);
      x.value = r.Str(kMaxXattrBytes);
    }
    if (!r.ok() || !ValidXattrs(list)) return false;
    rec.set_xattrs(std::move(list));
  }
  return r.ok();
}

std::string RecordCodec::EncodeBatch(const MetaBatch& batch) {
  std::string out;
  ByteWriter w(&out);
  w.U32(static_cast<uint32_t>(batch.puts.size()));
  for (const ObjectRecord& rec : batch.puts) EncodeRecord(rec, w);
  w.U32(static_cast<uint32_t>(batch.removes.size()));
  for (ObjectId id : batch.removes) w.U64(id);
  return out;
}

Status RecordCodec::DecodeBatch(const std::string& payload, DecodedBatch* out) {
  ByteReader r(payload.data(), payload.size());
  const uint32_t puts = r.U32();
  if (puts > payload.size()) return Status::Corruption("batch put count");
  out->puts.resize(puts);
  for (auto& d : out->puts) {
    if (!DecodeRecord(r, &d)) return Status::Corruption("undecodable record in batch");
  }
  const uint32_t removes = r.U32();
  if (removes > r.remaining() / 8) return Status::Corruption("batch remove count");
  out->removes.resize(removes);
  for (auto& id : out->removes) id = r.U64();
  if (!r.ok() || r.remaining() != 0) return Status::Corruption("malformed batch");
  return Status::Ok();
}

std::string DescribeBatch(const MetaBatch& batch) {
  std::string what = fmt::format(" (change {})", batch.seq);
  for (const ObjectRecord& put : batch.puts)
    what += fmt::format(" put {:016x}@{}", put.id, put.revision);
  for (size_t i = 0; i < batch.removes.size(); ++i)
    what += fmt::format(" remove {:016x}@{}", batch.removes[i],
                        i < batch.remove_revisions.size() ? batch.remove_revisions[i] : 0);
  for (const NameChange& c : batch.names)
    what += fmt::format(" name {}/{} {:016x}->{:016x}", c.parent, c.name, c.from, c.to);
  return what;
}

}  // namespace kvfs
