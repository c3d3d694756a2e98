// Directory: lookups, readdir order and cookies, against a plain model (std::map) through long
// random sequences of links and unlinks that go through many compactions and index growths;
// readdir offsets handed out before a compaction still resume at the right entry.
#include "directory.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

namespace kvfs::fs {
namespace {

struct Listed {
  uint64_t cookie, ino;
  std::string name;
  bool is_dir;
};

std::vector<Listed> List(const Directory& d, uint64_t offset = 0) {
  std::vector<Listed> out;
  d.ForEachAfter(offset, [&](const Directory::Item& e) {
    out.push_back({e.cookie, e.ino, std::string(e.name), e.is_dir});
    EXPECT_EQ(e.name.data()[e.name.size()], '\0');  // NUL-terminated for fuse_add_direntry
    return true;
  });
  return out;
}

TEST(DirectoryTest, LinkFindUnlink) {
  Directory d;
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d.Find("a"), 0u);
  EXPECT_FALSE(d.Unlink("a"));
  EXPECT_TRUE(d.Link("a", 10, false));
  EXPECT_TRUE(d.Link("sub", 11, true));
  EXPECT_FALSE(d.Link("a", 12, false));  // taken: nothing changes
  EXPECT_FALSE(d.Link(std::string(Directory::kMaxName + 1, 'x'), 14, false));  // too long
  EXPECT_FALSE(d.Link("zero", 0, false));  // 0 is no inode number
  EXPECT_EQ(d.Find("zero"), 0u);
  EXPECT_EQ(d.Find("a"), 10u);
  EXPECT_EQ(d.Find("sub"), 11u);
  EXPECT_EQ(d.subdirs(), 1u);
  EXPECT_EQ(d.size(), 2u);
  auto l = List(d);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].name, "a");
  EXPECT_EQ(l[0].cookie, Directory::kFirstCookie);
  EXPECT_EQ(l[1].name, "sub");
  EXPECT_EQ(l[1].cookie, Directory::kFirstCookie + 1);
  EXPECT_TRUE(d.Unlink("sub"));
  EXPECT_EQ(d.subdirs(), 0u);
  EXPECT_EQ(d.Find("sub"), 0u);
  // A name linked again gets a new cookie: readdir lists it after what it listed before.
  EXPECT_TRUE(d.Link("sub", 13, false));
  l = List(d);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[1].name, "sub");
  EXPECT_GT(l[1].cookie, Directory::kFirstCookie + 1);
  EXPECT_TRUE(d.Unlink("a"));
  EXPECT_TRUE(d.Unlink("sub"));
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(List(d).empty());
}

TEST(DirectoryTest, NamesThatShareHashBucketsAndOddBytes) {
  Directory d;
  std::vector<std::string> names = {
      "", "x", std::string(255, 'z'), std::string("a\0b", 3), "\xff\xfe", "tmp", "tmp.1", "TMP"};
  uint64_t ino = 100;
  for (const auto& n : names) EXPECT_TRUE(d.Link(n, ino++, false)) << n;
  ino = 100;
  for (const auto& n : names) EXPECT_EQ(d.Find(n), ino++) << n;
  EXPECT_EQ(d.Find(std::string("a\0c", 3)), 0u);
  EXPECT_EQ(d.Find("tmp.2"), 0u);
}

