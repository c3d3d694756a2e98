// Where kvfs keeps its cluster state in etcd, under one prefix P (default "/kvfs/"):
//
//   P m/<node id, 5 digits>      a live node: JSON (address, capacity, used, state), under the
//                                node's lease, so it vanishes when the node stops renewing it
//   P x/<node id, 5 digits>      an operator's drain mark for that node (no lease)
//   P s/<node id, 5 digits>      a node reading the whole namespace at one revision: empty,
//                                under the node's lease; no node compacts etcd's history past
//                                the key's own revision while it exists (ClusterStore)
//   P i/<object id, 16 hex>      a namespace record (record_value.h): names, attributes, chunk
//   P d/<parent, 16 hex>/<name>  a name: the id holding it (16 hex). Written and deleted in the
//                                same transaction as the record that holds the name, so a
//                                transaction can demand that a name is free (O_EXCL, mkdir)
//   P epoch                      a random value put by the first node that finds none: an etcd
//                                wiped or restored from an older backup has another (or none),
//                                so a node sees that the revisions it applied are not its
//
// Object ids carry their node id in the high 16 bits, so "i/" keys sort by node and a node
// finds the highest id it ever used with one descending range read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvfs/object.h"

namespace kvfs::cluster {

class NamespaceKeys {
 public:
  explicit NamespaceKeys(std::string prefix) : prefix_(std::move(prefix)) {}
  const std::string& prefix() const { return prefix_; }

  std::string Member(uint16_t node) const;
  std::string MemberPrefix() const { return prefix_ + "m/"; }
  std::string Drain(uint16_t node) const;
  std::string DrainPrefix() const { return prefix_ + "x/"; }
  std::string ScanHold(uint16_t node) const;
  std::string ScanHoldPrefix() const { return prefix_ + "s/"; }
  std::string Record(ObjectId id) const;
  std::string RecordPrefix() const { return prefix_ + "i/"; }
  std::string Epoch() const { return prefix_ + "epoch"; }
  std::string Name(uint64_t parent, std::string_view name) const;
  std::string NamePrefix(uint64_t parent) const;  // every name in one directory

  // The id of a record key, the node of a member, drain or scan-hold key; nullopt for
  // anything else.
  std::optional<ObjectId> ParseRecord(std::string_view key) const;
  std::optional<uint16_t> ParseMember(std::string_view key) const;
  std::optional<uint16_t> ParseDrain(std::string_view key) const;
  std::optional<uint16_t> ParseScanHold(std::string_view key) const;

 private:
  std::string prefix_;
};

std::string Hex16(uint64_t v);
std::optional<uint64_t> ParseHex16(std::string_view s);

}  // namespace kvfs::cluster
