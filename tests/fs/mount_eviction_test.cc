// kvfs as a bounded cache, through the mount: a small --capacity with 4 MiB files, eviction to
// the low watermark in policy order (lru, fifo, lfu, prefix), evicted names missing, open
// readers unaffected, pins and user.kvfs.parent links kept across restarts, a file bigger than
// the high watermark kept until the next write needs its room, a file being written never a
// victim.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "mount_fixture.h"

namespace kvfs::fs::testing {
namespace {

constexpr size_t kFile = 4 << 20;

class EvictionMountTest : public MountTest {
 protected:
  // Remounts on a fresh 64 MiB data directory with the given eviction options.
  void Remount(std::vector<std::string> extra) {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(data_, ec);
    extra.insert(extra.end(), {"--capacity", "64M"});
    Start(extra);
  }
  nlohmann::json Status() { return nlohmann::json::parse(ReadFile(P(".kvfs/status"))); }
  uint64_t Evictions() { return Status()["evictions"].get<uint64_t>(); }
  bool Exists(const std::string& name) {
    struct stat st;
    return ::stat(P(name).c_str(), &st) == 0;
  }
  // The kernel forgets an evicted name through the notifier thread, just after the eviction.
  bool Gone(const std::string& name) {
    for (int i = 0; i < 250 && Exists(name); ++i) usleep(20000);
    return !Exists(name);
  }
  static std::string Name(int i) { return "c" + std::to_string(i); }
  // Writes c<first>, c<first+1>, ... until the first eviction; `each` runs after every file.
  int FillUntilEviction(int first, const std::function<void()>& each = {}) {
    int i = first;
    for (; Evictions() == 0 && i < first + 40; ++i) {
      WriteFile(P(Name(i)), RandomBytes(kFile, i));
      if (each) each();
    }
    return i;
  }
};

TEST_F(EvictionMountTest, WritingPastTheHighWatermarkEvictsDownToTheLowOne) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  Remount({"--eviction", "lru", "--high-watermark", "0.9", "--low-watermark", "0.6"});
  for (int i = 0; i < 20; ++i) WriteFile(P(Name(i)), RandomBytes(kFile, i));
  const auto s = Status();
  EXPECT_EQ(s["eviction_policy"], "lru");
  EXPECT_DOUBLE_EQ(s["high_watermark"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(s["low_watermark"].get<double>(), 0.6);
  EXPECT_GT(s["evictions"].get<uint64_t>(), 0u);
  const double cap = s["capacity_bytes"].get<double>();
  EXPECT_LE(s["used_bytes"].get<double>(), 0.9 * cap);
  // Never read: the oldest went first; the evicted name misses, the newest is intact.
  ASSERT_TRUE(Gone(Name(0)));
  errno = 0;
  struct stat st;
  EXPECT_NE(::stat(P(Name(0)).c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(ReadFile(P(Name(19))), RandomBytes(kFile, 19));
  std::string out;
  EXPECT_EQ(Shell(std::string(KVFSCTL_BIN) + " status " + mnt_ + " --json", &out), 0);
  EXPECT_NE(out.find("\"eviction_policy\""), std::string::npos) << out;
}

TEST_F(EvictionMountTest, AFileOverTheHighWatermarkStaysUntilTheNextWriteNeedsRoom) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  // The publish of a file bigger than the high watermark used to evict that very file while
  // its writer was still open: the name stayed, the engine forgot the file, and its space was
  // never evictable again (every later write ENOSPC until a restart).
  for (const char* policy : {"lru", "lfu", "fifo", "prefix"}) {
    SCOPED_TRACE(policy);
    Remount({"--eviction", policy});
    WriteFile(P("small"), RandomBytes(kFile, 1));
    const std::string big = RandomBytes(60 << 20, 2);
    WriteFile(P("big"), big);
    EXPECT_TRUE(Gone("small"));
    EXPECT_EQ(Status()["files"].get<uint64_t>(), 1u);
    EXPECT_TRUE(ReadFile(P("big")) == big);
    const std::string next = RandomBytes(10 << 20, 3);
    WriteFile(P("next"), next);  // room is made by evicting "big"
    EXPECT_TRUE(Gone("big"));
    EXPECT_TRUE(ReadFile(P("next")) == next);
    const auto s = Status();
    EXPECT_EQ(s["files"].get<uint64_t>(), 1u);
    EXPECT_LE(s["used_bytes"].get<uint64_t>(), uint64_t{12} << 20);
  }
}

TEST_F(EvictionMountTest, AFileWhoseWriterIsStillOpenIsNeverAVictim) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  // A version published while its writer stays open (a FLUSH from close of a dup, or the
  // window between close(2) and the RELEASE) used to be evicted by another file's publish:
  // the fs keeps a name its writer holds, so the name stayed while the engine forgot the
  // file, and its space was never evictable again (a ghost until restart).
  for (const char* policy : {"lru", "lfu", "fifo", "prefix"}) {
    SCOPED_TRACE(policy);
    Remount({"--eviction", policy});
    const std::string a = RandomBytes(28 << 20, 1);
    const int fd = ::open(P("a").c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, a.data(), a.size()), static_cast<ssize_t>(a.size()));
    ASSERT_EQ(::close(::dup(fd)), 0);             // FLUSH: "a" is published, its session stays open
    WriteFile(P("b"), RandomBytes(34 << 20, 2));  // past the high watermark: "a" is the victim
    EXPECT_EQ(Status()["files"].get<uint64_t>(), 2u);
    EXPECT_EQ(Evictions(), 0u);
    // Nor by hand while it is being written.
    EXPECT_NE(::setxattr(P("a").c_str(), "user.kvfs.evict", "1", 1, 0), 0);
    EXPECT_EQ(errno, EBUSY);
    ASSERT_EQ(::close(fd), 0);
    WaitNoOpenFiles();
    EXPECT_TRUE(ReadFile(P("a")) == a);
    // Closed, it is an ordinary victim: later writes evict it, and what the engine holds is
    // what the names say.
    for (int i = 0; i < 4; ++i) WriteFile(P(Name(i)), RandomBytes(20 << 20, 10 + i));
    EXPECT_TRUE(Gone("a"));
    EXPECT_TRUE(ReadFile(P(Name(3))) == RandomBytes(20 << 20, 13));
    const auto s = Status();
    size_t names = 0;
    for (const auto& e : std::filesystem::directory_iterator(mnt_)) names += e.is_regular_file();
    EXPECT_EQ(s["files"].get<uint64_t>(), names);
    EXPECT_LE(s["used_bytes"].get<uint64_t>(), uint64_t{56} << 20);
  }
}

TEST_F(EvictionMountTest, LruKeepsTheFileThatIsRead) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  Remount({"--eviction", "lru"});
  WriteFile(P(Name(0)), RandomBytes(kFile, 0));
  WriteFile(P(Name(1)), RandomBytes(kFile, 1));
  FillUntilEviction(2, [&] { (void)ReadFile(P(Name(0))); });
  EXPECT_TRUE(Exists(Name(0)));
  EXPECT_TRUE(Gone(Name(1)));
  EXPECT_EQ(ReadFile(P(Name(0))), RandomBytes(kFile, 0));
}

TEST_F(EvictionMountTest, FifoEvictsTheOldestEvenWhenRead) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  Remount({"--eviction", "fifo"});
  WriteFile(P(Name(0)), RandomBytes(kFile, 0));
  WriteFile(P(Name(1)), RandomBytes(kFile, 1));
  FillUntilEviction(2, [&] { (void)ReadFile(P(Name(0))); });
  EXPECT_TRUE(Gone(Name(0)));
}

