#include "iperf3_baseline.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "child_process.h"

namespace remotebench {

using namespace std::chrono_literals;

kvfs::Result<IperfResult> RunIperf3(double seconds, const std::string& work_dir) {
  KVFS_ASSIGN_OR_RETURN(uint16_t port, FreePort());
  const std::string port_s = std::to_string(port);
  ChildProcess server;
  KVFS_RETURN_IF_ERROR(
      server.Start({"iperf3", "-s", "-1", "--forceflush", "-B", "127.0.0.1", "-p", port_s},
                   work_dir + "/iperf3-server.log"));
  // A probe connect would use up the one-off session: wait for "Server listening" in its log
  // instead (--forceflush, or the line sits in stdio's buffer).
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (ReadFile(work_dir + "/iperf3-server.log").find("listening") == std::string::npos) {
    if (std::chrono::steady_clock::now() > end) {
      return kvfs::Status::Error(ETIMEDOUT, "iperf3 server did not start (is iperf3 installed?)");
    }
    std::this_thread::sleep_for(20ms);
  }
  ChildProcess client;
  const std::string out = work_dir + "/iperf3-client.json";
  // iperf3 takes whole seconds (and 0 would mean its default of 10).
  const std::string secs = std::to_string(std::max(1, static_cast<int>(seconds + 0.5)));
  KVFS_RETURN_IF_ERROR(
      client.Start({"iperf3", "-c", "127.0.0.1", "-p", port_s, "-J", "-t", secs, "-P", "1"}, out));
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000) + 15000);
  KVFS_ASSIGN_OR_RETURN(int rc, client.Wait(limit));
  server.Stop();
  if (rc != 0) return kvfs::Status::IoError("iperf3 client exited with " + std::to_string(rc));
  auto j = nlohmann::json::parse(ReadFile(out), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("end") || !j["end"].contains("sum_received")) {
    return kvfs::Status::IoError("cannot parse iperf3 -J output in " + out);
  }
  IperfResult r;
  r.bytes_per_second = j["end"]["sum_received"].value("bits_per_second", 0.0) / 8;
  if (j["end"].contains("cpu_utilization_percent")) {
    const auto& cpu = j["end"]["cpu_utilization_percent"];
    r.sender_cpu_percent = cpu.value("host_total", 0.0);
    r.receiver_cpu_percent = cpu.value("remote_total", 0.0);
  }
  return r;
}

}  // namespace remotebench
