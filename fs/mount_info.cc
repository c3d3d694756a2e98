#include "mount_info.h"

#include <spawn.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kvfs::fs {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        char c = s[i + k];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out += static_cast<char>(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

}  // namespace

std::vector<MountEntry> ReadMountInfo(const std::string& path) {
  std::vector<MountEntry> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, mount_point;
    if (!(fields >> id >> parent >> devno >> root >> mount_point)) continue;
    MountEntry e;
    e.mount_point = Unescape(mount_point);
    if (std::sscanf(devno.c_str(), "%u:%u", &e.major, &e.minor) != 2) continue;
    // Optional fields run up to a lone "-", then fstype and source.
    std::string word;
    while (fields >> word && word != "-") {
    }
    fields >> e.fstype >> e.source;
    e.source = Unescape(e.source);
    out.push_back(std::move(e));
  }
  return out;
}

std::optional<MountEntry> FindMount(const std::vector<MountEntry>& mounts,
                                    const std::string& path) {
  std::optional<MountEntry> best;
  for (const auto& m : mounts) {
    const std::string& mp = m.mount_point;
    bool prefix =
        mp == "/" || path == mp ||
        (path.size() > mp.size() && path.compare(0, mp.size(), mp) == 0 && path[mp.size()] == '/');
    if (prefix && (!best || mp.size() >= best->mount_point.size())) best = m;
  }
  return best;
}

MountState ProbeMount(const std::string& path, std::string* fstype) {
  std::optional<MountEntry> top;
  for (const MountEntry& m : ReadMountInfo())
    if (m.mount_point == path) top = m;  // the last one listed is the one on top
  if (!top) return MountState::kNone;
  if (fstype) *fstype = top->fstype;
  const pid_t child = ::fork();
  if (child < 0) return MountState::kAnswering;  // cannot tell: behave as before
  if (child == 0) {
    struct statfs st;
    // ECONNABORTED: a request that met the abort of a connection whose daemon died.
    _exit(::statfs(path.c_str(), &st) == 0             ? 0
          : errno == ENOTCONN || errno == ECONNABORTED ? 1
                                                       : 2);
  }
  int wstatus = 0;
  for (int waited_ms = 0;; waited_ms += 10) {
    const pid_t r = ::waitpid(child, &wstatus, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) return MountState::kAnswering;
    if (waited_ms >= 2000) {
      ::kill(child, SIGKILL);  // a FUSE request waits killably
      while (::waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
      }
      return MountState::kNotAnswering;
    }
    ::usleep(10 * 1000);
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 1) return MountState::kDead;
  return MountState::kAnswering;
}

Status DetachMount(const std::string& path) {
  if (::umount2(path.c_str(), MNT_DETACH) == 0) return Status::Ok();
  const int umount_errno = errno;
  const char* argv[] = {"fusermount3", "-u", "-z", "--", path.c_str(), nullptr};
  pid_t pid = -1;
  if (::posix_spawnp(&pid, "fusermount3", nullptr, nullptr, const_cast<char* const*>(argv),
                     environ) == 0) {
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return Status::Ok();
  }
  return Status::Error(umount_errno, "cannot detach the mount on '" + path + "' (" +
                                         std::strerror(umount_errno) + "); run fusermount3 -u -z " +
                                         path);
}

}  // namespace kvfs::fs
