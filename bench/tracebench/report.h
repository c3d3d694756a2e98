// Output of tracebench: one Row per (policy, capacity), written as a table, CSV, JSON and an
// SVG plot of block hit rate against capacity (drawn directly, no plotting dependency).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kvfs/status.h"

namespace kvfs::tracebench {

struct Row {
  std::string policy;
  double capacity_fraction = 0;
  uint64_t capacity_bytes = 0;
  double block_hit_rate = 0;
  double request_hit_rate = 0;
  double optimum_block_hit_rate = 0;
  double optimum_request_hit_rate = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t evictions = 0;
  double ttft_no_cache_ms = 0;
  double ttft_cache_ms = 0;
  double ttft_speedup = 0;
  double read_mib_s = 0;  // measured (directory mode); 0 in simulation
  double seconds = 0;     // wall time of this row's replay
};

void PrintTable(std::ostream& out, const std::vector<Row>& rows);
Status WriteCsv(const std::string& path, const std::vector<Row>& rows);
Status WriteJson(const std::string& path, const std::vector<Row>& rows,
                 const std::string& trace_label);
Status WriteSvg(const std::string& path, const std::vector<Row>& rows, const std::string& title);

}  // namespace kvfs::tracebench
