// JsonText: nlohmann::json serialized so that it never throws. dump() throws type_error 316 on
// a string that is not valid UTF-8, and strings here come from users (ctl commands, file and
// mount point names): invalid bytes are replaced with U+FFFD instead.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvfs::fs {

inline std::string JsonText(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvfs::fs