// Random links and unlinks of a few thousand names, checked against a model after every step
// that could move things (compaction, index growth).
TEST(DirectoryTest, MatchesAModelThroughCompactionsAndGrowth) {
  std::mt19937_64 rng(42);
  Directory d;
  std::map<std::string, std::pair<uint64_t, bool>> model;  // name -> ino, is_dir
  std::map<uint64_t, std::string> order;                   // cookie -> name, as listed
  uint64_t next_ino = 1;
  auto check = [&] {
    ASSERT_EQ(d.size(), model.size());
    uint32_t dirs = 0;
    for (auto& [name, v] : model) {
      ASSERT_EQ(d.Find(name), v.first) << name;
      dirs += v.second;
    }
    ASSERT_EQ(d.subdirs(), dirs);
    auto l = List(d);
    ASSERT_EQ(l.size(), order.size());
    size_t i = 0;
    for (auto& [cookie, name] : order) {
      ASSERT_EQ(l[i].cookie, cookie);
      ASSERT_EQ(l[i].name, name);
      ASSERT_EQ(l[i].ino, model[name].first);
      ++i;
    }
  };
  std::map<std::string, uint64_t> cookie_of;
  uint64_t next_cookie = Directory::kFirstCookie;
  for (int step = 0; step < 40000; ++step) {
    // Names from a pool larger than what is linked at once; long names too (heap strings).
    const uint64_t k = rng() % 3000;
    std::string name = (k % 7 == 0 ? std::string(64, 'h') : std::string()) + std::to_string(k);
    const bool grow_phase = (step / 5000) % 2 == 0;  // alternately fill and drain
    if (model.count(name)) {
      if (rng() % 100 < (grow_phase ? 30u : 80u)) {
        ASSERT_TRUE(d.Unlink(name));
        order.erase(cookie_of[name]);
        model.erase(name);
      } else {
        ASSERT_FALSE(d.Link(name, 999999, false));
      }
    } else {
      const bool is_dir = rng() % 5 == 0;
      ASSERT_TRUE(d.Link(name, next_ino, is_dir));
      model[name] = {next_ino++, is_dir};
      const uint64_t cookie = next_cookie++;  // every link takes the next cookie
      cookie_of[name] = cookie;
      order[cookie] = name;
    }
    if (step % 997 == 0) check();
  }
  check();
  // Drain everything: the directory ends empty.
  for (auto& [name, v] : model) ASSERT_TRUE(d.Unlink(name));
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(List(d).empty());
}

// An offset handed to the kernel before many entries go away (a compaction) still resumes
// right after the entry it was handed with.
TEST(DirectoryTest, ReaddirOffsetsSurviveCompaction) {
  Directory d;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(d.Link("f" + std::to_string(i), i + 1, false));
  auto before = List(d);
  const uint64_t offset = before[499].cookie;  // the kernel has seen f0..f499
  for (int i = 0; i < 1000; i += 2) {
    if (i == 500) continue;
    ASSERT_TRUE(d.Unlink("f" + std::to_string(i)));  // compacts on the way
  }
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(d.Unlink("f" + std::to_string(2 * i + 1)));
  auto rest = List(d, offset);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.front().name, "f500");
  for (const auto& e : rest) EXPECT_GT(e.cookie, offset);
  // Everything still linked at or before the offset is not listed again.
  for (const auto& e : rest) EXPECT_GE(std::stoi(e.name.substr(1)), 500);
}

TEST(DirectoryTest, CookiesFindTheirNamesThroughCompactions) {
  // The namespace keeps each inode's first name as its cookie here, so a cookie must name the
  // same entry for as long as it is linked, whatever else comes and goes.
  Directory d;
  std::map<uint64_t, std::pair<std::string, uint64_t>> live;  // cookie -> (name, ino)
  for (int i = 0; i < 2000; ++i) {
    const std::string name = "chunk-" + std::to_string(i) + std::string(40, 'x');
    ASSERT_TRUE(d.Link(name, i + 1, false));
    const uint64_t cookie = d.CookieOf(name, i + 1);
    ASSERT_NE(cookie, 0u);
    EXPECT_EQ(d.CookieOf(name, i + 2), 0u);  // another inode's name is not this one's
    live[cookie] = {name, i + 1};
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 1500; ++round) {
    auto it = live.begin();
    std::advance(it, rng() % live.size());
    const uint64_t gone = it->first;
    ASSERT_TRUE(d.Unlink(it->second.first));
    live.erase(it);
    EXPECT_TRUE(d.NameAt(gone).empty());
  }
  for (const auto& [cookie, entry] : live) {
    EXPECT_EQ(d.NameAt(cookie), entry.first);
    EXPECT_EQ(d.CookieOf(entry.first, entry.second), cookie);
  }
  EXPECT_TRUE(d.NameAt(0).empty());
  EXPECT_TRUE(d.NameAt(1u << 30).empty());
  EXPECT_EQ(d.CookieOf("nothing", 1), 0u);
}

TEST(DirectoryTest, ListingStopsWhenAskedTo) {
  Directory d;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(d.Link("n" + std::to_string(i), i + 1, false));
  int seen = 0;
  d.ForEachAfter(0, [&](const Directory::Item&) { return ++seen < 3; });
  EXPECT_EQ(seen, 3);
}

}  // namespace
}  // namespace kvfs::fs
