// User xattrs through the mount: set, get, list and remove with the errors setxattr(2) promises
// (XATTR_CREATE, XATTR_REPLACE, ERANGE, the per-file bound), on files and directories but not
// symlinks or the root; the fs's own user.kvfs.* names stay unlisted and unsettable; xattrs
// follow a file through rename and hard links, go with a first publish, and survive a restart.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "mount_fixture.h"

namespace kvfs::fs::testing {
namespace {

using XattrsTest = MountTest;

std::vector<std::string> List(const std::string& path) {
  char buf[8192];
  const ssize_t n = llistxattr(path.c_str(), buf, sizeof buf);
  std::vector<std::string> names;
  for (ssize_t i = 0; i < n;) {
    names.emplace_back(buf + i);
    i += static_cast<ssize_t>(names.back().size()) + 1;
  }
  return names;
}

// The value, or "errno:N" when getxattr fails.
std::string Get(const std::string& path, const char* name) {
  char buf[8192];
  const ssize_t n = lgetxattr(path.c_str(), name, buf, sizeof buf);
  if (n < 0) return "errno:" + std::to_string(errno);
  return std::string(buf, static_cast<size_t>(n));
}

int Set(const std::string& path, const char* name, const std::string& value, int flags = 0) {
  return lsetxattr(path.c_str(), name, value.data(), value.size(), flags) == 0 ? 0 : errno;
}

timespec Ctime(const std::string& path) {
  struct stat st;
  std::memset(&st, 0, sizeof st);
  stat(path.c_str(), &st);
  return st.st_ctim;
}

TEST_F(XattrsTest, SetGetListRemoveWithTheirErrors) {
  WriteFile(P("f"), "data");
  const std::string binary("\0\xff value", 8);
  EXPECT_EQ(Set(P("f"), "user.b", binary), 0);
  EXPECT_EQ(Set(P("f"), "user.a", "1"), 0);
  EXPECT_EQ(Set(P("f"), "user.empty", ""), 0);
  EXPECT_EQ(List(P("f")), (std::vector<std::string>{"user.a", "user.b", "user.empty"}));
  EXPECT_EQ(Get(P("f"), "user.b"), binary);
  EXPECT_EQ(Get(P("f"), "user.empty"), "");
  EXPECT_EQ(Get(P("f"), "user.none"), "errno:" + std::to_string(ENODATA));
  // Sizes: asked with 0, and a buffer too small.
  char small[4];
  EXPECT_EQ(getxattr(P("f").c_str(), "user.b", nullptr, 0), 8);
  EXPECT_EQ(getxattr(P("f").c_str(), "user.b", small, sizeof small), -1);
  EXPECT_EQ(errno, ERANGE);
  EXPECT_EQ(listxattr(P("f").c_str(), nullptr, 0), 7 + 7 + 11);
  EXPECT_EQ(listxattr(P("f").c_str(), small, sizeof small), -1);
  EXPECT_EQ(errno, ERANGE);
  // Flags.
  EXPECT_EQ(Set(P("f"), "user.a", "2", XATTR_CREATE), EEXIST);
  EXPECT_EQ(Set(P("f"), "user.new", "2", XATTR_REPLACE), ENODATA);
  EXPECT_EQ(Set(P("f"), "user.a", "22", XATTR_REPLACE), 0);
  EXPECT_EQ(Get(P("f"), "user.a"), "22");
  EXPECT_EQ(Set(P("f"), "user.c", "3", XATTR_CREATE), 0);
  // Removal; each change moves ctime.
  const timespec before = Ctime(P("f"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(removexattr(P("f").c_str(), "user.c"), 0) << strerror(errno);
  const timespec after = Ctime(P("f"));
  EXPECT_TRUE(after.tv_sec > before.tv_sec ||
              (after.tv_sec == before.tv_sec && after.tv_nsec > before.tv_nsec));
  EXPECT_EQ(removexattr(P("f").c_str(), "user.c"), -1);
  EXPECT_EQ(errno, ENODATA);
  // The bound: names and values of one file together at most 4096 bytes.
  EXPECT_EQ(Set(P("f"), "user.big", std::string(5000, 'x')), ENOSPC);
  const size_t used = 6 + 2 + 6 + 8 + 10;  // user.a=22, user.b, user.empty
  EXPECT_EQ(Set(P("f"), "user.big", std::string(4096 - used - 8, 'x')), 0);
  EXPECT_EQ(Set(P("f"), "user.z", ""), ENOSPC);
  EXPECT_EQ(removexattr(P("f").c_str(), "user.big"), 0);
  EXPECT_EQ(Set(P("f"), "user.z", ""), 0);
  EXPECT_EQ(Set(P("f"), ("user." + std::string(251, 'n')).c_str(), "v"), ERANGE);
  // Directories take them; symlinks and the root do not; other namespaces are not kept.
  ASSERT_EQ(mkdir(P("d").c_str(), 0755), 0);
  EXPECT_EQ(Set(P("d"), "user.dir", "yes"), 0);
  EXPECT_EQ(List(P("d")), std::vector<std::string>{"user.dir"});
  ASSERT_EQ(symlink("f", P("l").c_str()), 0);
  EXPECT_EQ(Set(P("l"), "user.x", "1"), EPERM);
  EXPECT_EQ(Set(mnt_, "user.x", "1"), ENOTSUP);
  EXPECT_EQ(Set(P("f"), "trusted.x", "1"), ENOTSUP);
  EXPECT_EQ(Get(P("f"), "trusted.x"), "errno:" + std::to_string(ENODATA));
  // The fs's own names: read by name, never listed, not settable or removable as data.
  EXPECT_EQ(Set(P("f"), "user.kvfs.mine", "1"), ENOTSUP);
  EXPECT_EQ(removexattr(P("f").c_str(), "user.kvfs.pin"), -1);
  EXPECT_EQ(errno, ENOTSUP);
  EXPECT_EQ(Get(P("f"), "user.kvfs.state"), "published");
  for (const std::string& n : List(P("f"))) EXPECT_EQ(n.rfind("user.kvfs.", 0), std::string::npos);
}

// Setting the value an xattr already has changes nothing, not even ctime, as on ext4; another
// value moves ctime. Before, every setxattr moved ctime (and wrote the record again).
TEST_F(XattrsTest, SettingTheSameValueMovesNoCtime) {
  WriteFile(P("tagged"), "data");
  ASSERT_EQ(Set(P("tagged"), "user.tag", "v1"), 0);
  const timespec first = Ctime(P("tagged"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(Set(P("tagged"), "user.tag", "v1"), 0);
  EXPECT_EQ(Set(P("tagged"), "user.tag", "v1", XATTR_REPLACE), 0);
  EXPECT_EQ(Set(P("tagged"), "user.tag", "v1", XATTR_CREATE), EEXIST);
  const timespec same = Ctime(P("tagged"));
  EXPECT_EQ(same.tv_sec, first.tv_sec);
  EXPECT_EQ(same.tv_nsec, first.tv_nsec);
  EXPECT_EQ(Set(P("tagged"), "user.tag", "v2"), 0);
  const timespec moved = Ctime(P("tagged"));
  EXPECT_TRUE(moved.tv_sec > first.tv_sec ||
              (moved.tv_sec == first.tv_sec && moved.tv_nsec > first.tv_nsec));
  EXPECT_EQ(Get(P("tagged"), "user.tag"), "v2");
}

TEST_F(XattrsTest, XattrsFollowTheFileAndSurviveARestart) {
  // Set while the first version is still being written: it goes with the publish.
  const int fd = open(P("w").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "abc", 3), 3);
  EXPECT_EQ(fsetxattr(fd, "user.origin", "writer", 6, 0), 0) << strerror(errno);
  ASSERT_EQ(close(fd), 0);
  EXPECT_EQ(Get(P("w"), "user.origin"), "writer");
  // A new version keeps the file's xattrs; a rename and a hard link show the same ones.
  WriteFile(P("w"), "new data");
  EXPECT_EQ(Get(P("w"), "user.origin"), "writer");
  ASSERT_EQ(rename(P("w").c_str(), P("moved").c_str()), 0);
  ASSERT_EQ(link(P("moved").c_str(), P("alias").c_str()), 0);
  EXPECT_EQ(Set(P("alias"), "user.second", "2"), 0);
  EXPECT_EQ(Get(P("moved"), "user.second"), "2");
  // A rename over another file: the target's xattrs go with it.
  WriteFile(P("victim"), "v");
  EXPECT_EQ(Set(P("victim"), "user.victim", "1"), 0);
  WriteFile(P("src"), "s");
  ASSERT_EQ(rename(P("src").c_str(), P("victim").c_str()), 0);
  EXPECT_EQ(List(P("victim")), std::vector<std::string>{});
  ASSERT_EQ(mkdir(P("d").c_str(), 0755), 0);
  EXPECT_EQ(Set(P("d"), "user.dir", "d"), 0);
  WriteFile(P("d/cleared"), "c");
  EXPECT_EQ(Set(P("d/cleared"), "user.gone", "1"), 0);
  EXPECT_EQ(removexattr(P("d/cleared").c_str(), "user.gone"), 0);
  if (memory_store()) return;  // nothing survives that daemon

  ASSERT_EQ(Stop(), 0) << DaemonLog();
  Start();
  EXPECT_EQ(List(P("moved")), (std::vector<std::string>{"user.origin", "user.second"}));
  EXPECT_EQ(Get(P("alias"), "user.origin"), "writer");
  EXPECT_EQ(ReadFile(P("moved")), "new data");
  EXPECT_EQ(Get(P("d"), "user.dir"), "d");
  EXPECT_EQ(List(P("d/cleared")), std::vector<std::string>{});
  EXPECT_EQ(List(P("victim")), std::vector<std::string>{});
}

TEST_F(XattrsTest, CpPreservesUserXattrsOnlyAcrossTheMount) {
  WriteFile(P("a"), RandomBytes(1 << 20, 3));
  EXPECT_EQ(Set(P("a"), "user.model", "llama"), 0);
  std::string out;
  ASSERT_EQ(Shell("cp -a " + P("a") + " " + P("b") + " 2>&1", &out), 0) << out;
  EXPECT_EQ(List(P("b")), std::vector<std::string>{"user.model"});
  EXPECT_EQ(Get(P("b"), "user.model"), "llama");
  ASSERT_EQ(Shell("getfattr -d --absolute-names " + P("b") + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("user.model=\"llama\""), std::string::npos) << out;
  EXPECT_EQ(out.find("user.kvfs."), std::string::npos) << out;
}

}  // namespace
}  // namespace kvfs::fs::testing
