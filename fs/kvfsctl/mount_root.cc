// kvfsctl: finding the kvfs mount of a path, and reading its JSON control files.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvfsctl.h"
#include "mount_info.h"
#include "mount_options.h"

namespace kvfs::fs {

std::string MountRootOf(const std::string& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  // Resolve the directory part only: the path itself may be a symlink we want to describe.
  std::filesystem::path resolved = std::filesystem::canonical(abs, ec);
  if (ec) {
    auto parent = std::filesystem::canonical(abs.parent_path(), ec);
    if (ec) throw Failure{kExitFailure, "kvfsctl: " + path + ": " + ec.message()};
    resolved = parent / abs.filename();
  }
  auto mount = FindMount(ReadMountInfo(), resolved.string());
  std::string status;
  if (mount && mount->fstype == "fuse.kvfs") status = mount->mount_point + "/.kvfs/status";
  if (status.empty() || !std::filesystem::exists(status, ec))
    throw Failure{kExitUsage, "kvfsctl: " + path + " is not on a kvfs mount"};
  return mount->mount_point;
}

bool IsControlPath(const std::string& path) {
  try {
    return AtOrUnder(path, MountRootOf(path) + "/.kvfs");
  } catch (const Failure&) {
    return false;  // not on a kvfs mount after all
  }
}

std::string RefusalOf(const std::string& path, int err) {
  return IsControlPath(path) ? kControlPathRefusal : std::strerror(err);
}

nlohmann::json ReadJsonFile(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw Failure{kExitFailure, "kvfsctl: cannot read " + file};
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) throw Failure{kExitFailure, "kvfsctl: malformed JSON in " + file};
  return j;
}

}  // namespace kvfs::fs
