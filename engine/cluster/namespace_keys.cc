#include "namespace_keys.h"

#include <cinttypes>
#include <cstdio>

namespace kvfs::cluster {
namespace {

std::string Node5(uint16_t node) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%05u", static_cast<unsigned>(node));
  return buf;
}

std::optional<uint16_t> ParseNode5(std::string_view s) {
  if (s.size() != 5) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v == 0 || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

}  // namespace

std::string Hex16(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::optional<uint64_t> ParseHex16(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

std::string NamespaceKeys::Member(uint16_t node) const { return MemberPrefix() + Node5(node); }
std::string NamespaceKeys::Drain(uint16_t node) const { return DrainPrefix() + Node5(node); }
std::string NamespaceKeys::ScanHold(uint16_t node) const { return ScanHoldPrefix() + Node5(node); }
std::string NamespaceKeys::Record(ObjectId id) const { return RecordPrefix() + Hex16(id); }

std::string NamespaceKeys::Name(uint64_t parent, std::string_view name) const {
  std::string k = NamePrefix(parent);
  k.append(name);
  return k;
}

std::string NamespaceKeys::NamePrefix(uint64_t parent) const {
  return prefix_ + "d/" + Hex16(parent) + "/";
}

std::optional<ObjectId> NamespaceKeys::ParseRecord(std::string_view key) const {
  const std::string p = RecordPrefix();
  if (key.substr(0, p.size()) != p) return std::nullopt;
  return ParseHex16(key.substr(p.size()));
}

std::optional<uint16_t> NamespaceKeys::ParseMember(std::string_view key) const {
  const std::string p = MemberPrefix();
  if (key.substr(0, p.size()) != p) return std::nullopt;
  return ParseNode5(key.substr(p.size()));
}

std::optional<uint16_t> NamespaceKeys::ParseDrain(std::string_view key) const {
  const std::string p = DrainPrefix();
  if (key.substr(0, p.size()) != p) return std::nullopt;
  return ParseNode5(key.substr(p.size()));
}

std::optional<uint16_t> NamespaceKeys::ParseScanHold(std::string_view key) const {
  const std::string p = ScanHoldPrefix();
  if (key.substr(0, p.size()) != p) return std::nullopt;
  return ParseNode5(key.substr(p.size()));
}

}  // namespace kvfs::cluster
