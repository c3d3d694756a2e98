// Through the mount: corruption on a device is EIO, the file leaves the namespace and the
// daemon keeps serving the rest; kvfsctl verify finds it; striping over two devices and lz4
// compression are visible in user.kvfs.stat / .kvfs/status and survive a restart.
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "mount_fixture.h"

namespace kvfs::fs::testing {
namespace {

class MountIntegrityTest : public MountTest {
 protected:
  nlohmann::json StatJson(const std::string& path) {
    std::string v(256 * 1024, '\0');
    ssize_t n = lgetxattr(path.c_str(), "user.kvfs.stat", v.data(), v.size());
    EXPECT_GT(n, 0) << path << ": " << std::strerror(errno);
    v.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return nlohmann::json::parse(v, nullptr, false);
  }
  nlohmann::json Status() {
    return nlohmann::json::parse(ReadFile(P(".kvfs/status")), nullptr, false);
  }
  // Restarts the daemon on a fresh data directory with these options.
  void Restart(const std::vector<std::string>& extra) {
    ASSERT_EQ(Stop(), 0);
    data_ = base_ + "/data2";
    Start(extra);
  }
};

TEST_F(MountIntegrityTest, CorruptSegmentIsEioThenEnoentAndVerifyFindsIt) {
  if (memory_store()) GTEST_SKIP() << "needs device files";
  const std::string bad = RandomBytes(3 << 20, 1), good = RandomBytes((1 << 20) + 77, 2);
  WriteFile(P("bad"), bad);
  WriteFile(P("good"), good);
  WriteFile(P("also-bad"), RandomBytes(5000, 3));
  nlohmann::json st = StatJson(P("bad")), st2 = StatJson(P("also-bad"));
  const uint64_t off = st["segments"][1]["offset"].get<uint64_t>() + 1234;
  const uint64_t off2 = st2["segments"][0]["offset"].get<uint64_t>() + 10;
  ASSERT_EQ(Stop(), 0);
  {
    int fd = open((data_ + "/device0.kvfs").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    for (uint64_t o : {off, off2}) {
      char c = 0;
      ASSERT_EQ(pread(fd, &c, 1, static_cast<off_t>(o)), 1);
      c = static_cast<char>(c ^ 0x5a);
      ASSERT_EQ(pwrite(fd, &c, 1, static_cast<off_t>(o)), 1);
    }
    close(fd);
  }
  Start();  // a fresh daemon: nothing of these files is in the page cache
  int fd = open(P("bad").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  // The first (intact) segment may come back as a short read; the corrupt one must fail.
  std::string buf(bad.size(), '\0');
  ssize_t n = 0;
  size_t done = 0;
  while ((n = pread(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(done))) > 0)
    done += static_cast<size_t>(n);
  EXPECT_EQ(n, -1);
  EXPECT_EQ(errno, EIO);
  EXPECT_LT(done, bad.size());
  EXPECT_EQ(buf.substr(0, done), bad.substr(0, done));  // never wrong bytes
  close(fd);
  struct stat sb;
  EXPECT_EQ(stat(P("bad").c_str(), &sb), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(ReadFile(P("good")), good);
  nlohmann::json s = Status();
  EXPECT_GE(s["checksum_failures"].get<uint64_t>(), 1u);
  EXPECT_EQ(s["corrupt_dropped"].get<uint64_t>(), 1u);

  // verify walks the mount: exactly the other corrupt file, exit 1; a second run is clean.
  std::string out;
  EXPECT_EQ(Shell(std::string(KVFSCTL_BIN) + " verify --json " + mnt_, &out), 1) << out;
  auto report = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << out;
  EXPECT_EQ(report["files"].get<uint64_t>(), 2u);
  EXPECT_EQ(report["ok"].get<uint64_t>(), 1u);
  ASSERT_EQ(report["corrupt"].size(), 1u);
  EXPECT_EQ(report["corrupt"][0].get<std::string>(), P("also-bad"));
  EXPECT_EQ(Shell(std::string(KVFSCTL_BIN) + " verify " + mnt_, &out), 0) << out;
  EXPECT_EQ(stat(P("also-bad").c_str(), &sb), -1);
  EXPECT_EQ(Shell(std::string(KVFSCTL_BIN) + " verify /tmp", &out), 2) << out;
  // The removals were journaled: a restart keeps them gone and the good file intact.
  ASSERT_EQ(Stop(), 0);
  Start();
  EXPECT_EQ(stat(P("bad").c_str(), &sb), -1);
  EXPECT_EQ(ReadFile(P("good")), good);
}

TEST_F(MountIntegrityTest, StripesOverTwoDevicesAndSurvivesRestart) {
  if (memory_store()) GTEST_SKIP() << "needs device files";
  const std::vector<std::string> opts = {"--device", base_ + "/d0:64M", "--device",
                                         base_ + "/d1:64M"};
  Restart(opts);
  const std::string data = RandomBytes(8 << 20, 4);
  WriteFile(P("striped"), data);
  nlohmann::json st = StatJson(P("striped"));
  std::set<uint64_t> devices;
  for (const auto& seg : st["segments"]) devices.insert(seg["device"].get<uint64_t>());
  EXPECT_EQ(devices, (std::set<uint64_t>{0, 1}));
  EXPECT_EQ(st["devices"].size(), 2u);
  EXPECT_EQ(ReadFile(P("striped")), data);
  ASSERT_EQ(Stop(), 0);
  Start(opts);
  EXPECT_EQ(ReadFile(P("striped")), data);
}

TEST_F(MountIntegrityTest, CompressionIsVisibleAndRoundTrips) {
  if (memory_store()) GTEST_SKIP() << "needs device files";
  Restart({"--compress", "auto"});
  std::string text;
  while (text.size() < (3 << 20))
    text += "the quick brown fox jumps over the lazy dog 0123456789\n";
  const std::string zeros(2 << 20, '\0'), random = RandomBytes(2 << 20, 5);
  WriteFile(P("text"), text);
  WriteFile(P("zeros"), zeros);
  WriteFile(P("random"), random);
  auto stored = [&](const std::string& name, std::string* codec) {
    uint64_t total = 0;
    const nlohmann::json st = StatJson(P(name));
    EXPECT_GT(st["segments"].size(), 0u) << st.dump();
    for (const auto& seg : st["segments"]) {
      total += seg["stored_len"].get<uint64_t>();
      if (total == seg["stored_len"].get<uint64_t>())
        *codec = seg["codec"].get<std::string>();  // the first segment
    }
    return total;
  };
  std::string codec;
  EXPECT_LT(stored("text", &codec), text.size());
  EXPECT_EQ(codec, "lz4");
  EXPECT_LT(stored("zeros", &codec), zeros.size());
  EXPECT_EQ(stored("random", &codec), random.size());  // auto keeps incompressible data raw
  EXPECT_EQ(codec, "none");
  EXPECT_GT(Status()["compression_ratio"].get<double>(), 1.0);
  ASSERT_EQ(Stop(), 0);
  Start({"--compress", "auto"});
  EXPECT_EQ(ReadFile(P("text")), text);
  EXPECT_EQ(ReadFile(P("zeros")), zeros);
  EXPECT_EQ(ReadFile(P("random")), random);
  EXPECT_GT(Status()["compression_ratio"].get<double>(), 1.0);
}

}  // namespace
}  // namespace kvfs::fs::testing
