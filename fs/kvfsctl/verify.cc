// kvfsctl verify: reads and checksums every file under the given paths through the mount's
// user.kvfs.verify xattr (the daemon reads every segment; a corrupt file answers EIO and is
// dropped from the cache), with a progress bar on a terminal and a report at the end. It also
// reports what the daemon's recovery found damaged at its last start (journal records,
// checkpoints, superblocks): files those described may be missing without a trace otherwise.
// Exit status: 0 every file ok and no damage, 1 corruption, damage or errors found.
#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "file_walk.h"
#include "json_text.h"
#include "kvfs/size.h"
#include "kvfsctl.h"
#include "progress_bar.h"

namespace kvfs::fs {

int Verify(const std::vector<std::string>& paths, bool json) {
  FileWalk walk;
  for (const auto& p : paths) CollectFiles(p, &walk);
  const std::vector<FileTarget>& targets = walk.files;
  std::vector<std::string> errors = walk.errors, corrupt;
  for (const auto& m : walk.missing) errors.push_back(m + ": " + std::strerror(ENOENT));
  ProgressBar progress;
  uint64_t bytes = 0;
  size_t ok = 0, vanished = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const FileTarget& t = targets[i];
    char value[64];
    if (::lgetxattr(t.path.c_str(), "user.kvfs.verify", value, sizeof value) >= 0) {
      ++ok;
      bytes += t.size;
    } else if (errno == EIO) {
      corrupt.push_back(t.path);
      bytes += t.size;
    } else if (errno == ENOENT) {
      ++vanished;  // unlinked or evicted since the walk: nothing left to check
    } else {
      errors.push_back(t.path + ": " + RefusalOf(t.path, errno));
    }
    progress.Update(i + 1, targets.size(), bytes);
  }
  progress.Finish();
  const double seconds = progress.Seconds();
  const size_t checked = ok + corrupt.size();
  // The recovery damage of every mount the paths are on.
  std::vector<std::string> roots;
  for (const auto& p : paths) {
    std::string root = MountRootOf(p);
    if (std::find(roots.begin(), roots.end(), root) == roots.end()) roots.push_back(root);
  }
  nlohmann::json damage = nlohmann::json::array();
  for (const auto& root : roots) {
    nlohmann::json s = ReadJsonFile(root + "/.kvfs/status");
    const uint64_t records = s.value("recovery_damaged_records", uint64_t{0});
    const uint64_t checkpoints = s.value("recovery_damaged_checkpoints", uint64_t{0});
    const uint64_t superblocks = s.value("recovery_repaired_superblocks", uint64_t{0});
    if (records + checkpoints + superblocks == 0) continue;
    damage.push_back({{"mount", root},
                      {"journal_records", records},
                      {"checkpoints", checkpoints},
                      {"superblocks", superblocks},
                      {"notes", s.value("recovery_notes", nlohmann::json::array())}});
    if (!json) {
      std::printf("%s:\n", root.c_str());
      PrintRecoveryDamage(s, stdout);
    }
  }
  if (json) {
    nlohmann::json report{{"files", checked},
                          {"bytes", bytes},
                          {"ok", ok},
                          {"corrupt", corrupt},
                          {"dropped", corrupt.size()},
                          {"vanished", vanished},
                          {"errors", errors},
                          {"recovery_damage", damage},
                          {"seconds", seconds}};
    std::printf("%s\n", JsonText(report, 2).c_str());
  } else {
    std::printf("checked %zu file%s, %s in %.1f s\n", checked, checked == 1 ? "" : "s",
                FormatSize(bytes).c_str(), seconds);
    std::printf("  ok        %zu\n", ok);
    std::printf("  corrupt   %zu (dropped from the cache)\n", corrupt.size());
    for (const auto& c : corrupt) std::printf("    %s\n", c.c_str());
    if (vanished) std::printf("  vanished  %zu (removed while verifying)\n", vanished);
    if (!errors.empty()) std::printf("  errors    %zu\n", errors.size());
    for (const auto& e : errors) std::printf("    %s\n", e.c_str());
  }
  return corrupt.empty() && errors.empty() && damage.empty() ? 0 : 1;
}

}  // namespace kvfs::fs
