// Crash tests through the I/O seam: a scenario of publishes, a checkpoint, an unlink and a
// rename runs on FaultInjectionFileSystem, crashing at its n-th file-system call for every n
// the scenario makes; then the power fails (everything unsynced is lost) and the engine opens
// again. Whatever n: it opens, every change Apply acknowledged (durability=close) is there,
// an acknowledged unlink stays done, and every file that is there reads back exactly the
// bytes it was published with. The recovery itself is crashed the same way.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "fault_injection_fs.h"
#include "hang_watch.h"
#include "local_engine_test_util.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using local_engine_test::FileRecord;
using local_engine_test::kMiB;
using local_engine_test::Pattern;
using testing::FaultInjectionFileSystem;
using testing::HangWatch;
using testing::TempDir;

struct Published {
  std::string name;
  uint32_t seed = 0;
  size_t size = 0;
};

struct Outcome {
  std::map<ObjectId, Published> acked;      // Apply said ok
  std::map<ObjectId, Published> attempted;  // what each id's content would be
  std::set<ObjectId> removed;               // an acknowledged unlink
};

EngineOptions CrashOpts(const std::string& dir,
                        const std::shared_ptr<FaultInjectionFileSystem>& fs) {
  EngineOptions o;
  o.data_dir = dir;
  o.capacity = 48 * kMiB;
  o.queue_depth = 4;
  o.durability = Durability::kClose;
  if (fs) {
    o.file_system = fs;
    o.fault_injector = fs->DeviceWrites({dir + "/device0.kvfs"});
  }
  return o;
}

// Publishes files 100..107 (sizes 17 B to ~2 MiB), checkpoints after the fourth, unlinks 101,
// renames 102, and closes the engine (which writes its final checkpoint). Each step is
// reported to `watch`, named after `where`.
void RunScenario(const std::string& dir, const std::shared_ptr<FaultInjectionFileSystem>& fs,
                 Outcome* out, HangWatch* watch = nullptr, const std::string& where = "") {
  const auto step = [&](const std::string& what) {
    if (watch) watch->Step(where + ": scenario: " + what);
  };
  step("open");
  auto opened = LocalEngine::Open(CrashOpts(dir, fs));
  if (!opened.ok()) return;  // crashed while opening
  std::unique_ptr<LocalEngine> e = std::move(opened).value();
  for (uint32_t i = 0; i < 8; ++i) {
    const ObjectId id = 100 + i;
    Published p{"f" + std::to_string(i), i, (i % 3) * kMiB + 4096 * i + 17};
    const std::vector<uint8_t> data = Pattern(p.size, p.seed);
    step("write file " + std::to_string(i));
    auto w = e->NewWriter(nullptr);
    if (!w.ok()) continue;
    bool wrote = true;
    for (size_t off = 0; off < data.size() && wrote; off += 300000) {
      wrote = (*w)->Write(off, data.data() + off, std::min<size_t>(300000, data.size() - off)).ok();
    }
    auto layout = wrote ? (*w)->Finish() : Result<LayoutRef>(Status::IoError("write failed"));
    if (!layout.ok()) continue;
    step("apply file " + std::to_string(i));
    out->attempted[id] = p;
    MetaBatch b;
    b.puts.push_back(FileRecord(id, p.name, *layout));
    if (e->Apply(b).ok()) out->acked[id] = p;
    if (i == 3) {
      step("sync");
      (void)e->Sync();
    }
    if (i == 5 && out->acked.count(101)) {
      step("unlink");
      MetaBatch rm;
      rm.removes.push_back(101);
      if (e->Apply(rm).ok()) {
        out->acked.erase(101);
        out->removed.insert(101);
      }
    }
    if (i == 6 && out->acked.count(102)) {
      step("rename");
      Published renamed = out->acked[102];
      renamed.name = "renamed";
      const std::vector<ObjectRecord> records = e->Records();
      for (const ObjectRecord& rec : records) {
        if (rec.id != 102) continue;
        MetaBatch mv;
        mv.puts.push_back(rec);
        mv.puts.back().name = renamed.name;
        out->attempted[102] = renamed;  // either name is fine until acknowledged
        if (e->Apply(mv).ok()) out->acked[102] = renamed;
      }
    }
  }
  step("close");
  e.reset();
}