TEST_F(EvictionMountTest, AnEvictedFileOpenForReadingStaysReadable) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  Remount({"--eviction", "fifo"});
  const std::string want = RandomBytes(kFile, 0);
  WriteFile(P(Name(0)), want);
  int fd = ::open(P(Name(0)).c_str(), O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0);
  FillUntilEviction(1);
  EXPECT_TRUE(Gone(Name(0)));
  std::string got(kFile, '\0');
  void* buf = nullptr;
  ASSERT_EQ(posix_memalign(&buf, 4096, kFile), 0);
  EXPECT_EQ(::pread(fd, buf, kFile, 0), static_cast<ssize_t>(kFile));
  got.assign(static_cast<char*>(buf), kFile);
  free(buf);
  EXPECT_TRUE(got == want);
  EXPECT_EQ(::close(fd), 0);
}

TEST_F(EvictionMountTest, PinnedFilesStayAcrossEvictionAndRestart) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  Remount({"--eviction", "fifo"});
  const std::string c0 = P(Name(0));
  WriteFile(c0, RandomBytes(kFile, 0));
  ASSERT_EQ(::setxattr(c0.c_str(), "user.kvfs.pin", "1", 1, 0), 0);
  EXPECT_EQ(::setxattr(c0.c_str(), "user.kvfs.pin", "yes", 3, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  char v[8] = {};
  ASSERT_EQ(::getxattr(c0.c_str(), "user.kvfs.pin", v, sizeof v), 1);
  EXPECT_EQ(v[0], '1');
  const int next = FillUntilEviction(1);
  for (int i = next; i < next + 10; ++i) WriteFile(P(Name(i)), RandomBytes(kFile, i));
  EXPECT_TRUE(Exists(Name(0)));
  EXPECT_TRUE(Gone(Name(1)));
  // An explicit eviction of a pinned file is refused.
  EXPECT_EQ(::setxattr(c0.c_str(), "user.kvfs.evict", "1", 1, 0), -1);
  EXPECT_EQ(errno, EPERM);
  // The pin is journaled: it survives a remount.
  Stop();
  Start({"--eviction", "fifo", "--capacity", "64M"});
  std::memset(v, 0, sizeof v);
  ASSERT_EQ(::getxattr(c0.c_str(), "user.kvfs.pin", v, sizeof v), 1);
  EXPECT_EQ(v[0], '1');
  EXPECT_EQ(ReadFile(c0), RandomBytes(kFile, 0));
  // Unpinned, it can be evicted on request, and that counts as an eviction.
  const uint64_t before = Evictions();
  ASSERT_EQ(::setxattr(c0.c_str(), "user.kvfs.pin", "0", 1, 0), 0);
  ASSERT_EQ(::setxattr(c0.c_str(), "user.kvfs.evict", "1", 1, 0), 0);
  EXPECT_TRUE(Gone(Name(0)));
  EXPECT_EQ(Evictions(), before + 1);
}

TEST_F(EvictionMountTest, WithEverythingPinnedAWriteFailsWithEnospc) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  Remount({});
  int err = 0;
  const std::string data = RandomBytes(kFile, 7);
  for (int i = 0; i < 30 && err == 0; ++i) {
    const std::string path = P(Name(i));
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    for (size_t off = 0; off < data.size() && err == 0; off += 1 << 20) {
      if (::pwrite(fd, data.data() + off, 1 << 20, static_cast<off_t>(off)) < 0) err = errno;
    }
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err == 0) {
      ASSERT_EQ(::setxattr(path.c_str(), "user.kvfs.pin", "1", 1, 0), 0);
    }
  }
  EXPECT_EQ(err, ENOSPC);
  // Only a file published but not pinned yet could be evicted; the pinned ones stay.
  EXPECT_TRUE(Exists(Name(0)));
  EXPECT_TRUE(Exists(Name(1)));
  // The daemon keeps serving what it has.
  EXPECT_EQ(ReadFile(P(Name(0))), data);
}

