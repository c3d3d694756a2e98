#include "mount_options.h"

#include <gtest/gtest.h>

#include <vector>

#include "fuse_option_list.h"

namespace kvfs::fs {
namespace {

ParsedCommandLine Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kvfs");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseMountOptions(static_cast<int>(argv.size()), argv.data());
}

TEST(MountOptionsTest, ParsesEverything) {
  // Data and devices outside the mountpoint (under it they are refused: test_daemon.py).
  auto p = Parse({"/tmp", "--data", "/var/tmp/d", "--capacity", "256M", "--device", "/var/tmp/x:1G",
                  "--device", "/var/tmp/y", "--durability", "async", "--compress", "lz4", "-f",
                  "-o", "allow_other", "--log-level", "debug"});
  ASSERT_TRUE(p.options) << p.message;
  EXPECT_EQ(p.options->mountpoint, "/tmp");
  EXPECT_EQ(p.options->data_dir, "/var/tmp/d");
  EXPECT_EQ(p.options->capacity, 256ull << 20);
  ASSERT_EQ(p.options->devices.size(), 2u);
  EXPECT_EQ(p.options->devices[0].path, "/var/tmp/x");
  EXPECT_EQ(p.options->devices[0].size, 1ull << 30);
  EXPECT_EQ(p.options->devices[1].size, 0u);
  EXPECT_EQ(p.options->durability, Durability::kAsync);
  EXPECT_EQ(p.options->compression, Compression::kLz4);
  EXPECT_TRUE(p.options->foreground);
  EXPECT_EQ(p.options->fuse_options, std::vector<std::string>{"allow_other"});
}

TEST(MountOptionsTest, BadInputExitsTwo) {
  EXPECT_EQ(Parse({}).exit_code, 2);
  EXPECT_EQ(Parse({"/tmp", "--capacity", "12Q"}).exit_code, 2);
  EXPECT_EQ(Parse({"/tmp", "--durability", "sometimes"}).exit_code, 2);
  EXPECT_EQ(Parse({"/nonexistent/dir"}).exit_code, 2);
  EXPECT_EQ(Parse({"/tmp", "--bogus"}).exit_code, 2);
}

TEST(MountOptionsTest, HelpAndVersionExitZero) {
  auto h = Parse({"--help"});
  EXPECT_FALSE(h.options);
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.message.find("--capacity"), std::string::npos);
  auto v = Parse({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.message.find("kvfs "), std::string::npos);
}

TEST(MountOptionsTest, DefaultCapacityIsAQuarterClamped) {
  EXPECT_EQ(DefaultCapacity(0), 256ull << 20);
  EXPECT_EQ(DefaultCapacity(40ull << 30), 10ull << 30);
  EXPECT_EQ(DefaultCapacity(1ull << 50), 64ull << 30);
}

TEST(MountOptionsTest, OptionListsAreSplitAsLibfuseSplitsThem) {
  // libfuse's fuse_opt: a backslash escapes the next character, or three octal digits a byte.
  EXPECT_EQ(SplitOptionList("a,b=c\\,d,,e\\"),
            (std::vector<std::string>{"a", "b=c\\,d", "", "e\\"}));
  EXPECT_EQ(SplitOptionList(""), std::vector<std::string>{""});
  EXPECT_EQ(UnescapeOption("b=c\\,d"), "b=c,d");
  EXPECT_EQ(UnescapeOption("max_read\\0751"), "max_read=1");
  EXPECT_EQ(UnescapeOption("a\\\\b\\4x\\"), "a\\b4x\\");
  // An escaped comma is part of the option before it: no config= here for kvfs to take (it
  // took /nonexistent and failed before).
  auto p = Parse({"/tmp", "-o", "fsname=a\\,config=/nonexistent,allow_other"});
  ASSERT_TRUE(p.options) << p.message;
  EXPECT_EQ(p.options->config_file, "");
  EXPECT_EQ(p.options->fuse_options,
            std::vector<std::string>{"fsname=a\\,config=/nonexistent,allow_other"});
}

}  // namespace
}  // namespace kvfs::fs
