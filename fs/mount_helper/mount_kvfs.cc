// mount.kvfs: the mount(8) helper. `mount -t fuse.kvfs SOURCE DIR -o OPTIONS` and /etc/fstab
// lines of type fuse.kvfs run it as /sbin/mount.fuse.kvfs (type kvfs: /sbin/mount.kvfs) with
//
//   SOURCE DIR [-s] [-f] [-n] [-v] [-o OPTIONS] [-t TYPE]
//
// It turns the comma-separated OPTIONS into a kvfs command line and runs kvfs, which daemonizes
// and returns once the mount is ready:
//   - options only mount(8), fstab or systemd read (defaults, noauto, _netdev, nofail, user,
//     x-*, ...) are dropped;
//   - VFS and FUSE mount options (allow_other, default_permissions, ro, noatime, ...) go to kvfs
//     as one -o list, with fsname=SOURCE so that mount(8) recognises the mount as already there;
//   - every other KEY[=VALUE] becomes kvfs's long option --KEY[=VALUE], '_' read as '-'
//     (data_dir is --data), so an option kvfs gains later works in fstab without a change here
//     and a misspelt one is refused by kvfs itself.
// A shell script could do the same; this is C++ for exact argv handling (no word splitting of
// paths) and mount(8)'s exit codes: 0 mounted, 1 bad invocation or options, 2 system error (kvfs
// not found, fork failed), 32 kvfs could not mount.
#include <fcntl.h>
#include <getopt.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "../fuse_option_list.h"
#include "kvfs/version.h"

extern char** environ;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 1;   // mount(8): incorrect invocation or permissions
constexpr int kExitSystem = 2;  // mount(8): system error
constexpr int kExitMount = 32;  // mount(8): mount failure

const char* kUsage =
    "Usage: mount.kvfs SOURCE MOUNTPOINT [-f] [-n] [-s] [-v] [-o OPTIONS]\n"
    "       mount -t fuse.kvfs SOURCE MOUNTPOINT -o OPTIONS\n"
    "\n"
    "Runs kvfs(8) for mount(8) and /etc/fstab. OPTIONS is a comma-separated list:\n"
    "  data_dir=DIR, capacity=SIZE, device=PATH[:SIZE] (repeatable), durability=close|async,\n"
    "  compress=off|lz4|auto, eviction=..., config=FILE, ...: any kvfs option --NAME as NAME\n"
    "  or NAME=VALUE ('_' for '-');\n"
    "  allow_other, default_permissions, ro, noatime, ...: FUSE and VFS mount options;\n"
    "  defaults, auto, noauto, user, nofail, _netdev, x-*: for mount(8), ignored here.\n"
    "  -f  fake: do everything but run kvfs\n"
    "  -v  verbose: print the kvfs command line, and let kvfs print its own line\n"
    "  -n, -s  accepted and ignored\n"
    "Environment: KVFS_BIN, the kvfs binary to run.\n";

// Options for mount(8), fstab or systemd only, which libfuse would refuse; and relatime, the
// default that libfuse 3.14 does not accept by name.
bool IsMountOnly(std::string_view key) {
  static const std::set<std::string_view> kKeys = {
      "defaults", "auto",  "noauto", "user",    "nouser",  "users",
      "owner",    "group", "nofail", "_netdev", "comment", "relatime",
  };
  return kKeys.count(key) > 0 || key.rfind("x-", 0) == 0;
}

// Mount options that libfuse 3.14 and the kernel understand (checked one by one on a mount);
// kvfs passes its -o lists to libfuse.
bool IsFuseOption(std::string_view key, bool has_value) {
  static const std::set<std::string_view> kFlags = {
      "allow_other",  "allow_root", "default_permissions",
      "auto_unmount", "debug",      "ro",
      "rw",           "suid",       "nosuid",
      "dev",          "nodev",      "exec",
      "noexec",       "sync",       "async",
      "dirsync",      "atime",      "noatime",
  };
  static const std::set<std::string_view> kWithValue = {
      "fsname", "context", "fscontext", "defcontext", "rootcontext", "max_read",
  };
  return has_value ? kWithValue.count(key) > 0 : kFlags.count(key) > 0;
}

