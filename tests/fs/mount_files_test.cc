// File data through the mount: publish at close, version isolation, open flags, truncate,
// fallocate, mmap, times, statfs, and persistence across a remount.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "mount_fixture.h"

namespace kvfs::fs::testing {
namespace {

using FilesTest = MountTest;

TEST_F(FilesTest, WriteCloseReadBack) {
  std::string data = RandomBytes(3 * 1024 * 1024 + 123, 1);
  WriteFile(P("chunk"), data);
  EXPECT_EQ(ReadFile(P("chunk")), data);
  struct stat st;
  ASSERT_EQ(stat(P("chunk").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  EXPECT_GE(st.st_blocks * 512, st.st_size) << "du would under-count";
  EXPECT_TRUE(S_ISREG(st.st_mode));
  // Reads at offset 4096 and of the tail.
  int fd = open(P("chunk").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string buf(100, '\0');
  ASSERT_EQ(pread(fd, buf.data(), 100, 4096), 100);
  EXPECT_EQ(buf, data.substr(4096, 100));
  ASSERT_EQ(pread(fd, buf.data(), 100, static_cast<off_t>(data.size() - 50)), 50);
  EXPECT_EQ(buf.substr(0, 50), data.substr(data.size() - 50));
  close(fd);
}

TEST_F(FilesTest, DuCountsStoredDataNotHoles) {
  // `truncate -s 1G` stores nothing; st_blocks said 1 GiB, so du disagreed with df by the
  // whole size of every sparse file.
  if (memory_store()) GTEST_SKIP() << "the in-memory store keeps no extents";
  const std::string hole = P("hole");
  ASSERT_EQ(::truncate(hole.c_str(), 0), -1);  // does not exist yet
  int fd = ::open(hole.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t{1} << 30), 0);
  ASSERT_EQ(::close(fd), 0);
  struct stat st;
  ASSERT_EQ(::stat(hole.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, off_t{1} << 30);
  EXPECT_EQ(st.st_blocks, 0);
  // A few bytes in the middle: one segment's extent, not the size.
  fd = ::open(hole.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "mid", 3, off_t{500} << 20), 3);
  ASSERT_EQ(::close(fd), 0);
  ASSERT_EQ(::stat(hole.c_str(), &st), 0);
  EXPECT_GT(st.st_blocks, 0);
  EXPECT_LE(st.st_blocks * 512, 2 << 20);
  // Dense data counts at least its size.
  WriteFile(P("dense"), RandomBytes(3 << 20, 7));
  ASSERT_EQ(::stat(P("dense").c_str(), &st), 0);
  EXPECT_GE(st.st_blocks * 512, 3 << 20);
}

TEST_F(FilesTest, ReaderOpenedBeforeCloseSeesOldVersion) {
  WriteFile(P("f"), "old content");
  int w = open(P("f").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(w, 0);
  ASSERT_EQ(write(w, "NEW", 3), 3);
  int r = open(P("f").c_str(), O_RDONLY);
  ASSERT_GE(r, 0);
  char buf[64] = {};
  ssize_t n = pread(r, buf, sizeof buf, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? n : 0), "old content");
  ASSERT_EQ(close(w), 0);  // publishes
  EXPECT_EQ(ReadFile(P("f")), "NEW");
  n = pread(r, buf, sizeof buf, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? n : 0), "old content") << "open reader lost its version";
  close(r);
}

TEST_F(FilesTest, BrandNewFileIsEmptyToOthersUntilClose) {
  int w = open(P("new").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(w, 0);
  ASSERT_EQ(write(w, "payload", 7), 7);
  EXPECT_EQ(ReadFile(P("new")), "");
  ASSERT_EQ(close(w), 0);
  EXPECT_EQ(ReadFile(P("new")), "payload");
}

TEST_F(FilesTest, OpenExclusiveOnExistingFails) {
  WriteFile(P("x"), "1");
  EXPECT_EQ(open(P("x").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644), -1);
  EXPECT_EQ(errno, EEXIST);
  int fd = open(P("y").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  EXPECT_GE(fd, 0);
  close(fd);
}

TEST_F(FilesTest, TruncAppendAndOverwriteWithoutTrunc) {
  WriteFile(P("f"), "0123456789");
  WriteFile(P("f"), "ab", O_WRONLY);  // no O_TRUNC: copy-on-write of the published bytes
  EXPECT_EQ(ReadFile(P("f")), "ab23456789");
  WriteFile(P("f"), "XY", O_WRONLY | O_APPEND);
  EXPECT_EQ(ReadFile(P("f")), "ab23456789XY");
  WriteFile(P("f"), "t", O_WRONLY | O_TRUNC);
  EXPECT_EQ(ReadFile(P("f")), "t");
}

TEST_F(FilesTest, DirectIoAlignedAndUnaligned) {
  struct statvfs sv;
  ASSERT_EQ(statvfs(mnt_.c_str(), &sv), 0);
  ASSERT_EQ(sv.f_bsize, 4096u);
  const size_t len = 1 << 20;
  void* mem = nullptr;
  ASSERT_EQ(posix_memalign(&mem, sv.f_bsize, len), 0);
  std::string data = RandomBytes(len, 7);
  std::memcpy(mem, data.data(), len);
  int fd = open(P("direct").c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(write(fd, mem, len), static_cast<ssize_t>(len)) << strerror(errno);
  ASSERT_EQ(close(fd), 0);
  std::memset(mem, 0, len);
  fd = open(P("direct").c_str(), O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(read(fd, mem, len), static_cast<ssize_t>(len)) << strerror(errno);
  EXPECT_EQ(std::memcmp(mem, data.data(), len), 0);
  // An unaligned O_DIRECT read must not fail with EINVAL after a successful open.
  char small[10];
  EXPECT_EQ(pread(fd, small, 10, 3), 10) << strerror(errno);
  EXPECT_EQ(std::string(small, 10), data.substr(3, 10));
  close(fd);
  // Overwrite of an existing file with O_WRONLY|O_CREAT|O_DIRECT (no O_TRUNC).
  fd = open(P("direct").c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  ASSERT_GE(fd, 0);
  std::memset(mem, 'z', 4096);
  ASSERT_EQ(pwrite(fd, mem, 4096, 4096), 4096) << strerror(errno);
  ASSERT_EQ(close(fd), 0);
  std::string expect = data;
  std::memset(expect.data() + 4096, 'z', 4096);
  EXPECT_EQ(ReadFile(P("direct")), expect);
  free(mem);
}

TEST_F(FilesTest, UnlinkWhileOpenKeepsWorking) {
  WriteFile(P("gone"), "abc");
  int fd = open(P("gone").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  int r = open(P("gone").c_str(), O_RDONLY);
  ASSERT_GE(r, 0);
  ASSERT_EQ(unlink(P("gone").c_str()), 0);
  struct stat st;
  EXPECT_NE(stat(P("gone").c_str(), &st), 0);
  ASSERT_EQ(pwrite(fd, "def", 3, 3), 3);
  char buf[16] = {};
  ASSERT_EQ(pread(fd, buf, sizeof buf, 0), 6);
  EXPECT_EQ(std::string(buf, 6), "abcdef");
  ASSERT_EQ(pread(r, buf, sizeof buf, 0), 3);
  EXPECT_EQ(std::string(buf, 3), "abc");
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_nlink, 0u);
  EXPECT_EQ(close(fd), 0);
  EXPECT_EQ(close(r), 0);
  EXPECT_NE(access(P("gone").c_str(), F_OK), 0);
}

TEST_F(FilesTest, TruncateAndFtruncate) {
  WriteFile(P("t"), "0123456789");
  ASSERT_EQ(truncate(P("t").c_str(), 4), 0);  // a closed file: published at once
  EXPECT_EQ(ReadFile(P("t")), "0123");
  // The reader's RELEASE comes after its close returned: until it does, that reader still owns
  // the page cache, and the writer's fstat below reports its size (docs/fs.md, "Sizes while
  // writing"; 2 runs in 1,200 under load did).
  WaitNoOpenFiles();
  int fd = open(P("t").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8), 0);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 8);
  ASSERT_EQ(close(fd), 0);
  EXPECT_EQ(ReadFile(P("t")), std::string("0123\0\0\0\0", 8));
}

TEST_F(FilesTest, TruncateByPathAfterAWritersCloseIsSeenAtOnce) {
  // The kernel sends RELEASE after close(2) returns, so a write session outlives its writer's
  // close for a moment (under load, long enough for TruncateAndFtruncate to read the old bytes
  // 2 times in 900). A second writable handle, open and idle, holds the session here for good.
  int writer = open(P("tc").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(write(writer, "0123456789", 10), 10);
  int idle = open(P("tc").c_str(), O_WRONLY);
  ASSERT_GE(idle, 0);
  ASSERT_EQ(close(writer), 0);  // published; the session stays (idle holds it)
  ASSERT_EQ(truncate(P("tc").c_str(), 4), 0);
  struct stat st;
  ASSERT_EQ(stat(P("tc").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4);
  EXPECT_EQ(ReadFile(P("tc")), "0123");
  // The idle handle writes on top of the truncated file, as on any file system.
  ASSERT_EQ(pwrite(idle, "X", 1, 0), 1);
  ASSERT_EQ(close(idle), 0);
  EXPECT_EQ(ReadFile(P("tc")), "X123");
}

TEST_F(FilesTest, TruncatesThatKeepTheSizeStillMoveMtime) {
  // open(2) marks mtime and ctime for update on O_TRUNC of an existing file, size changed or
  // not; the kernel sends that truncate as a size alone, as it sends truncate(2)'s (for which
  // ext4 moves both too). Old times first, so that "moved" needs no sleep.
  WriteFile(P("empty"), "");
  WriteFile(P("four"), "0123");
  WaitNoOpenFiles();
  const struct timespec old[2] = {{1000, 0}, {2000, 0}};
  for (const char* name : {"empty", "four"}) {
    ASSERT_EQ(utimensat(AT_FDCWD, P(name).c_str(), old, 0), 0);
  }
  int fd = open(P("empty").c_str(), O_RDONLY | O_TRUNC);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(close(fd), 0);
  ASSERT_EQ(truncate(P("four").c_str(), 4), 0);
  auto check = [&](const char* when) {
    for (const char* name : {"empty", "four"}) {
      struct stat st;
      ASSERT_EQ(stat(P(name).c_str(), &st), 0);
      EXPECT_GT(st.st_mtim.tv_sec, 1000000000) << name << " " << when;
      EXPECT_GE(st.st_ctim.tv_sec, st.st_mtim.tv_sec) << name << " " << when;
    }
    EXPECT_EQ(ReadFile(P("four")), "0123");
  };
  check("after the truncates");
  if (memory_store()) return;  // persists nothing
  ASSERT_EQ(Stop(), 0) << DaemonLog();
  Start();
  check("after a restart");
}

TEST_F(FilesTest, CloseMovesNoTimes) {
  // A write or truncate moves mtime and ctime to one time; the close that publishes it moves
  // neither, as on ext4 (ctime moved at every publish, so it ended later than mtime, and a
  // truncate set the two a few hundred nanoseconds apart).
  auto same = [](const struct timespec& a, const struct timespec& b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
  };
  auto check = [&](const char* what, int flags, const std::function<void(int)>& change,
                   off_t size) {
    int fd = open(P("ct").c_str(), flags, 0644);
    ASSERT_GE(fd, 0) << what << ": " << strerror(errno);
    change(fd);
    struct stat before;
    ASSERT_EQ(fstat(fd, &before), 0);
    EXPECT_TRUE(same(before.st_ctim, before.st_mtim)) << what;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a later close would show
    ASSERT_EQ(close(fd), 0);
    WaitNoOpenFiles();
    struct stat after;
    ASSERT_EQ(stat(P("ct").c_str(), &after), 0);
    EXPECT_EQ(after.st_size, size) << what;
    EXPECT_TRUE(same(after.st_mtim, before.st_mtim)) << what << ": mtime moved at close";
    EXPECT_TRUE(same(after.st_ctim, before.st_ctim)) << what << ": ctime moved at close";
  };
  auto write3 = [](int fd) { ASSERT_EQ(write(fd, "abc", 3), 3); };
  auto truncate1 = [](int fd) { ASSERT_EQ(ftruncate(fd, 1), 0); };
  check("write", O_WRONLY | O_CREAT | O_TRUNC, write3, 3);
  check("ftruncate", O_WRONLY, truncate1, 1);
}

TEST_F(FilesTest, FallocateExtendsOrSaysUnsupported) {
  int fd = open(P("fa").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const struct timespec old[2] = {{1000, 0}, {2000, 0}};
  ASSERT_EQ(futimens(fd, old), 0);
  ASSERT_EQ(fallocate(fd, 0, 0, 1 << 20), 0) << strerror(errno);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_GT(st.st_mtim.tv_sec, 1000000000);  // as a write moves it (ext4 too)
  EXPECT_EQ(fallocate(fd, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE, 0, 4096), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ASSERT_EQ(close(fd), 0);
  EXPECT_EQ(ReadFile(P("fa")), std::string(1 << 20, '\0'));
}

// What a reader's mapping of `path` shows, mapped with `flags` (MAP_SHARED or MAP_PRIVATE);
// errno's name when mmap fails.
std::string MappedBytes(const std::string& path, int flags, int open_flags = O_RDONLY) {
  int fd = open(path.c_str(), open_flags);
  if (fd < 0) return std::string("open: ") + strerrorname_np(errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size == 0) {
    close(fd);
    return "fstat";
  }
  const size_t len = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, len, PROT_READ, flags, fd, 0);
  const int err = errno;
  close(fd);  // the mapping outlives the descriptor
  if (p == MAP_FAILED) return std::string("mmap: ") + strerrorname_np(err);
  std::string out(static_cast<const char*>(p), len);
  munmap(p, len);
  return out;
}

TEST_F(FilesTest, ReadOnlyMappingsWhereverTheKernelAllowsThem) {
  // A reader's MAP_SHARED mapping works on a handle that uses the page cache. Handles that
  // read around it (O_DIRECT, a reader while a writer has the file open, a reader within
  // kRewriteQuietSeconds of an in-place rewrite) get FUSE's direct I/O, on which this
  // kernel refuses MAP_SHARED (ENODEV) unless the file system negotiates
  // FUSE_DIRECT_IO_ALLOW_MMAP, which libfuse 3.14 cannot (docs/fs.md). MAP_PRIVATE, what the
  // connectors map with, works on every handle and shows the handle's version.
  const std::string v1 = RandomBytes(256 * 1024 + 5, 21);
  WriteFile(P("map"), v1);
  WaitNoOpenFiles();
  EXPECT_TRUE(MappedBytes(P("map"), MAP_SHARED) == v1);
  EXPECT_TRUE(MappedBytes(P("map"), MAP_PRIVATE) == v1);
  EXPECT_TRUE(MappedBytes(P("map"), MAP_PRIVATE, O_RDONLY | O_DIRECT) == v1);
  EXPECT_EQ(MappedBytes(P("map"), MAP_SHARED, O_RDONLY | O_DIRECT), "mmap: ENODEV");
  // A writer open in place: readers keep the published version, privately mapped.
  int w = open(P("map").c_str(), O_WRONLY);
  ASSERT_GE(w, 0);
  const std::string v2 = RandomBytes(v1.size(), 22);
  ASSERT_EQ(pwrite(w, v2.data(), v2.size(), 0), static_cast<ssize_t>(v2.size()));
  EXPECT_TRUE(MappedBytes(P("map"), MAP_PRIVATE) == v1);
  EXPECT_EQ(MappedBytes(P("map"), MAP_SHARED), "mmap: ENODEV");
  ASSERT_EQ(close(w), 0);
  WaitNoOpenFiles();
  // Rewritten in place a moment ago: the new version, privately mapped.
  EXPECT_TRUE(MappedBytes(P("map"), MAP_PRIVATE) == v2);
}

TEST_F(FilesTest, AReaderRightAfterAWritersCloseMapsTheFileShared) {
  // The kernel sends RELEASE after close(2) returns; a reader opening in between found the
  // session still writing, went around the page cache, and its MAP_SHARED mapping failed
  // with ENODEV (`write; close; mmap` 2-8 times in 2,000). A dup'd descriptor holds the
  // session open past the first close here, as a late RELEASE does.
  const std::string data = RandomBytes(64 * 1024 + 3, 23);
  int w = open(P("wc").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(w, 0);
  ASSERT_EQ(write(w, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  int w2 = dup(w);
  ASSERT_GE(w2, 0);
  ASSERT_EQ(close(w), 0);  // FLUSH publishes; the session lives on with w2
  std::string mapped;
  std::thread reader([&] { mapped = MappedBytes(P("wc"), MAP_SHARED); });
  usleep(20 * 1000);
  ASSERT_EQ(close(w2), 0);  // the RELEASE: the session ends
  reader.join();
  EXPECT_TRUE(mapped == data) << mapped.substr(0, 40);
}

TEST_F(FilesTest, MmapPrivatePopulateRead) {
  std::string data = RandomBytes(2 * 1024 * 1024 + 77, 3);
  WriteFile(P("m"), data);
  int fd = open(P("m").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* p = mmap(nullptr, data.size(), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ASSERT_NE(p, MAP_FAILED) << strerror(errno);
  EXPECT_EQ(std::memcmp(p, data.data(), data.size()), 0);
  munmap(p, data.size());
  close(fd);
}

TEST_F(FilesTest, MmapSharedWriteAfterFtruncate) {
  const size_t len = 256 * 1024;
  int fd = open(P("shared").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, len), 0);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED) << strerror(errno);
  std::string data = RandomBytes(len, 11);
  std::memcpy(p, data.data(), len);
  ASSERT_EQ(msync(p, len, MS_SYNC), 0);
  munmap(p, len);
  ASSERT_EQ(close(fd), 0);
  EXPECT_EQ(ReadFile(P("shared")), data);
}

TEST_F(FilesTest, UtimensatAndAtimeOnRead) {
  WriteFile(P("u"), "x");
  struct timespec ts[2] = {{1000, 1}, {2000, 2}};
  ASSERT_EQ(utimensat(AT_FDCWD, P("u").c_str(), ts, 0), 0);
  struct stat st;
  ASSERT_EQ(stat(P("u").c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec, 1000);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 2);
  struct timespec omit[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  ASSERT_EQ(utimensat(AT_FDCWD, P("u").c_str(), omit, 0), 0);
  ASSERT_EQ(stat(P("u").c_str(), &st), 0);
  EXPECT_GT(st.st_atim.tv_sec, 1000000000);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000);
  // A read moves atime forward again, and stat shows it.
  ASSERT_EQ(utimensat(AT_FDCWD, P("u").c_str(), ts, 0), 0);
  EXPECT_EQ(ReadFile(P("u")), "x");
  bool moved = false;
  for (int i = 0; i < 100 && !moved; ++i) {  // the attr invalidation is asynchronous
    ASSERT_EQ(stat(P("u").c_str(), &st), 0);
    moved = st.st_atim.tv_sec > 1000;
    if (!moved) usleep(10000);
  }
  EXPECT_TRUE(moved) << "atime not updated by a read";
  ASSERT_EQ(chmod(P("u").c_str(), 0600), 0);
  ASSERT_EQ(stat(P("u").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// Listing a directory and reading a symlink move their atime, as a read of a file does (POSIX;
// ext4 with relatime too). Before, neither did.
TEST_F(FilesTest, ReaddirAndReadlinkMoveAtime) {
  ASSERT_EQ(mkdir(P("listed").c_str(), 0755), 0);
  WriteFile(P("listed/f"), "x");
  ASSERT_EQ(symlink("listed/f", P("link").c_str()), 0);
  struct timespec ts[2] = {{1000, 0}, {2000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, P("listed").c_str(), ts, 0), 0);
  ASSERT_EQ(utimensat(AT_FDCWD, P("link").c_str(), ts, AT_SYMLINK_NOFOLLOW), 0);
  DIR* d = opendir(P("listed").c_str());
  ASSERT_NE(d, nullptr);
  while (readdir(d) != nullptr) {
  }
  closedir(d);
  char target[64];
  ASSERT_EQ(readlink(P("link").c_str(), target, sizeof target), 8);
  for (const char* name : {"listed", "link"}) {
    struct stat st;
    bool moved = false;
    for (int i = 0; i < 100 && !moved; ++i) {  // the attr invalidation is asynchronous
      ASSERT_EQ(lstat(P(name).c_str(), &st), 0);
      moved = st.st_atim.tv_sec > 1000;
      if (!moved) usleep(10000);
    }
    EXPECT_TRUE(moved) << name << ": atime not moved";
    EXPECT_EQ(st.st_mtim.tv_sec, 2000) << name;
  }
}

// chown(f, -1, -1) changes nothing but ctime, as on ext4 (the kernel sends a SETATTR that
// sets nothing). Before, ctime stayed.
TEST_F(FilesTest, ChownToTheSameOwnerMovesCtime) {
  WriteFile(P("owned"), "x");
  struct stat before;
  ASSERT_EQ(stat(P("owned").c_str(), &before), 0);
  usleep(20000);
  ASSERT_EQ(chown(P("owned").c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(-1)), 0);
  struct stat after;
  ASSERT_EQ(stat(P("owned").c_str(), &after), 0);
  EXPECT_GT(after.st_ctim.tv_sec * 1000000000LL + after.st_ctim.tv_nsec,
            before.st_ctim.tv_sec * 1000000000LL + before.st_ctim.tv_nsec);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_EQ(after.st_uid, before.st_uid);
  EXPECT_EQ(after.st_mode, before.st_mode);
}

// A reader that opens with O_NOATIME (a backup, a checksum scan) must not make a file look
// recently used to an atime-based evictor.
TEST_F(FilesTest, NoatimeReadLeavesAtime) {
  WriteFile(P("quiet"), "q");
  WriteFile(P("loud"), "l");
  struct timespec ts[2] = {{1000, 0}, {2000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, P("quiet").c_str(), ts, 0), 0);
  ASSERT_EQ(utimensat(AT_FDCWD, P("loud").c_str(), ts, 0), 0);
  int fd = open(P("quiet").c_str(), O_RDONLY | O_NOATIME);
  ASSERT_GE(fd, 0) << strerror(errno);
  char c = 0;
  ASSERT_EQ(read(fd, &c, 1), 1);
  EXPECT_EQ(c, 'q');
  ASSERT_EQ(close(fd), 0);
  // A plain read of the other file does move its atime; once stat shows that, the daemon has
  // handled both reads, so the quiet file's atime is final.
  EXPECT_EQ(ReadFile(P("loud")), "l");
  struct stat st;
  bool moved = false;
  for (int i = 0; i < 100 && !moved; ++i) {
    ASSERT_EQ(stat(P("loud").c_str(), &st), 0);
    moved = st.st_atim.tv_sec > 1000;
    if (!moved) usleep(10000);
  }
  ASSERT_TRUE(moved) << "atime not updated by a plain read";
  ASSERT_EQ(stat(P("quiet").c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec, 1000) << "an O_NOATIME read moved atime";
}

TEST_F(FilesTest, StatfsReflectsCapacity) {
  struct statvfs sv;
  ASSERT_EQ(statvfs(mnt_.c_str(), &sv), 0);
  EXPECT_EQ(sv.f_bsize, 4096u);
  EXPECT_EQ(sv.f_frsize, 4096u);
  EXPECT_EQ(sv.f_namemax, 255u);
  auto status = nlohmann::json::parse(ReadFile(P(".kvfs/status")));
  EXPECT_EQ(sv.f_blocks * sv.f_frsize, status["capacity_bytes"].get<uint64_t>() / 4096 * 4096);
  EXPECT_LE(sv.f_bavail, sv.f_blocks);
  EXPECT_GT(sv.f_bavail, 0u);
  if (!memory_store()) {
    EXPECT_LE(sv.f_blocks * 4096, 256ull << 20);
    EXPECT_GE(sv.f_blocks * 4096, 128ull << 20);
  }
}

TEST_F(FilesTest, RemountKeepsFilesByteExact) {
  if (memory_store()) GTEST_SKIP() << "the in-memory store persists nothing";
  std::string big = RandomBytes(5 * 1024 * 1024 + 17, 5);
  ASSERT_EQ(mkdir(P("a").c_str(), 0750), 0);
  ASSERT_EQ(mkdir(P("a/b").c_str(), 0755), 0);
  WriteFile(P("a/b/big"), big);
  WriteFile(P("small"), "small file");
  WriteFile(P("empty"), "");
  ASSERT_EQ(symlink("a/b/big", P("link").c_str()), 0);
  WriteFile(P("tmp"), "renamed");
  ASSERT_EQ(rename(P("tmp").c_str(), P("a/renamed").c_str()), 0);
  struct timespec ts[2] = {{1111, 0}, {2222, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, P("small").c_str(), ts, 0), 0);
  ASSERT_EQ(Stop(), 0) << DaemonLog();
  Start();
  EXPECT_EQ(ReadFile(P("a/b/big")), big);
  EXPECT_EQ(ReadFile(P("small")), "small file");
  EXPECT_EQ(ReadFile(P("empty")), "");
  EXPECT_EQ(ReadFile(P("a/renamed")), "renamed");
  EXPECT_NE(access(P("tmp").c_str(), F_OK), 0);
  char target[64] = {};
  ASSERT_GT(readlink(P("link").c_str(), target, sizeof target), 0);
  EXPECT_STREQ(target, "a/b/big");
  struct stat st;
  ASSERT_EQ(stat(P("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  ASSERT_EQ(stat(P("small").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 2222);
}

}  // namespace
}  // namespace kvfs::fs::testing
