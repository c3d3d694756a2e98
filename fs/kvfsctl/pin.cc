// kvfsctl pin | unpin | evict PATH...: the bounded cache's controls, through the mount's
// user.kvfs.pin and user.kvfs.evict xattrs (the daemon journals pins and evicts at once).
// Exit status: 0 when every path succeeded, 1 otherwise (a message per failed path).
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "json_text.h"
#include "kvfsctl.h"

namespace kvfs::fs {

int PinCommand(const std::string& verb, const std::vector<std::string>& paths, bool json) {
  const char* name = verb == "evict" ? "user.kvfs.evict" : "user.kvfs.pin";
  const char* value = verb == "unpin" ? "0" : "1";
  nlohmann::json results = nlohmann::json::array();
  int failed = 0;
  for (const std::string& path : paths) {
    std::string error;
    if (::setxattr(path.c_str(), name, value, 1, 0) != 0) {
      const int err = errno;
      struct stat st {};
      const bool dir = err == EINVAL && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      error = IsControlPath(path)               ? kControlPathRefusal
              : dir                             ? "a directory (" + verb + " takes files)"
              : err == EPERM && verb == "evict" ? "pinned (unpin it first)"
                                                : std::strerror(err);
      ++failed;
    }
    if (json) {
      results.push_back({{"path", path}, {"ok", error.empty()}, {"error", error}});
    } else if (!error.empty()) {
      std::fprintf(stderr, "kvfsctl %s: %s: %s\n", verb.c_str(), path.c_str(), error.c_str());
    } else {
      std::printf("%s: %s\n", path.c_str(),
                  verb == "pin"     ? "pinned"
                  : verb == "unpin" ? "unpinned"
                                    : "evicted");
    }
  }
  if (json) std::printf("%s\n", JsonText(nlohmann::json{{verb, results}}, 2).c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace kvfs::fs