// Options that make no sense through mount(8): why, or nullptr when the option is fine.
const char* RefusalReason(std::string_view key) {
  if (key == "f" || key == "foreground")
    return "mount(8) waits for the helper; run `kvfs -f` directly (or the kvfs@.service unit)";
  if (key == "help" || key == "version") return "run `kvfs --help` or `kvfs --version`";
  if (key == "subtype") return "the subtype is always kvfs (kvfsctl finds mounts by it)";
  if (key == "setuid" || key == "drop_privileges")
    return "mount.fuse3's option; mount.kvfs runs kvfs as the user who mounts";
  if (key == "blkdev" || key == "blksize") return "kvfs is not a fuseblk filesystem";
  if (key == "norelatime" || key == "strictatime" || key == "nostrictatime" || key == "diratime" ||
      key == "nodiratime")
    return "libfuse 3.14 does not pass it on (kvfs mounts are relatime; noatime works)";
  return nullptr;
}

struct Invocation {
  std::string source;
  std::string mountpoint;
  std::vector<std::string> options;  // split at commas
  bool fake = false;
  bool verbose = false;
};

// Splits "a,b=c,d" at commas and resolves escapes, as libfuse reads -o lists.
std::vector<std::string> SplitOptions(const std::string& list) {
  std::vector<std::string> out;
  for (const std::string& o : kvfs::fs::SplitOptionList(list))
    out.push_back(kvfs::fs::UnescapeOption(o));
  return out;
}

