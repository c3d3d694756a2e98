// What the kvfsctl commands share: exit codes, the Failure they throw up to main(), finding the
// kvfs mount that holds a path, and each command's entry point.
//
// Exit status, the same for every command (man kvfsctl.8, EXIT STATUS): 0 success, 1 a path
// was missing or an operation failed, 2 bad usage or a path that is not on a kvfs mount.
// Exceptions stop at main(): commands throw Failure, main prints it and returns its code.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvfs::fs {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct Failure {
  int code;
  std::string message;
};

// The root of the kvfs mount holding `path`. Throws Failure: exit 2 when the path is not on a
// kvfs mount, exit 1 when neither it nor its directory exists.
std::string MountRootOf(const std::string& path);

// Whether `path` is the mount's control directory (MOUNT/.kvfs) or a file in it. Those hold no
// chunks, and the xattrs kvfsctl asks them for fail with ENODATA, EOPNOTSUPP or EPERM, which
// alone would puzzle: kvfsctl says kControlPathRefusal instead.
bool IsControlPath(const std::string& path);
inline constexpr const char* kControlPathRefusal =
    "one of the mount's control files (.kvfs), which hold no chunks";
// What to print for a path that refused a kvfsctl xattr with `err`.
std::string RefusalOf(const std::string& path, int err);

// Parses a JSON file (a control file such as MOUNT/.kvfs/status); throws Failure (exit 1).
nlohmann::json ReadJsonFile(const std::string& file);
// The "DAMAGE found at the last start" lines of a status (recovery_* keys); false when clean.
bool PrintRecoveryDamage(const nlohmann::json& status, FILE* out);

// The commands, one per file under fs/kvfsctl/. Each returns the exit status.
int Verify(const std::vector<std::string>& paths, bool json);  // verify.cc
// pin.cc: verb is pin, unpin or evict.
int PinCommand(const std::string& verb, const std::vector<std::string>& paths, bool json);
int Prefetch(const std::vector<std::string>& paths, bool json);  // prefetch.cc

struct HashOptions {
  std::string tokens_file;  // "-" reads standard input
  long long chunk_tokens = 256;
  std::string prefix;  // directory prepended to each name; empty: bare names
  std::string seed = "kvfs";
  bool include_partial = true;
  bool json = false;
};
int Hash(const HashOptions& options);  // hash.cc

struct TopOptions {
  std::string mountpoint;
  double interval_s = 1.0;
  long long count = 0;  // samples to print; 0: until interrupted
  bool json = false;
};
int Top(const TopOptions& options);  // top.cc

}  // namespace kvfs::fs
