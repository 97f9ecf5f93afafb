#include "util/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "util/cgroup.h"

namespace kvserve {
namespace {

// A positive number at the start of `text`; nullopt for "max", -1 (v1's "no limit") or garbage.
std::optional<double> positive(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v > 0) || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<double> cgroup_cpu_limit(const CpuSources& src) {
  std::optional<double> best;
  for (const CgroupDir& dir : cgroup_dirs(src.root, "cpu")) {
    std::optional<double> quota, period;
    if (dir.v2) {
      // "max 100000" or "200000 100000"
      auto text = read_text_file(dir.path + "/cpu.max");
      if (!text) continue;
      quota = positive(*text);
      const size_t space = text->find(' ');
      if (space != std::string::npos) period = positive(text->substr(space + 1));
    } else {
      if (auto q = read_text_file(dir.path + "/cpu.cfs_quota_us")) quota = positive(*q);
      if (auto p = read_text_file(dir.path + "/cpu.cfs_period_us")) period = positive(*p);
    }
    if (!quota || !period) continue;
    const double cpus = *quota / *period;
    if (!best || cpus < *best) best = cpus;
  }
  return best;
}

int usable_cpus(const CpuSources& src) {
  int n = int(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (src.root == "/" && sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (auto limit = cgroup_cpu_limit(src)) n = std::min(n, int(std::ceil(*limit - 1e-9)));
  return std::max(1, n);
}

}  // namespace kvserve
