// The cgroup directories of this process, for the readers of its limits (memory_info.h,
// cpu_budget.h). Paths are relative to a root ("/" on a live system; tests pass a fake tree).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kvserve {

// A whole file's text; nullopt when it cannot be read.
std::optional<std::string> read_text_file(const std::string& path);
// `path` (absolute) under `root`: join_root("/", "/proc") is "/proc", join_root("/tmp/x", "/proc")
// "/tmp/x/proc".
std::string join_root(const std::string& root, const std::string& path);

// Every cgroup directory whose limits bind this process for `v1_controller` ("memory", "cpu"):
// on the unified (v2) hierarchy /sys/fs/cgroup/PATH, on a v1 hierarchy that lists the controller
// /sys/fs/cgroup/CONTROLLER/PATH; each with its ancestors up to the mount point, deepest first,
// as /proc/self/cgroup names them. Empty when that file cannot be read.
struct CgroupDir {
  std::string path;
  bool v2 = false;
};
std::vector<CgroupDir> cgroup_dirs(const std::string& root, const std::string& v1_controller);

}  // namespace kvserve
