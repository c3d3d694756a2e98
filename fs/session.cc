#include "session.h"

#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <charconv>
#include <fstream>
#include <string_view>

#include "fuse_option_list.h"
#include "mount_info.h"
#include "splice_reply.h"

namespace kvfs::fs {
namespace {

// libfuse's arguments for the user's -o options, after kvfs's own.
std::vector<std::string> FuseArgv(const std::vector<std::string>& fuse_options) {
  // max_read: READs no larger than a spliced reply that fits a 1 MiB pipe (splice_reply.h).
  std::vector<std::string> argv = {
      "kvfs", "-o",
      "fsname=kvfs,subtype=kvfs,default_permissions,max_read=" + std::to_string(kMaxSplicedRead)};
  for (const auto& o : fuse_options) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  return argv;
}

fuse_session* NewSession(std::vector<std::string> argv_s, const fuse_lowlevel_ops& ops,
                         void* userdata) {
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, userdata);
  // fuse_session_new may copy and extend the arguments (LeakSanitizer: 42 bytes per start).
  fuse_opt_free_args(&args);
  return se;
}

// The user's -o options that kvfs checks itself, before libfuse: returns the max_read the
// session will have, kvfs's or the user's last max_read=N (libfuse takes the last), which may be
// smaller. A larger one is refused: a READ's spliced reply must fit a 1 MiB pipe
// (splice_reply.h). So is a subtype=, which libfuse takes: kvfsctl and kvfs itself know their
// mounts by the type fuse.kvfs.
Result<uint32_t> CheckUserOptions(const std::vector<std::string>& fuse_options) {
  uint32_t max_read = kMaxSplicedRead;
  for (const std::string& list : fuse_options) {
    for (const std::string& item : SplitOptionList(list)) {
      const std::string option = UnescapeOption(item);
      if (option.starts_with("subtype="))
        return Status::Invalid("-o " + std::string(option) +
                               ": the subtype is always kvfs (kvfsctl finds mounts by it)");
      if (!option.starts_with("max_read=")) continue;
      const std::string_view value = std::string_view(option).substr(9);
      uint64_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n < 4096 ||
          n > kMaxSplicedRead) {
        return Status::Invalid("-o " + std::string(option) +
                               ": max_read must be a number from "
                               "4096 to " +
                               std::to_string(kMaxSplicedRead) +
                               " (kvfs's default, the largest READ whose reply fits a 1 MiB pipe)");
      }
      max_read = static_cast<uint32_t>(n);
    }
  }
  return max_read;
}

constexpr const char* kBadOption =
    "bad -o option (libfuse names it above). kvfs's own settings are flags (--data DIR, "
    "--capacity SIZE, ...: kvfs --help), or NAME=VALUE options through mount -t fuse.kvfs";

}  // namespace

Status Session::CheckOptions(const std::vector<std::string>& fuse_options) {
  KVFS_RETURN_IF_ERROR(CheckUserOptions(fuse_options).status());
  const fuse_lowlevel_ops no_ops{};
  fuse_session* se = NewSession(FuseArgv(fuse_options), no_ops, nullptr);
  if (!se) return Status::Invalid(kBadOption);
  fuse_session_destroy(se);
  return Status::Ok();
}

Result<std::unique_ptr<Session>> Session::Mount(const std::string& mountpoint,
                                                const std::vector<std::string>& fuse_options,
                                                FsContext* ctx) {
  KVFS_ASSIGN_OR_RETURN(ctx->max_read, CheckUserOptions(fuse_options));
  std::unique_ptr<Session> s(new Session);
  s->mountpoint_ = mountpoint;
  s->se_ = NewSession(FuseArgv(fuse_options), KvfsOperations(), ctx);
  if (!s->se_) return Status::Invalid(kBadOption);
  if (fuse_set_signal_handlers(s->se_) != 0)
    return Status::IoError("cannot install signal handlers");
  s->handlers_ = true;
  if (fuse_session_mount(s->se_, mountpoint.c_str()) != 0)
    return Status::IoError("cannot mount on " + mountpoint + " (see the log for libfuse's reason)");
  s->mounted_ = true;
  // mountinfo, not a stat() of the mountpoint: that would be a request to ourselves before
  // the loop runs.
  auto mount = FindMount(ReadMountInfo(), mountpoint);
  if (mount && mount->mount_point == mountpoint && mount->fstype.rfind("fuse", 0) == 0)
    s->mount_ = std::move(mount);
  return s;
}

Session::~Session() {
  // Unmounted first: a SIGTERM right after the mount ends the loop before it answers INIT, and
  // the readahead thread's stat of the mount point waits for that answer. Closing the device
  // ends the connection and that wait; joined first, the daemon hung for good, its mount with
  // it (19 of 20 daemons sent SIGTERM as soon as the mount appeared).
  if (se_ && mounted_) fuse_session_unmount(se_);
  FinishReadahead();
  if (!se_) return;
  if (handlers_) fuse_remove_signal_handlers(se_);
  fuse_session_destroy(se_);
}

void Session::TuneReadahead(unsigned kb) {
  // A whole number of READs per readahead window: with READs of kMaxSplicedRead, 1024 KiB
  // would be one 1008 KiB READ plus a 16 KiB one.
  const unsigned read_kb = kMaxSplicedRead / 1024;
  kb = (kb + read_kb - 1) / read_kb * read_kb;
  if (!mount_) {
    spdlog::warn("readahead: mount {} not found in mountinfo; left at the default", mountpoint_);
    return;
  }
  std::string path = "/sys/class/bdi/" + std::to_string(mount_->major) + ":" +
                     std::to_string(mount_->minor) + "/read_ahead_kb";
  std::ofstream out(path);
  out << kb << "\n";
  out.flush();
  if (!out) {
    spdlog::warn("readahead: cannot write {} (not root?); reads stay at the default size", path);
    return;
  }
  spdlog::info("readahead: {} = {}", path, kb);
}

void Session::TuneReadaheadAfterInit(unsigned kb, std::function<void()> then) {
  readahead_thread_ = std::thread([this, kb, then = std::move(then)] {
    struct stat st;
    if (::stat(mountpoint_.c_str(), &st) != 0) {
      spdlog::warn("readahead: stat {} failed; left at the default", mountpoint_);
    } else {
      TuneReadahead(kb);
    }
    then();
  });
}

void Session::FinishReadahead() {
  if (readahead_thread_.joinable()) readahead_thread_.join();
}

int Session::Loop(unsigned max_threads) {
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 1);
  fuse_loop_cfg_set_max_threads(cfg, max_threads);
  fuse_loop_cfg_set_idle_threads(cfg, max_threads);
  int rc = fuse_session_loop_mt(se_, cfg);
  fuse_loop_cfg_destroy(cfg);
  return rc;
}

}  // namespace kvfs::fs
