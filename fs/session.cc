#include "session.h"

#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fstream>

#include "mount_info.h"
#include "splice_reply.h"

namespace kvfs::fs {

Result<std::unique_ptr<Session>> Session::Mount(const std::string& mountpoint,
                                                const std::vector<std::string>& fuse_options,
                                                FsContext* ctx) {
  // max_read: READs no larger than a spliced reply that fits a 1 MiB pipe (splice_reply.h).
  std::vector<std::string> argv_s = {
      "kvfs", "-o",
      "fsname=kvfs,subtype=kvfs,default_permissions,max_read=" + std::to_string(kMaxSplicedRead)};
  for (const auto& o : fuse_options) {
    argv_s.push_back("-o");
    argv_s.push_back(o);
  }
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  std::unique_ptr<Session> s(new Session);
  s->mountpoint_ = mountpoint;
  const fuse_lowlevel_ops& ops = KvfsOperations();
  s->se_ = fuse_session_new(&args, &ops, sizeof ops, ctx);
  if (!s->se_) return Status::Invalid("fuse_session_new failed (bad -o option?)");
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

void Session::TuneReadaheadAfterInit(unsigned kb) {
  readahead_thread_ = std::thread([this, kb] {
    struct stat st;
    if (::stat(mountpoint_.c_str(), &st) != 0) {
      spdlog::warn("readahead: stat {} failed; left at the default", mountpoint_);
      return;
    }
    TuneReadahead(kb);
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