std::string EscapeForFuse(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Quotes an argument for display, so that -v output can be pasted into a shell.
std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_=+./:,@%") == std::string::npos)
    return arg;
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

struct Translation {
  std::vector<std::string> kvfs_args;  // after the mountpoint
  std::string error;                   // non-empty: refuse
};

Translation Translate(const Invocation& inv) {
  Translation t;
  std::vector<std::string> fuse;
  bool has_fsname = false;
  for (const std::string& opt : inv.options) {
    if (opt.empty()) continue;
    auto eq = opt.find('=');
    std::string key = opt.substr(0, eq);
    bool has_value = eq != std::string::npos;
    if (key.empty()) {
      t.error = "option '" + opt + "' has no name";
      return t;
    }
    if (IsMountOnly(key)) continue;
    if (const char* why = RefusalReason(key)) {
      t.error = "option '" + key + "' is not supported: " + why;
      return t;
    }
    if (IsFuseOption(key, has_value)) {
      if (key == "fsname") has_fsname = true;
      fuse.push_back(has_value ? key + "=" + EscapeForFuse(opt.substr(eq + 1)) : key);
      continue;
    }
    std::string flag = key == "data_dir" ? "data" : key;
    for (char& c : flag)
      if (c == '_') c = '-';
    t.kvfs_args.push_back("--" + flag + (has_value ? "=" + opt.substr(eq + 1) : ""));
  }
  if (!has_fsname && !inv.source.empty() && inv.source != "none")
    fuse.push_back("fsname=" + EscapeForFuse(inv.source));
  if (!fuse.empty()) {
    std::string list;
    for (const auto& f : fuse) list += (list.empty() ? "" : ",") + f;
    t.kvfs_args.push_back("-o");
    t.kvfs_args.push_back(list);
  }
  return t;
}

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// KVFS_BIN (not when set-uid), then kvfs beside this binary, then the installed one.
std::optional<std::string> FindKvfs(std::string& looked_in) {
  if (const char* env = std::getenv("KVFS_BIN"); env && *env && getuid() == geteuid()) {
    looked_in = std::string("KVFS_BIN=") + env;
    if (IsExecutable(env)) return std::string(env);
    return std::nullopt;
  }
  std::vector<std::string> candidates;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((self.parent_path() / "kvfs").string());
  candidates.push_back(std::string(KVFS_INSTALL_BINDIR) + "/kvfs");
  for (const auto& c : candidates) {
    looked_in += (looked_in.empty() ? "" : ", ") + c;
    if (IsExecutable(c)) return c;
  }
  return std::nullopt;
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "mount.kvfs: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Invocation inv;
  static const option kLong[] = {{"help", no_argument, nullptr, 'h'},
                                 {"version", no_argument, nullptr, 'V'},
                                 {nullptr, 0, nullptr, 0}};
  std::string type;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "fnsvo:t:N:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'f':
        inv.fake = true;
        break;
      case 'v':
        inv.verbose = true;
        break;
      case 'n':
      case 's':
        break;
      case 'N':
        return Fail(kExitUsage, "-N (mount namespaces) is not supported");
      case 'o':
        for (auto& o : SplitOptions(optarg)) inv.options.push_back(std::move(o));
        break;
      case 't':
        type = optarg;
        break;
      case 'h':
        std::fputs(kUsage, stdout);
        return kExitOk;
      case 'V':
        std::printf("mount.kvfs (kvfs %s)\n", KVFS_VERSION);
        return kExitOk;
      default:
        std::fprintf(stderr, "mount.kvfs: unknown or incomplete option '%s'\n%s", argv[optind - 1],
                     kUsage);
        return kExitUsage;
    }
  }
  if (!type.empty() && type != "kvfs" && type != "fuse.kvfs")
    return Fail(kExitUsage, "filesystem type '" + type + "' is not kvfs");
  if (argc - optind != 2) {
    std::fprintf(stderr, "mount.kvfs: expected SOURCE and MOUNTPOINT\n%s", kUsage);
    return kExitUsage;
  }
  inv.source = argv[optind];
  inv.mountpoint = argv[optind + 1];

  struct stat st;
  // ENOTCONN: a dead kvfs daemon's mount, which kvfs itself detaches before it mounts (or
  // ECONNABORTED: this kernel answers so a request that met the connection's abort, about 1
  // stat in 30 right after the daemon was killed).
  const int rc = ::stat(inv.mountpoint.c_str(), &st);
  if (rc != 0 && errno != ENOTCONN && errno != ECONNABORTED)
    return Fail(kExitMount, "mount point " + inv.mountpoint + ": " + std::strerror(errno));
  if (rc == 0 && !S_ISDIR(st.st_mode))
    return Fail(kExitMount, "mount point " + inv.mountpoint + " is not a directory");

  Translation t = Translate(inv);
  if (!t.error.empty()) return Fail(kExitUsage, t.error);
  std::string looked_in;
  auto kvfs = FindKvfs(looked_in);
  if (!kvfs) return Fail(kExitSystem, "cannot find the kvfs binary (looked at " + looked_in + ")");

  std::vector<std::string> args = {*kvfs, inv.mountpoint};
  args.insert(args.end(), t.kvfs_args.begin(), t.kvfs_args.end());
  std::string shown;
  for (const auto& a : args) shown += (shown.empty() ? "" : " ") + ShellQuote(a);
  if (inv.verbose) std::printf("mount.kvfs: %s\n", shown.c_str());
  std::fflush(stdout);
  if (inv.fake) return kExitOk;

  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // mount(8) is quiet when it works: kvfs's "data ..., capacity ..." line is shown with -v
  // only. Its errors go to stderr, which stays.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!inv.verbose)
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int err = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return Fail(kExitSystem, "cannot run " + *kvfs + ": " + std::strerror(err));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Fail(kExitSystem, std::string("waitpid: ") + std::strerror(errno));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return kExitOk;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2)
    return Fail(kExitUsage,
                "kvfs refused its command line (a -o key that is neither a FUSE "
                "nor a mount(8) option becomes kvfs's --KEY; see mount.kvfs "
                "--help): " +
                    shown);
  if (WIFSIGNALED(status))
    return Fail(kExitMount, "kvfs was killed by signal " + std::to_string(WTERMSIG(status)));
  return Fail(kExitMount, "kvfs could not mount " + inv.mountpoint +
                              " (its message is above; the log is DATA_DIR/kvfs.log)");
}
