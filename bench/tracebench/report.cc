#include "report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace kvfs::tracebench {
namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Status::IoError("cannot write " + path);
  out << text;
  out.close();
  if (!out) return Status::IoError("write failed: " + path);
  return Status::Ok();
}

}  // namespace

void PrintTable(std::ostream& out, const std::vector<Row>& rows) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-8s %6s %9s %9s %9s %9s %10s %10s %9s %9s %7s %9s\n", "policy",
                "cap", "blk_hit", "req_hit", "opt_blk", "opt_req", "read_GiB", "write_GiB",
                "ttft_ms", "ttft_nc", "speedup", "rd_MiB/s");
  out << buf;
  for (const Row& r : rows) {
    std::snprintf(buf, sizeof buf,
                  "%-8s %5.0f%% %9.4f %9.4f %9.4f %9.4f %10.1f %10.1f %9.1f %9.1f %7.2f %9.1f\n",
                  r.policy.c_str(), r.capacity_fraction * 100, r.block_hit_rate, r.request_hit_rate,
                  r.optimum_block_hit_rate, r.optimum_request_hit_rate, r.bytes_read / 1073741824.0,
                  r.bytes_written / 1073741824.0, r.ttft_cache_ms, r.ttft_no_cache_ms,
                  r.ttft_speedup, r.read_mib_s);
    out << buf;
  }
}

Status WriteCsv(const std::string& path, const std::vector<Row>& rows) {
  std::string text =
      "policy,capacity_fraction,capacity_bytes,block_hit_rate,request_hit_rate,"
      "optimum_block_hit_rate,optimum_request_hit_rate,bytes_read,bytes_written,evictions,"
      "ttft_no_cache_ms,ttft_cache_ms,ttft_speedup,read_mib_s,seconds\n";
  for (const Row& r : rows) {
    text += r.policy + "," + Fmt("%.4f", r.capacity_fraction) + "," +
            std::to_string(r.capacity_bytes) + "," + Fmt("%.6f", r.block_hit_rate) + "," +
            Fmt("%.6f", r.request_hit_rate) + "," + Fmt("%.6f", r.optimum_block_hit_rate) + "," +
            Fmt("%.6f", r.optimum_request_hit_rate) + "," + std::to_string(r.bytes_read) + "," +
            std::to_string(r.bytes_written) + "," + std::to_string(r.evictions) + "," +
            Fmt("%.3f", r.ttft_no_cache_ms) + "," + Fmt("%.3f", r.ttft_cache_ms) + "," +
            Fmt("%.4f", r.ttft_speedup) + "," + Fmt("%.1f", r.read_mib_s) + "," +
            Fmt("%.3f", r.seconds) + "\n";
  }
  return WriteFile(path, text);
}

Status WriteJson(const std::string& path, const std::vector<Row>& rows,
                 const std::string& trace_label) {
  nlohmann::json j;
  j["trace"] = trace_label;
  j["rows"] = nlohmann::json::array();
  for (const Row& r : rows) {
    j["rows"].push_back({{"policy", r.policy},
                         {"capacity_fraction", r.capacity_fraction},
                         {"capacity_bytes", r.capacity_bytes},
                         {"block_hit_rate", r.block_hit_rate},
                         {"request_hit_rate", r.request_hit_rate},
                         {"optimum_block_hit_rate", r.optimum_block_hit_rate},
                         {"optimum_request_hit_rate", r.optimum_request_hit_rate},
                         {"bytes_read", r.bytes_read},
                         {"bytes_written", r.bytes_written},
                         {"evictions", r.evictions},
                         {"ttft_no_cache_ms", r.ttft_no_cache_ms},
                         {"ttft_cache_ms", r.ttft_cache_ms},
                         {"ttft_speedup", r.ttft_speedup},
                         {"read_mib_s", r.read_mib_s}});
  }
  return WriteFile(path, j.dump(2) + "\n");
}

