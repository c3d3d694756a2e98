// Lookups through the mount: a miss leaves a negative dentry (1 s) that a publish of the name
// through this mount replaces at once, and hits are answered by the kernel's dentry and
// attribute caches without reaching the daemon (its lookup counter does not move).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "mount_fixture.h"

namespace kvfs::fs::testing {
namespace {

using LookupTest = MountTest;

int StatErrno(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? 0 : errno;
}

uint64_t DaemonCounter(const std::string& stats, const std::string& key) {
  std::istringstream in(stats);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + " ", 0) == 0) return std::stoull(line.substr(key.size() + 1));
  }
  return ~0ull;
}

TEST_F(LookupTest, MissThenPublishByRenameIsFoundAtOnce) {
  ASSERT_EQ(mkdir(P("chunks").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(P("staging").c_str(), 0755), 0);
  // Repeated misses: the kernel now holds a negative dentry for the name.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(StatErrno(P("chunks/abc.kv")), ENOENT);
  ASSERT_EQ(access(P("chunks/abc.kv").c_str(), F_OK), -1);
  // Published beside the target, renamed over the negative dentry: visible immediately.
  WriteFile(P("chunks/abc.kv.tmp"), "first");
  ASSERT_EQ(rename(P("chunks/abc.kv.tmp").c_str(), P("chunks/abc.kv").c_str()), 0);
  EXPECT_EQ(StatErrno(P("chunks/abc.kv")), 0);
  EXPECT_EQ(ReadFile(P("chunks/abc.kv")), "first");
  // From another directory (a staging dir, as some connectors do).
  ASSERT_EQ(StatErrno(P("chunks/def.kv")), ENOENT);
  WriteFile(P("staging/def.kv"), "second");
  ASSERT_EQ(rename(P("staging/def.kv").c_str(), P("chunks/def.kv").c_str()), 0);
  EXPECT_EQ(StatErrno(P("chunks/def.kv")), 0);
  EXPECT_EQ(ReadFile(P("chunks/def.kv")), "second");
  // Created in place (O_CREAT over the negative dentry).
  ASSERT_EQ(StatErrno(P("chunks/ghi.kv")), ENOENT);
  WriteFile(P("chunks/ghi.kv"), "third");
  EXPECT_EQ(ReadFile(P("chunks/ghi.kv")), "third");
  // And a name that goes away is a miss again at once (no stale positive dentry).
  ASSERT_EQ(unlink(P("chunks/abc.kv").c_str()), 0);
  EXPECT_EQ(StatErrno(P("chunks/abc.kv")), ENOENT);
}

TEST_F(LookupTest, HitsOfPublishedFilesDoNotReachTheDaemon) {
  for (int i = 0; i < 20; ++i) {
    const std::string name = P("f" + std::to_string(i));
    WriteFile(name + ".tmp", "data" + std::to_string(i));
    ASSERT_EQ(rename((name + ".tmp").c_str(), name.c_str()), 0);
  }
  for (int i = 0; i < 20; ++i) ASSERT_EQ(StatErrno(P("f" + std::to_string(i))), 0);
  const uint64_t before = DaemonCounter(ReadFile(P(".kvfs/stats")), "lookups");
  ASSERT_NE(before, ~0ull);
  for (int round = 0; round < 10; ++round)
    for (int i = 0; i < 20; ++i) ASSERT_EQ(StatErrno(P("f" + std::to_string(i))), 0);
  // Only the lookup of .kvfs/stats itself (its entry timeout is 0) may have been counted.
  const uint64_t after = DaemonCounter(ReadFile(P(".kvfs/stats")), "lookups");
  EXPECT_LE(after - before, 2u);
}

}  // namespace
}  // namespace kvfs::fs::testing
