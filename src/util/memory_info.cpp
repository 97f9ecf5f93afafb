#include "util/memory_info.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "util/cgroup.h"
#include "util/units.h"

namespace kvserve {
namespace {

// A limit file's value: a number of bytes, or nullopt for "max" and v1's "unlimited" (a value
// near 2^63 rounded to pages).
std::optional<uint64_t> parse_limit(const std::string& text) {
  if (text.rfind("max", 0) == 0) return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || v >= (1ull << 62)) return std::nullopt;
  return uint64_t(v);
}

// The value of KEY in a memory.stat file ("inactive_file 1234"), 0 when absent.
uint64_t stat_value(const std::string& stat, const std::string& key) {
  std::istringstream in(stat);
  std::string k;
  unsigned long long v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

}  // namespace

std::optional<uint64_t> parse_meminfo_available(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str() + 13, "%llu", &kb) != 1) return std::nullopt;
    return uint64_t(kb) * 1024;
  }
  return std::nullopt;
}

std::optional<CgroupMemory> cgroup_memory(const MemorySources& src) {
  // The tightest level's limit, and what is left under it.
  std::optional<CgroupMemory> best;
  for (const CgroupDir& dir : cgroup_dirs(src.root, "memory")) {
    auto limit_text = read_text_file(dir.path + (dir.v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    if (!limit_text) continue;
    auto limit = parse_limit(*limit_text);
    if (!limit) continue;
    uint64_t used = 0;
    if (auto u = read_text_file(dir.path + (dir.v2 ? "/memory.current" : "/memory.usage_in_bytes")))
      used = std::strtoull(u->c_str(), nullptr, 10);
    if (auto stat = read_text_file(dir.path + "/memory.stat"))
      used -= std::min(used, stat_value(*stat, dir.v2 ? "inactive_file" : "total_inactive_file"));
    const CgroupMemory here{*limit, *limit - std::min(*limit, used)};
    if (!best || here.left < best->left) best = here;
  }
  return best;
}

uint64_t memory_limit_bytes(const MemorySources& src) {
  uint64_t ram = physical_memory_bytes();
  if (auto cg = cgroup_memory(src)) ram = ram == 0 ? cg->limit : std::min(ram, cg->limit);
  return ram;
}

uint64_t available_memory_bytes(const MemorySources& src) {
  uint64_t avail = 0;
  if (auto text = read_text_file(join_root(src.root, "/proc/meminfo")))
    if (auto a = parse_meminfo_available(*text)) avail = *a;
  if (avail == 0) avail = physical_memory_bytes();
  if (avail == 0) avail = UINT64_MAX;  // nothing readable: no bound known
  if (auto cg = cgroup_memory(src)) avail = std::min(avail, cg->left);
  return avail;
}

}  // namespace kvserve
