// How much memory this process may still use: the machine's MemAvailable, capped by the memory
// limit of the cgroup it runs in (a container's limit is invisible to sysconf, and a
// zero-filled KV arena past it ends in the OOM killer rather than in an error).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kvserve {

// The files read, relative to a root ("/" on a live system; tests pass a fake tree).
struct MemorySources {
  std::string root = "/";
};

// "MemAvailable:  22675928 kB" in /proc/meminfo text -> bytes; nullopt when absent.
std::optional<uint64_t> parse_meminfo_available(const std::string& meminfo);

// The tightest cgroup memory limit above this process (v2 memory.max, v1
// memory.limit_in_bytes, on the process's own cgroup and each ancestor), and what is left under
// it: limit - (usage - inactive file pages, which the kernel reclaims before it kills).
// nullopt when no level sets a limit.
struct CgroupMemory {
  uint64_t limit = 0;
  uint64_t left = 0;
};
std::optional<CgroupMemory> cgroup_memory(const MemorySources& src = {});

// min(physical RAM, cgroup limit): what "a fraction of RAM" means for this process.
uint64_t memory_limit_bytes(const MemorySources& src = {});

// min(MemAvailable, what the cgroup leaves); physical RAM when /proc/meminfo cannot be read,
// UINT64_MAX when nothing can.
uint64_t available_memory_bytes(const MemorySources& src = {});

}  // namespace kvserve
