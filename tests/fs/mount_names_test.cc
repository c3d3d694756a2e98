// Namespace operations through the mount: rename in all its forms, directories, streaming
// readdir of a large directory, symlinks, name limits, the hidden control directory.
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <set>
#include <unordered_map>

#include "mount_fixture.h"

namespace kvfs::fs::testing {
namespace {

using NamesTest = MountTest;

int Renameat2(const std::string& a, const std::string& b, unsigned flags) {
  return static_cast<int>(syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), flags));
}

ino_t Ino(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST_F(NamesTest, PublishByTempFileAndRenameOverExisting) {
  WriteFile(P("chunk"), "old");
  int fd = open(P("chunk").c_str(), O_RDONLY);  // a reader of the old version
  ASSERT_GE(fd, 0);
  WriteFile(P("chunk.tmp.123.456"), "new", O_WRONLY | O_CREAT | O_EXCL);
  ino_t tmp_ino = Ino(P("chunk.tmp.123.456"));
  ASSERT_EQ(rename(P("chunk.tmp.123.456").c_str(), P("chunk").c_str()), 0);
  EXPECT_EQ(Ino(P("chunk")), tmp_ino);
  EXPECT_EQ(ReadFile(P("chunk")), "new");
  EXPECT_NE(access(P("chunk.tmp.123.456").c_str(), F_OK), 0);
  char buf[8] = {};
  ASSERT_EQ(pread(fd, buf, sizeof buf, 0), 3);
  EXPECT_EQ(std::string(buf, 3), "old");
  close(fd);
}

TEST_F(NamesTest, RenameAcrossDirectoriesAndWholeDirectories) {
  ASSERT_EQ(mkdir(P("tmpdir").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(P("final").c_str(), 0755), 0);
  WriteFile(P("tmpdir/x"), "x");
  ASSERT_EQ(rename(P("tmpdir/x").c_str(), P("final/x").c_str()), 0);
  EXPECT_EQ(ReadFile(P("final/x")), "x");
  // A whole directory moves with its contents.
  ASSERT_EQ(mkdir(P("d1").c_str(), 0755), 0);
  WriteFile(P("d1/a"), "A");
  ASSERT_EQ(mkdir(P("d1/sub").c_str(), 0755), 0);
  WriteFile(P("d1/sub/b"), "B");
  ASSERT_EQ(rename(P("d1").c_str(), P("final/d2").c_str()), 0);
  EXPECT_EQ(ReadFile(P("final/d2/a")), "A");
  EXPECT_EQ(ReadFile(P("final/d2/sub/b")), "B");
  // Over an empty directory: allowed; over a non-empty one: ENOTEMPTY.
  ASSERT_EQ(mkdir(P("empty").c_str(), 0755), 0);
  ASSERT_EQ(rename(P("final/d2").c_str(), P("empty").c_str()), 0);
  EXPECT_EQ(ReadFile(P("empty/a")), "A");
  EXPECT_EQ(rename(P("final").c_str(), P("empty").c_str()), -1);
  EXPECT_TRUE(errno == ENOTEMPTY || errno == EEXIST);
  // Into itself: EINVAL.
  EXPECT_EQ(rename(P("empty").c_str(), P("empty/sub/inside").c_str()), -1);
  EXPECT_EQ(errno, EINVAL);
  // File over directory and directory over file.
  EXPECT_EQ(rename(P("final/x").c_str(), P("empty").c_str()), -1);
  EXPECT_EQ(errno, EISDIR);
  EXPECT_EQ(rename(P("empty").c_str(), P("final/x").c_str()), -1);
  EXPECT_EQ(errno, ENOTDIR);
}

TEST_F(NamesTest, RenameNoreplaceAndExchange) {
  WriteFile(P("a"), "A");
  WriteFile(P("b"), "B");
  EXPECT_EQ(Renameat2(P("a"), P("b"), RENAME_NOREPLACE), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(Renameat2(P("a"), P("c"), RENAME_NOREPLACE), 0);
  EXPECT_EQ(ReadFile(P("c")), "A");
  ASSERT_EQ(Renameat2(P("c"), P("b"), RENAME_EXCHANGE), 0);
  EXPECT_EQ(ReadFile(P("c")), "B");
  EXPECT_EQ(ReadFile(P("b")), "A");
}

TEST_F(NamesTest, MkdirRmdir) {
  ASSERT_EQ(mkdir(P("d").c_str(), 0755), 0);
  EXPECT_EQ(mkdir(P("d").c_str(), 0755), -1);
  EXPECT_EQ(errno, EEXIST);
  ASSERT_EQ(mkdir(P("d/e").c_str(), 0755), 0);
  WriteFile(P("d/e/f"), "f");
  EXPECT_EQ(rmdir(P("d").c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
  EXPECT_EQ(rmdir(P("d/e/f").c_str()), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(unlink(P("d/e").c_str()), -1);
  EXPECT_EQ(errno, EISDIR);
  ASSERT_EQ(unlink(P("d/e/f").c_str()), 0);
  ASSERT_EQ(rmdir(P("d/e").c_str()), 0);
  ASSERT_EQ(rmdir(P("d").c_str()), 0);
  EXPECT_NE(access(P("d").c_str(), F_OK), 0);
}

TEST_F(NamesTest, ReaddirStreamsHundredThousandEntries) {
  // Creating 100k names is the slow part: publish them with durability=async.
  Stop();
  Start({"--durability", "async"});
  constexpr int kFiles = 100000;
  ASSERT_EQ(mkdir(P("flat").c_str(), 0755), 0);
  for (int i = 0; i < kFiles; ++i) {
    std::string name = P("flat/chunk_" + std::to_string(i));
    ASSERT_EQ(mknod(name.c_str(), S_IFREG | 0644, 0), 0) << name << ": " << strerror(errno);
  }
  int fd = open(P("flat").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  std::unordered_map<std::string, int> seen;
  char buf[4096];  // small replies: the listing must come in many pieces
  int calls = 0;
  while (true) {
    long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    ASSERT_GE(n, 0) << strerror(errno);
    if (n == 0) break;
    ++calls;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<struct dirent64*>(buf + off);
      ++seen[d->d_name];
      off += d->d_reclen;
    }
  }
  close(fd);
  EXPECT_GT(calls, 100);
  EXPECT_EQ(seen.size(), static_cast<size_t>(kFiles + 2));
  int dup = 0, missing = 0;
  for (int i = 0; i < kFiles; ++i) {
    auto it = seen.find("chunk_" + std::to_string(i));
    if (it == seen.end())
      ++missing;
    else if (it->second != 1)
      ++dup;
  }
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(dup, 0);
}

TEST_F(NamesTest, SymlinkAndReadlink) {
  WriteFile(P("target"), "T");
  ASSERT_EQ(symlink("target", P("link").c_str()), 0);
  char buf[64] = {};
  ASSERT_EQ(readlink(P("link").c_str(), buf, sizeof buf), 6);
  EXPECT_STREQ(buf, "target");
  EXPECT_EQ(ReadFile(P("link")), "T");
  struct stat st;
  ASSERT_EQ(lstat(P("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(st.st_size, 6);
  ASSERT_EQ(symlink("/nowhere", P("dangling").c_str()), 0);
  EXPECT_NE(access(P("dangling").c_str(), F_OK), 0);
}

TEST_F(NamesTest, NameLimits) {
  std::string long_name(256, 'n');
  EXPECT_EQ(open(P(long_name).c_str(), O_WRONLY | O_CREAT, 0644), -1);
  EXPECT_EQ(errno, ENAMETOOLONG);
  EXPECT_EQ(mkdir(P(long_name).c_str(), 0755), -1);
  EXPECT_EQ(errno, ENAMETOOLONG);
  WriteFile(P(std::string(255, 'm')), "ok");
  EXPECT_EQ(ReadFile(P(std::string(255, 'm'))), "ok");
  ASSERT_EQ(link(P(std::string(255, 'm')).c_str(), P("hard").c_str()), 0);
  EXPECT_EQ(ReadFile(P("hard")), "ok");
  EXPECT_EQ(link(P("hard").c_str(), P(long_name).c_str()), -1);
  EXPECT_EQ(errno, ENAMETOOLONG);
  ASSERT_EQ(mknod(P("node").c_str(), S_IFREG | 0640, 0), 0);
  struct stat st;
  ASSERT_EQ(stat(P("node").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST_F(NamesTest, ControlDirectoryIsHiddenButReachable) {
  WriteFile(P("visible"), "v");
  DIR* d = opendir(mnt_.c_str());
  ASSERT_NE(d, nullptr);
  std::set<std::string> names;
  while (dirent* e = readdir(d)) names.insert(e->d_name);
  closedir(d);
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "visible"}));
  struct stat st;
  ASSERT_EQ(stat(P(".kvfs").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(mkdir(P(".kvfs").c_str(), 0755), -1);
  EXPECT_EQ(unlink(P(".kvfs/status").c_str()), -1);
  std::string out;
  ASSERT_EQ(Shell("find '" + mnt_ + "' | wc -l", &out), 0);
  EXPECT_EQ(std::stoi(out), 2);
}

}  // namespace
}  // namespace kvfs::fs::testing
