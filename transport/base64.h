// Standard base64 (RFC 4648, with padding): etcd's JSON gateway carries every key and value so.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvfs {

std::string Base64Encode(std::string_view bytes);
// Nullopt for anything that is not canonical padded base64.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace kvfs
