#include "record_value.h"

#include "byte_io.h"
#include "cluster_layout.h"

namespace kvfs::cluster {
namespace {

// Format 2 added the content checksum after the chunk id; format 1 values still decode
// (checksum unknown). Format 3 is format 2 followed by the user xattrs (u16 count x (u8 name
// length, name, u16 value length, value)); it is written only for a record that has some, so
// every other record stays readable by a node that knows format 2 alone.
constexpr uint8_t kFormat = 2;
constexpr uint8_t kFormatNoChecksum = 1;
constexpr uint8_t kFormatXattrs = 3;
constexpr size_t kMaxSymlink = 4095;

void Time(ByteWriter& w, const Timespec64& t) {
  w.I64(t.sec);
  w.U32(static_cast<uint32_t>(t.nsec));
}

Timespec64 Time(ByteReader& r) {
  Timespec64 t;
  t.sec = r.I64();
  t.nsec = r.U32();
  return t;
}

bool ValidName(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.size() <= 255 &&
         n.find('/') == std::string::npos && n.find('\0') == std::string::npos;
}

}  // namespace

std::string EncodeRecordValue(const ObjectRecord& rec, uint16_t origin) {
  std::string out;
  out.reserve(96 + rec.name.size());
  ByteWriter w(&out);
  const std::vector<Xattr>& xattrs = rec.xattrs();
  w.U8(xattrs.empty() ? kFormat : kFormatXattrs);
  w.U16(origin);
  w.U64(rec.id);
  w.U8(static_cast<uint8_t>(rec.type));
  w.U32(rec.mode);
  w.U32(rec.uid);
  w.U32(rec.gid);
  w.U32(rec.flags);
  Time(w, rec.atime);
  Time(w, rec.mtime);
  Time(w, rec.ctime);
  w.U64(rec.prefix_parent());
  w.U64(rec.rdev());
  w.U16(static_cast<uint16_t>(1 + rec.extra_links.size()));
  auto link = [&](uint64_t parent, const std::string& name) {
    w.U64(parent);
    w.U8(static_cast<uint8_t>(name.size()));
    w.Bytes(name.data(), name.size());
  };
  link(rec.parent, rec.name);
  for (const Link& l : rec.extra_links) link(l.parent, l.name);
  const std::string& target = rec.symlink_target();
  w.U16(static_cast<uint16_t>(target.size()));
  w.Bytes(target.data(), target.size());
  const ClusterLayout* cl = AsClusterLayout(rec.layout);
  w.U64(rec.layout ? rec.layout->size : 0);
  w.U64(cl ? cl->chunk : 0);
  w.U64(cl ? cl->checksum : 0);
  w.U8(static_cast<uint8_t>(cl ? cl->holders.size() : 0));
  if (cl) {
    for (NodeId n : cl->holders) w.U16(n);
  }
  if (xattrs.empty()) return out;
  w.U16(static_cast<uint16_t>(xattrs.size()));
  for (const Xattr& x : xattrs) {
    w.U8(static_cast<uint8_t>(x.name.size()));
    w.Bytes(x.name.data(), x.name.size());
    w.U16(static_cast<uint16_t>(x.value.size()));
    w.Bytes(x.value.data(), x.value.size());
  }
  return out;
}

Result<RecordValue> DecodeRecordValue(std::string_view value, uint64_t revision) {
  auto bad = [](const char* what) {
    return Status::Error(EPROTO, std::string("namespace record does not decode: ") + what);
  };
  ByteReader r(value.data(), value.size());
  const uint8_t format = r.U8();
  if (format != kFormat && format != kFormatNoChecksum && format != kFormatXattrs) {
    return bad("unknown format");
  }
  RecordValue out;
  out.origin = r.U16();
  ObjectRecord& rec = out.record;
  rec.revision = revision;
  rec.id = r.U64();
  const uint8_t type = r.U8();
  if (!r.ok() || type < 1 || type > kMaxObjectType) return bad("type");
  rec.type = static_cast<ObjectType>(type);
  rec.mode = static_cast<uint16_t>(r.U32() & 07777);
  rec.uid = r.U32();
  rec.gid = r.U32();
  rec.flags = r.U32();
  rec.atime = Time(r);
  rec.mtime = Time(r);
  rec.ctime = Time(r);
  rec.set_prefix_parent(r.U64());
  rec.set_rdev(r.U64());
  const uint16_t links = r.U16();
  if (!r.ok() || links == 0 || links > kMaxLinks) return bad("link count");
  if (rec.type == ObjectType::kDirectory && links != 1) return bad("a directory with links");
  for (uint16_t i = 0; i < links; ++i) {
    Link l;
    l.parent = r.U64();
    const uint8_t len = r.U8();
    if (!r.ok() || len > r.remaining()) return bad("name");
    l.name.resize(len);
    r.Bytes(l.name.data(), len);
    if (!ValidName(l.name) || l.parent == kInvalidId) return bad("name");
    if (i == 0) {
      rec.parent = l.parent;
      rec.name = std::move(l.name);
    } else {
      rec.extra_links.push_back(std::move(l));
    }
  }
  const uint16_t target = r.U16();
  if (!r.ok() || target > kMaxSymlink || target > r.remaining()) return bad("symlink target");
  if (target > 0) {  // nothing to allocate for the usual record
    std::string t(target, '\0');
    r.Bytes(t.data(), target);
    rec.set_symlink_target(std::move(t));
  }
  const uint64_t size = r.U64();
  const uint64_t chunk = r.U64();
  const uint64_t checksum = format != kFormatNoChecksum ? r.U64() : 0;
  const uint8_t holders = r.U8();
  if (!r.ok() || holders > HolderList::kMaxHolders) return bad("holders");
  HolderList list;
  for (uint8_t i = 0; i < holders; ++i) list.Add(r.U16());
  if (format == kFormatXattrs) {
    const uint16_t n = r.U16();
    if (!r.ok() || n == 0 || n > r.remaining() / 3) return bad("xattr count");
    std::vector<Xattr> xattrs(n);
    for (Xattr& x : xattrs) {
      x.name.resize(r.U8());
      if (!r.ok() || x.name.size() > r.remaining()) return bad("xattr name");
      r.Bytes(x.name.data(), x.name.size());
      x.value.resize(r.U16());
      if (!r.ok() || x.value.size() > r.remaining()) return bad("xattr value");
      r.Bytes(x.value.data(), x.value.size());
    }
    if (!ValidXattrs(xattrs)) return bad("xattrs");
    rec.set_xattrs(std::move(xattrs));
  }
  if (!r.ok() || r.remaining() != 0) return bad("length");
  if (rec.id == kInvalidId || rec.id == kRootId) return bad("id");
  if (rec.type != ObjectType::kFile && (size != 0 || chunk != 0) &&
      rec.type != ObjectType::kSymlink) {
    return bad("data on a non-file");
  }
  if (rec.type == ObjectType::kFile) {
    if (chunk != 0) {
      rec.layout = MakeClusterLayout(size, chunk, list, checksum);
    } else if (size != 0) {
      return bad("a file with data but no chunk");
    }
  }
  return out;
}

}  // namespace kvfs::cluster
