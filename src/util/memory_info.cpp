#include "util/memory_info.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "util/units.h"

namespace kvserve {
namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string join(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return (root.back() == '/' ? root.substr(0, root.size() - 1) : root) + path;
}

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

// The directory and its ancestors up to the mount point, deepest first: "/a/b" -> a/b, a, "".
std::vector<std::string> levels(const std::string& cgroup_path) {
  std::vector<std::string> out;
  std::string p = cgroup_path;
  while (!p.empty() && p.back() == '/') p.pop_back();
  for (;;) {
    out.push_back(p);
    if (p.empty()) break;
    const size_t slash = p.rfind('/');
    p = slash == std::string::npos ? std::string() : p.substr(0, slash);
  }
  return out;
}

// One hierarchy: the tightest level's limit and what is left under it.
void scan(const std::string& mount, const std::string& path, const char* limit_file, const char* usage_file,
          const char* inactive_key, std::optional<CgroupMemory>* best) {
  for (const std::string& level : levels(path)) {
    const std::string dir = mount + level;
    auto limit_text = read_text(dir + "/" + limit_file);
    if (!limit_text) continue;
    auto limit = parse_limit(*limit_text);
    if (!limit) continue;
    uint64_t used = 0;
    if (auto u = read_text(dir + "/" + usage_file)) used = std::strtoull(u->c_str(), nullptr, 10);
    if (auto stat = read_text(dir + "/memory.stat")) used -= std::min(used, stat_value(*stat, inactive_key));
    const CgroupMemory here{*limit, *limit - std::min(*limit, used)};
    if (!*best || here.left < (*best)->left) *best = here;
  }
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
  auto self = read_text(join(src.root, "/proc/self/cgroup"));
  if (!self) return std::nullopt;
  std::optional<CgroupMemory> best;
  std::istringstream in(*self);
  std::string line;
  while (std::getline(in, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1; the controller list may name several).
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      scan(join(src.root, "/sys/fs/cgroup"), path, "memory.max", "memory.current", "inactive_file", &best);
    } else {
      std::istringstream cs(controllers);
      std::string c;
      bool memory = false;
      while (std::getline(cs, c, ',')) memory = memory || c == "memory";
      if (memory)
        scan(join(src.root, "/sys/fs/cgroup/memory"), path, "memory.limit_in_bytes", "memory.usage_in_bytes",
             "total_inactive_file", &best);
    }
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
  if (auto text = read_text(join(src.root, "/proc/meminfo")))
    if (auto a = parse_meminfo_available(*text)) avail = *a;
  if (avail == 0) avail = physical_memory_bytes();
  if (avail == 0) avail = UINT64_MAX;  // nothing readable: no bound known
  if (auto cg = cgroup_memory(src)) avail = std::min(avail, cg->left);
  return avail;
}

}  // namespace kvserve