Status WriteSvg(const std::string& path, const std::vector<Row>& rows, const std::string& title) {
  // Series: every policy, plus the optimum (taken from the rows' optimum column).
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  std::vector<std::string> order;
  for (const Row& r : rows) {
    if (!series.count(r.policy)) order.push_back(r.policy);
    series[r.policy].push_back({r.capacity_fraction, r.block_hit_rate});
    auto& opt = series["optimum"];
    if (std::none_of(opt.begin(), opt.end(),
                     [&](auto& p) { return p.first == r.capacity_fraction; })) {
      opt.push_back({r.capacity_fraction, r.optimum_block_hit_rate});
    }
  }
  order.push_back("optimum");
  double xmax = 0, ymax = 0;
  for (auto& [name, pts] : series) {
    std::sort(pts.begin(), pts.end());
    for (auto [x, y] : pts) {
      xmax = std::max(xmax, x);
      ymax = std::max(ymax, y);
    }
  }
  xmax = xmax > 0 ? xmax * 1.05 : 1;
  ymax = ymax > 0 ? std::min(1.0, ymax * 1.15) : 1;
  const double W = 720, H = 460, L = 70, R = 170, T = 40, B = 50;
  auto px = [&](double x) { return L + x / xmax * (W - L - R); };
  auto py = [&](double y) { return H - B - y / ymax * (H - T - B); };
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
  std::string s =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"460\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + Fmt("%.0f", L) + "\" y=\"24\" font-size=\"14\">" + title + "</text>\n";
  s += "<line x1=\"" + Fmt("%.1f", L) + "\" y1=\"" + Fmt("%.1f", H - B) + "\" x2=\"" +
       Fmt("%.1f", W - R) + "\" y2=\"" + Fmt("%.1f", H - B) + "\" stroke=\"black\"/>\n";
  s += "<line x1=\"" + Fmt("%.1f", L) + "\" y1=\"" + Fmt("%.1f", T) + "\" x2=\"" + Fmt("%.1f", L) +
       "\" y2=\"" + Fmt("%.1f", H - B) + "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 5; ++i) {
    double y = ymax * i / 5, x = xmax * i / 5;
    s += "<text x=\"" + Fmt("%.1f", L - 8) + "\" y=\"" + Fmt("%.1f", py(y) + 4) +
         "\" text-anchor=\"end\">" + Fmt("%.2f", y) + "</text>\n";
    s += "<line x1=\"" + Fmt("%.1f", L) + "\" y1=\"" + Fmt("%.1f", py(y)) + "\" x2=\"" +
         Fmt("%.1f", W - R) + "\" y2=\"" + Fmt("%.1f", py(y)) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + Fmt("%.1f", px(x)) + "\" y=\"" + Fmt("%.1f", H - B + 18) +
         "\" text-anchor=\"middle\">" + Fmt("%.0f%%", x * 100) + "</text>\n";
  }
  s += "<text x=\"" + Fmt("%.1f", (L + W - R) / 2) + "\" y=\"" + Fmt("%.1f", H - 10) +
       "\" text-anchor=\"middle\">capacity (share of the working set)</text>\n";
  s += "<text x=\"16\" y=\"" + Fmt("%.1f", (T + H - B) / 2) + "\" transform=\"rotate(-90 16 " +
       Fmt("%.1f", (T + H - B) / 2) + ")\" text-anchor=\"middle\">block hit rate</text>\n";
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& name = order[i];
    const bool opt = name == "optimum";
    const char* color = opt ? "black" : colors[i % 6];
    std::string pts;
    for (auto [x, y] : series[name]) pts += Fmt("%.1f,", px(x)) + Fmt("%.1f ", py(y));
    s += std::string("<polyline fill=\"none\" stroke=\"") + color + "\" stroke-width=\"2\"" +
         (opt ? " stroke-dasharray=\"6,4\"" : "") + " points=\"" + pts + "\"/>\n";
    for (auto [x, y] : series[name]) {
      s += "<circle cx=\"" + Fmt("%.1f", px(x)) + "\" cy=\"" + Fmt("%.1f", py(y)) +
           "\" r=\"3\" fill=\"" + color + "\"/>\n";
    }
    double ly = T + 20 + 20 * static_cast<double>(i);
    s += "<line x1=\"" + Fmt("%.1f", W - R + 15) + "\" y1=\"" + Fmt("%.1f", ly) + "\" x2=\"" +
         Fmt("%.1f", W - R + 45) + "\" y2=\"" + Fmt("%.1f", ly) + "\" stroke=\"" + color +
         "\" stroke-width=\"2\"" + (opt ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
    s += "<text x=\"" + Fmt("%.1f", W - R + 52) + "\" y=\"" + Fmt("%.1f", ly + 4) + "\">" + name +
         "</text>\n";
  }
  s += "</svg>\n";
  return WriteFile(path, s);
}

}  // namespace kvfs::tracebench
