// Repairer: keeps every chunk at R live copies (docs/cluster.md, "Repair"). Each node looks
// only at the chunks it holds. For a chunk whose live, non-draining holders are fewer than R,
// the first of them in the holder list leads: it copies the chunk to the next node of the
// chunk's rendezvous ranking that has none, then replaces the dead holders by that node in the
// record (a compare-and-put on etcd; a record that moved meanwhile is looked at again next
// round). Copies are paced to the configured bandwidth. A pass runs when the members change,
// when a held chunk's record changes, and every 10 s.
//
// It also drops held chunks nobody names after a while (a publish that never committed), and
// tells the others when a draining node's chunks all have R copies elsewhere.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace kvfs::cluster {

class ClusterStore;

class Repairer {
 public:
  explicit Repairer(ClusterStore* store) : store_(store) {}
  ~Repairer() { Stop(); }
  void Start();
  void Stop();
  void Poke();     // a pass soon
  void RunOnce();  // a pass now, on the caller's thread

  struct Totals {
    uint64_t pending = 0;  // chunks found short of copies that this node leads (last pass)
    uint64_t chunks = 0, bytes = 0, failures = 0;
    uint64_t passes = 0;  // over the chunks this node holds, since it started
  };
  Totals totals() const {
    return {pending_.load(), chunks_.load(), bytes_.load(), failures_.load(), passes_.load()};
  }

 private:
  void Loop();
  void Pace(uint64_t bytes);

  ClusterStore* const store_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool poked_ = false, stop_ = false, started_ = false;
  bool awaiting_poke_ = false;  // Loop waits for a poke (Poke notifies only then)
  std::mutex pass_mu_;          // one pass at a time
  std::chrono::steady_clock::time_point next_send_{};
  std::atomic<uint64_t> pending_{0}, chunks_{0}, bytes_{0}, failures_{0}, passes_{0};
};

}  // namespace kvfs::cluster
