// Hard links and special files through the mount: link(2) and nlink, unlink and rename of
// linked names, the space of a file freed only with its last name, eviction taking every name;
// FIFOs, Unix sockets and device nodes that work as such; directory link counts and set-group-ID
// directories; all of it across a restart.
#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "mount_fixture.h"

namespace kvfs::fs::testing {
namespace {

using LinksTest = MountTest;

struct stat Lstat(const std::string& path) {
  struct stat st;
  std::memset(&st, 0, sizeof st);
  if (lstat(path.c_str(), &st) != 0) st.st_ino = 0;
  return st;
}

uint64_t UsedBytes(const std::string& mnt) {
  struct statvfs sv;
  if (statvfs(mnt.c_str(), &sv) != 0) return ~0ull;
  return (sv.f_blocks - sv.f_bfree) * sv.f_frsize;
}

// d_type of each entry of `dir`, by name.
std::map<std::string, unsigned> Listing(const std::string& dir) {
  std::map<std::string, unsigned> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) out[e->d_name] = e->d_type;
  closedir(d);
  return out;
}

TEST_F(LinksTest, HardLinksShareOneFile) {
  const std::string data = RandomBytes(3 << 20, 1);
  WriteFile(P("a"), data);
  ASSERT_EQ(mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(link(P("a").c_str(), P("b").c_str()), 0) << strerror(errno);
  ASSERT_EQ(link(P("a").c_str(), P("d/c").c_str()), 0) << strerror(errno);
  const struct stat a = Lstat(P("a"));
  EXPECT_EQ(a.st_nlink, 3u);
  EXPECT_EQ(Lstat(P("b")).st_ino, a.st_ino);
  EXPECT_EQ(Lstat(P("d/c")).st_ino, a.st_ino);
  EXPECT_EQ(ReadFile(P("d/c")), data);

  // Errors: an existing name, a directory, a missing source, the control directory.
  EXPECT_EQ(link(P("a").c_str(), P("b").c_str()), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(link(P("d").c_str(), P("d2").c_str()), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(link(P("missing").c_str(), P("m2").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(link(P("a").c_str(), P(".kvfs/a").c_str()), -1);
  EXPECT_EQ(link(P("a").c_str(), P(".kvfs").c_str()), -1);
  EXPECT_EQ(errno, EEXIST);

  // A new version written through one name is what every name reads.
  const std::string v2 = RandomBytes(1 << 20, 2);
  WriteFile(P("b"), v2);
  EXPECT_EQ(ReadFile(P("a")), v2);
  EXPECT_EQ(ReadFile(P("d/c")), v2);
  EXPECT_EQ(Lstat(P("d/c")).st_size, static_cast<off_t>(v2.size()));

  // Renaming one name keeps the others; renaming a name onto another name of the same file
  // does nothing (POSIX).
  ASSERT_EQ(rename(P("b").c_str(), P("d/b2").c_str()), 0);
  EXPECT_EQ(Lstat(P("d/b2")).st_nlink, 3u);
  ASSERT_EQ(rename(P("a").c_str(), P("d/c").c_str()), 0);
  EXPECT_EQ(Lstat(P("a")).st_nlink, 3u);
  EXPECT_EQ(Lstat(P("d/c")).st_ino, a.st_ino);

  // The space goes with the last name, not before.
  const uint64_t used = UsedBytes(mnt_);
  ASSERT_EQ(unlink(P("a").c_str()), 0);
  ASSERT_EQ(unlink(P("d/b2").c_str()), 0);
  EXPECT_EQ(Lstat(P("d/c")).st_nlink, 1u);
  EXPECT_EQ(ReadFile(P("d/c")), v2);
  if (memory_store()) return;  // it keeps no space accounts
  EXPECT_EQ(UsedBytes(mnt_), used);
  ASSERT_EQ(unlink(P("d/c").c_str()), 0);
  // The read above closed the file, but the kernel sends its RELEASE after close(2) returns
  // (docs/fs.md, "Free space follows unlink"): the space may free a moment after the unlink.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (UsedBytes(mnt_) >= used && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_LT(UsedBytes(mnt_), used);
}

TEST_F(LinksTest, LinksAreBounded) {
  // Each link journals the record with all its names: past the bound link(2) says EMLINK, and
  // the names made so far all work.
  WriteFile(P("many"), "m");
  int made = 1;
  for (; made < 5000; ++made) {
    if (link(P("many").c_str(), P("l" + std::to_string(made)).c_str()) != 0) break;
  }
  EXPECT_EQ(errno, EMLINK);
  EXPECT_GE(made, 1000);
  EXPECT_LT(made, 5000);
  EXPECT_EQ(Lstat(P("many")).st_nlink, static_cast<nlink_t>(made));
  EXPECT_EQ(ReadFile(P("l" + std::to_string(made - 1))), "m");
}

TEST_F(LinksTest, RenameOverALinkedNameKeepsTheOtherName) {
  WriteFile(P("dst"), "old");
  ASSERT_EQ(link(P("dst").c_str(), P("dstlnk").c_str()), 0);
  WriteFile(P("src"), "new");
  ASSERT_EQ(rename(P("src").c_str(), P("dst").c_str()), 0);
  EXPECT_EQ(ReadFile(P("dst")), "new");
  EXPECT_EQ(ReadFile(P("dstlnk")), "old");
  EXPECT_EQ(Lstat(P("dstlnk")).st_nlink, 1u);
  // RENAME_EXCHANGE of a linked name swaps only that name.
  ASSERT_EQ(link(P("dstlnk").c_str(), P("other").c_str()), 0);
  ASSERT_EQ(renameat2(AT_FDCWD, P("other").c_str(), AT_FDCWD, P("dst").c_str(), RENAME_EXCHANGE), 0)
      << strerror(errno);
  EXPECT_EQ(ReadFile(P("dst")), "old");
  EXPECT_EQ(ReadFile(P("other")), "new");
  EXPECT_EQ(ReadFile(P("dstlnk")), "old");
  EXPECT_EQ(Lstat(P("dst")).st_nlink, 2u);
}

TEST_F(LinksTest, ALinkMadeWhileTheFileIsBeingWrittenIsPublishedWithIt) {
  int fd = open(P("w").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "partial", 7), 7);
  ASSERT_EQ(link(P("w").c_str(), P("w2").c_str()), 0) << strerror(errno);
  ASSERT_EQ(write(fd, "+rest", 5), 5);
  ASSERT_EQ(close(fd), 0);
  EXPECT_EQ(ReadFile(P("w2")), "partial+rest");
  if (memory_store()) return;  // it forgets everything at exit
  ASSERT_EQ(Stop(), 0);
  Start();
  EXPECT_EQ(ReadFile(P("w")), "partial+rest");
  EXPECT_EQ(ReadFile(P("w2")), "partial+rest");
  EXPECT_EQ(Lstat(P("w2")).st_nlink, 2u);
}

TEST_F(LinksTest, EvictingALinkedFileTakesEveryName) {
  if (memory_store()) GTEST_SKIP() << "eviction is the engine's";
  WriteFile(P("e"), RandomBytes(2 << 20, 3));
  ASSERT_EQ(mkdir(P("sub").c_str(), 0755), 0);
  ASSERT_EQ(link(P("e").c_str(), P("sub/e2").c_str()), 0);
  ASSERT_EQ(setxattr(P("sub/e2").c_str(), "user.kvfs.evict", "1", 1, 0), 0) << strerror(errno);
  EXPECT_NE(access(P("e").c_str(), F_OK), 0);
  EXPECT_NE(access(P("sub/e2").c_str(), F_OK), 0);
  EXPECT_TRUE(Listing(P("sub")).count("e2") == 0);
  ASSERT_EQ(Stop(), 0);
  Start();
  EXPECT_NE(access(P("e").c_str(), F_OK), 0);
  EXPECT_NE(access(P("sub/e2").c_str(), F_OK), 0);
}

TEST_F(LinksTest, FifosAndSocketsWork) {
  ASSERT_EQ(mkfifo(P("fifo").c_str(), 0644), 0) << strerror(errno);
  EXPECT_TRUE(S_ISFIFO(Lstat(P("fifo")).st_mode));
  std::thread writer([&] {
    int w = open(P("fifo").c_str(), O_WRONLY);
    if (w >= 0) {
      EXPECT_EQ(write(w, "through the pipe", 16), 16);
      close(w);
    }
  });
  int r = open(P("fifo").c_str(), O_RDONLY);
  ASSERT_GE(r, 0) << strerror(errno);
  char buf[32] = {};
  EXPECT_EQ(read(r, buf, sizeof buf), 16);
  EXPECT_STREQ(buf, "through the pipe");
  close(r);
  writer.join();

  const std::string path = P("sock");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, path.c_str());
  int srv = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_EQ(bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
  ASSERT_EQ(listen(srv, 1), 0);
  int cli = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_EQ(connect(cli, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
  int conn = accept(srv, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  EXPECT_EQ(send(cli, "ping", 4, 0), 4);
  EXPECT_EQ(recv(conn, buf, 4, 0), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
  close(conn);
  close(cli);
  close(srv);
  EXPECT_TRUE(S_ISSOCK(Lstat(path).st_mode));
  EXPECT_EQ(Listing(mnt_)["sock"], DT_SOCK);
  EXPECT_EQ(Listing(mnt_)["fifo"], DT_FIFO);
  // Special files hold no data and no space.
  EXPECT_EQ(Lstat(P("fifo")).st_blocks, 0);
}

TEST_F(LinksTest, SpecialFilesAndLinksSurviveARestart) {
  if (memory_store()) GTEST_SKIP() << "the memory store forgets everything at exit";
  const bool root = geteuid() == 0;  // device nodes need CAP_MKNOD
  ASSERT_EQ(mkfifo(P("f").c_str(), 0640), 0);
  ASSERT_EQ(mknod(P("s").c_str(), S_IFSOCK | 0600, 0), 0) << strerror(errno);
  if (root) {
    ASSERT_EQ(mknod(P("c").c_str(), S_IFCHR | 0644, makedev(1, 3)), 0) << strerror(errno);
    ASSERT_EQ(mknod(P("b").c_str(), S_IFBLK | 0600, makedev(8, 17)), 0) << strerror(errno);
    ASSERT_EQ(link(P("c").c_str(), P("c2").c_str()), 0);
  }
  ASSERT_EQ(link(P("f").c_str(), P("f2").c_str()), 0);
  WriteFile(P("file"), "linked");
  ASSERT_EQ(mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(link(P("file").c_str(), P("d/file").c_str()), 0);
  ASSERT_EQ(Stop(), 0);
  Start();
  EXPECT_TRUE(S_ISFIFO(Lstat(P("f")).st_mode));
  EXPECT_EQ(Lstat(P("f")).st_mode & 07777, 0640u);
  EXPECT_EQ(Lstat(P("f2")).st_ino, Lstat(P("f")).st_ino);
  EXPECT_EQ(Lstat(P("f")).st_nlink, 2u);
  EXPECT_TRUE(S_ISSOCK(Lstat(P("s")).st_mode));
  if (root) {
    const struct stat c = Lstat(P("c"));
    EXPECT_TRUE(S_ISCHR(c.st_mode));
    EXPECT_EQ(c.st_rdev, makedev(1, 3));
    EXPECT_EQ(c.st_nlink, 2u);
    const struct stat b = Lstat(P("b"));
    EXPECT_TRUE(S_ISBLK(b.st_mode));
    EXPECT_EQ(b.st_rdev, makedev(8, 17));
    // The mount is nodev (libfuse's default): a node can be made and listed, not opened, so a
    // device node on a shared cache directory gives nobody access to a device.
    EXPECT_EQ(open(P("c").c_str(), O_RDONLY), -1);
    EXPECT_EQ(errno, EACCES);
  }
  EXPECT_EQ(ReadFile(P("d/file")), "linked");
  EXPECT_EQ(Lstat(P("file")).st_nlink, 2u);
  // Unlinking the first name after a restart leaves the second one whole.
  ASSERT_EQ(unlink(P("file").c_str()), 0);
  ASSERT_EQ(Stop(), 0);
  Start();
  EXPECT_EQ(ReadFile(P("d/file")), "linked");
  EXPECT_EQ(Lstat(P("d/file")).st_nlink, 1u);
  EXPECT_NE(access(P("file").c_str(), F_OK), 0);
}

TEST_F(LinksTest, DirectoryLinkCountsAndSetGroupIdDirectories) {
  ASSERT_EQ(mkdir(P("p").c_str(), 0755), 0);
  EXPECT_EQ(Lstat(P("p")).st_nlink, 2u);
  ASSERT_EQ(mkdir(P("p/x").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(P("p/y").c_str(), 0755), 0);
  WriteFile(P("p/file"), "f");
  EXPECT_EQ(Lstat(P("p")).st_nlink, 4u);
  ASSERT_EQ(mkdir(P("q").c_str(), 0755), 0);
  ASSERT_EQ(rename(P("p/x").c_str(), P("q/x").c_str()), 0);
  EXPECT_EQ(Lstat(P("p")).st_nlink, 3u);
  EXPECT_EQ(Lstat(P("q")).st_nlink, 3u);
  EXPECT_EQ(Lstat(P("q/x/..")).st_ino, Lstat(P("q")).st_ino);
  ASSERT_EQ(rmdir(P("p/y").c_str()), 0);
  EXPECT_EQ(Lstat(P("p")).st_nlink, 2u);

  if (geteuid() != 0) GTEST_SKIP() << "chown to another group needs root";
  ASSERT_EQ(mkdir(P("g").c_str(), 0755), 0);
  ASSERT_EQ(chown(P("g").c_str(), 0, 4242), 0);
  ASSERT_EQ(chmod(P("g").c_str(), 02775), 0);
  ASSERT_EQ(mkdir(P("g/sub").c_str(), 0755), 0);
  WriteFile(P("g/file"), "x");
  EXPECT_EQ(Lstat(P("g/sub")).st_gid, 4242u);
  EXPECT_TRUE(Lstat(P("g/sub")).st_mode & S_ISGID);
  EXPECT_EQ(Lstat(P("g/file")).st_gid, 4242u);
  EXPECT_FALSE(Lstat(P("g/file")).st_mode & S_ISGID);
  if (memory_store()) return;
  ASSERT_EQ(Stop(), 0);
  Start();
  EXPECT_EQ(Lstat(P("g/sub")).st_gid, 4242u);
  EXPECT_EQ(Lstat(P("q")).st_nlink, 3u);
}

}  // namespace
}  // namespace kvfs::fs::testing