TEST_F(EvictionMountTest, KvfsctlPinUnpinEvict) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  WriteFile(P("a"), RandomBytes(kFile, 1));
  const std::string ctl = std::string(KVFSCTL_BIN);
  std::string out;
  EXPECT_EQ(Shell(ctl + " pin " + P("a"), &out), 0) << out;
  char v[4] = {};
  ASSERT_EQ(::getxattr(P("a").c_str(), "user.kvfs.pin", v, sizeof v), 1);
  EXPECT_EQ(v[0], '1');
  EXPECT_EQ(Shell(ctl + " evict " + P("a") + " 2>&1", &out), 1);
  EXPECT_NE(out.find("pinned"), std::string::npos) << out;
  EXPECT_EQ(Shell(ctl + " unpin " + P("a") + " --json", &out), 0) << out;
  EXPECT_NE(out.find("\"ok\": true"), std::string::npos) << out;
  EXPECT_EQ(Shell(ctl + " evict " + P("a"), &out), 0) << out;
  EXPECT_TRUE(Gone("a"));
  EXPECT_EQ(Shell(ctl + " pin " + base_ + " 2>&1", &out), 2) << out;
}

// Sets user.kvfs.parent on `child` (a name in the same directory, or a path from the root).
int SetParent(const std::string& child, const std::string& parent) {
  return ::setxattr(child.c_str(), "user.kvfs.parent", parent.data(), parent.size(), 0);
}
std::string GetParent(const std::string& path) {
  char v[256] = {};
  ssize_t n = ::getxattr(path.c_str(), "user.kvfs.parent", v, sizeof v);
  return n < 0 ? "errno " + std::to_string(errno) : std::string(v, static_cast<size_t>(n));
}

TEST_F(EvictionMountTest, LfuKeepsTheFileReadOftenEvenWhenOlder) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  Remount({"--eviction", "lfu"});
  WriteFile(P(Name(0)), RandomBytes(kFile, 0));
  for (int i = 0; i < 5; ++i) (void)ReadFile(P(Name(0)));  // read often, long ago
  WriteFile(P(Name(1)), RandomBytes(kFile, 1));            // newer, never read
  FillUntilEviction(2);
  EXPECT_TRUE(Gone(Name(1)));
  EXPECT_TRUE(Exists(Name(0)));  // LRU would have taken it first
}

