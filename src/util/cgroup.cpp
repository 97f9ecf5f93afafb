#include "util/cgroup.h"

#include <fstream>
#include <sstream>

namespace kvserve {
namespace {

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

}  // namespace

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string join_root(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return (root.back() == '/' ? root.substr(0, root.size() - 1) : root) + path;
}

std::vector<CgroupDir> cgroup_dirs(const std::string& root, const std::string& v1_controller) {
  std::vector<CgroupDir> out;
  auto self = read_text_file(join_root(root, "/proc/self/cgroup"));
  if (!self) return out;
  std::istringstream in(*self);
  std::string line;
  while (std::getline(in, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1; the controller list may name several: "cpu,cpuacct").
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::string mount;
    bool v2 = false;
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      mount = join_root(root, "/sys/fs/cgroup");
      v2 = true;
    } else {
      std::istringstream cs(controllers);
      std::string c;
      bool listed = false;
      while (std::getline(cs, c, ',')) listed = listed || c == v1_controller;
      if (!listed) continue;
      mount = join_root(root, "/sys/fs/cgroup/" + v1_controller);
    }
    for (const std::string& level : levels(path)) out.push_back({mount + level, v2});
  }
  return out;
}

}  // namespace kvserve