// Opens the engine normally and checks the outcome's promises. Returns false on failure.
void CheckRecovered(const std::string& dir, const Outcome& out, const std::string& where) {
  auto opened = LocalEngine::Open(CrashOpts(dir, nullptr));
  ASSERT_TRUE(opened.ok()) << where << ": " << opened.status().ToString();
  std::unique_ptr<LocalEngine> e = std::move(opened).value();
  std::map<ObjectId, ObjectRecord> present;
  for (ObjectRecord& rec : e->Records()) present[rec.id] = std::move(rec);
  for (const auto& [id, p] : out.acked) {
    auto it = present.find(id);
    ASSERT_NE(it, present.end()) << where << ": acknowledged file " << id << " is lost";
    EXPECT_EQ(it->second.name, p.name) << where << ": file " << id;
  }
  for (ObjectId id : out.removed) EXPECT_FALSE(present.count(id)) << where << ": unlink undone";
  for (const auto& [id, rec] : present) {
    auto it = out.attempted.find(id);
    ASSERT_NE(it, out.attempted.end()) << where << ": unknown record " << id;
    ASSERT_TRUE(rec.layout) << where;
    std::vector<uint8_t> got(rec.layout->size);
    auto n = e->Read(rec.layout, 0, got.data(), got.size());
    if (!n.ok()) {
      // Never wrong bytes; an acknowledged file must read, an unacknowledged one may be gone.
      EXPECT_FALSE(out.acked.count(id)) << where << ": " << n.status().ToString();
      continue;
    }
    EXPECT_EQ(got, Pattern(it->second.size, it->second.seed)) << where << ": file " << id;
  }
}

uint64_t CountCalls(
    const std::function<void(const std::string&, const std::shared_ptr<FaultInjectionFileSystem>&)>&
        run) {
  TempDir dir;
  auto fs = std::make_shared<FaultInjectionFileSystem>();
  run(dir.path(), fs);
  return fs->calls();
}

TEST(CrashTest, PowerLossAtEveryFileSystemCallOfPublishAndCheckpoint) {
  const uint64_t calls = CountCalls([](const std::string& dir, const auto& fs) {
    Outcome out;
    RunScenario(dir, fs, &out);
  });
  ASSERT_GT(calls, 40u);
  HangWatch watch(std::chrono::seconds(60));
  for (uint64_t n = 1; n <= calls + 1; ++n) {
    const std::string where = "crash at call " + std::to_string(n);
    TempDir dir;
    auto fs = std::make_shared<FaultInjectionFileSystem>();
    fs->CrashAtCall(n);
    Outcome out;
    RunScenario(dir.path(), fs, &out, &watch, where);
    fs->PowerLoss();
    watch.Step(where + ": recovery");
    CheckRecovered(dir.path(), out, where);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(CrashTest, PowerLossDuringRecovery) {
  // A first power loss in the middle of the scenario, then a second one at each call of the
  // recovery (and the clean close after it) that follows.
  const uint64_t scenario_calls = CountCalls([](const std::string& dir, const auto& fs) {
    Outcome out;
    RunScenario(dir, fs, &out);
  });
  HangWatch watch(std::chrono::seconds(60));
  for (uint64_t first : {scenario_calls / 3, scenario_calls / 2, (scenario_calls * 4) / 5}) {
    TempDir counting;
    uint64_t recovery_calls = 0;
    {
      auto fs = std::make_shared<FaultInjectionFileSystem>();
      fs->CrashAtCall(first);
      Outcome out;
      RunScenario(counting.path(), fs, &out);
      fs->PowerLoss();
      auto fs2 = std::make_shared<FaultInjectionFileSystem>();
      auto e = LocalEngine::Open(CrashOpts(counting.path(), fs2));
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      e->reset();
      recovery_calls = fs2->calls();
    }
    for (uint64_t n = 1; n <= recovery_calls; ++n) {
      const std::string where =
          "crash at " + std::to_string(first) + ", then at recovery call " + std::to_string(n);
      TempDir dir;
      Outcome out;
      auto fs = std::make_shared<FaultInjectionFileSystem>();
      fs->CrashAtCall(first);
      RunScenario(dir.path(), fs, &out, &watch, where);
      fs->PowerLoss();
      auto fs2 = std::make_shared<FaultInjectionFileSystem>();
      fs2->CrashAtCall(n);
      {
        watch.Step(where + ": crashed recovery");
        auto e = LocalEngine::Open(CrashOpts(dir.path(), fs2));
        if (e.ok()) e->reset();
      }
      fs2->PowerLoss();
      watch.Step(where + ": recovery");
      CheckRecovered(dir.path(), out, where);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace kvfs