TEST_F(EvictionMountTest, ParentXattrSetsGetsAndRejectsAMissingParent) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not journal links";
  ASSERT_EQ(::mkdir(P("m").c_str(), 0755), 0);
  WriteFile(P("m/a"), RandomBytes(4096, 1));
  WriteFile(P("m/b"), RandomBytes(4096, 2));
  WriteFile(P("c"), RandomBytes(4096, 3));
  EXPECT_EQ(GetParent(P("m/b")), "errno " + std::to_string(ENODATA));
  ASSERT_EQ(SetParent(P("m/b"), "a"), 0);  // a name: same directory
  EXPECT_EQ(GetParent(P("m/b")), "a");
  ASSERT_EQ(SetParent(P("c"), "/m/b"), 0);  // a path from the mount root
  EXPECT_EQ(GetParent(P("c")), "/m/b");
  errno = 0;
  EXPECT_EQ(SetParent(P("m/b"), "nosuch"), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(SetParent(P("m/b"), "/m"), -1);  // a directory is no chunk
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(SetParent(P("m/b"), "b"), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(GetParent(P("m/b")), "a");  // failed sets changed nothing
  // The link names the chunk, not the name: it follows a rename of the parent.
  ASSERT_EQ(::rename(P("m/a").c_str(), P("m/a2").c_str()), 0);
  EXPECT_EQ(GetParent(P("m/b")), "a2");
  // Set on a file still being written (fsetxattr before close), it goes out with the publish.
  int fd = ::open(P("m/d.tmp").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "x", 1), 1);
  ASSERT_EQ(::fsetxattr(fd, "user.kvfs.parent", "b", 1, 0), 0);
  ASSERT_EQ(::close(fd), 0);
  ASSERT_EQ(::rename(P("m/d.tmp").c_str(), P("m/d").c_str()), 0);
  EXPECT_EQ(GetParent(P("m/d")), "b");
  ASSERT_EQ(SetParent(P("m/d"), ""), 0);  // empty clears it
  EXPECT_EQ(GetParent(P("m/d")), "errno " + std::to_string(ENODATA));
  // Journaled: the links survive a restart.
  Stop();
  Start();
  EXPECT_EQ(GetParent(P("m/b")), "a2");
  EXPECT_EQ(GetParent(P("c")), "/m/b");
  EXPECT_EQ(GetParent(P("m/d")), "errno " + std::to_string(ENODATA));
}

TEST_F(EvictionMountTest, PrefixEvictsAChainTailFirstAcrossARestart) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  // Each eviction frees about two 4 MiB files.
  const std::vector<std::string> opts = {"--eviction", "prefix",          "--high-watermark",
                                         "0.9",        "--low-watermark", "0.85"};
  Remount(opts);
  // A chain head <- mid <- tail, linked after the publish as a connector would.
  WriteFile(P("head"), RandomBytes(kFile, 100));
  WriteFile(P("mid"), RandomBytes(kFile, 101));
  WriteFile(P("tail"), RandomBytes(kFile, 102));
  ASSERT_EQ(SetParent(P("mid"), "head"), 0);
  ASSERT_EQ(SetParent(P("tail"), "mid"), 0);
  // The policy state (the chain order) and the links are kept across a restart.
  Stop();
  std::vector<std::string> again = opts;
  again.insert(again.end(), {"--capacity", "64M"});
  Start(again);
  EXPECT_EQ(GetParent(P("tail")), "mid");
  FillUntilEviction(0);
  // LRU would take the oldest (the head) first; prefix takes the chain from its tail.
  EXPECT_TRUE(Gone("tail"));
  EXPECT_TRUE(Exists("head"));
  EXPECT_EQ(ReadFile(P("head")), RandomBytes(kFile, 100));
}

TEST_F(EvictionMountTest, PrefixEvictsANeverReadFileBeforeAReReadOne) {
  if (memory_store()) GTEST_SKIP() << "the memory store does not evict";
  Remount({"--eviction", "prefix", "--high-watermark", "0.9", "--low-watermark", "0.85"});
  WriteFile(P("reread"), RandomBytes(kFile, 200));
  WriteFile(P("once"), RandomBytes(kFile, 201));
  // Each request re-reads "reread", then writes a new block: the block a request wrote last
  // before the next one read is its tail, never read again.
  (void)ReadFile(P("reread"));
  FillUntilEviction(0, [&] { (void)ReadFile(P("reread")); });
  EXPECT_TRUE(Gone("once"));
  EXPECT_TRUE(Exists("reread"));
}

TEST_F(EvictionMountTest, RejectsBadWatermarks) {
  std::string out;
  EXPECT_EQ(
      Shell(std::string(KVFS_BIN) + " " + mnt_ + " --high-watermark 0.5 --low-watermark 0.7 2>&1",
            &out),
      2);
  EXPECT_NE(out.find("--low-watermark"), std::string::npos) << out;
  EXPECT_EQ(Shell(std::string(KVFS_BIN) + " " + mnt_ + " --eviction random 2>&1", &out), 2);
}

}  // namespace
}  // namespace kvfs::fs::testing
