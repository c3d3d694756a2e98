// The loopback ceiling: iperf3, one TCP stream, server and client both started here on
// 127.0.0.1 and stopped by PID. DESIGN §9 asks a remote chunk read for >= 0.7x this rate.
#pragma once

#include <string>

#include "kvfs/status.h"

namespace remotebench {

struct IperfResult {
  double bytes_per_second = 0;  // as the receiver counted them
  double sender_cpu_percent = 0, receiver_cpu_percent = 0;
};

// Runs `iperf3 -c 127.0.0.1 -J -t seconds` against a one-off `iperf3 -s` on a free port.
// `work_dir` holds the processes' logs.
kvfs::Result<IperfResult> RunIperf3(double seconds, const std::string& work_dir);

}  // namespace remotebench
