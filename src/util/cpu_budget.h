// How many CPUs this process may keep busy: what the default thread counts are sized by.
// std::thread::hardware_concurrency() counts the machine's online CPUs, so in a container limited
// to 2 CPUs on a 64-core host (or under `taskset -c 0,1`) it says 64, and 64 spinning pool workers
// on 2 CPUs decode several times slower than 2 (measured: 16 threads on a 2-vCPU VM, 64 tok/s
// against 239).
#pragma once

#include <optional>
#include <string>

namespace kvserve {

// The files read, relative to a root ("/" on a live system; tests pass a fake tree).
struct CpuSources {
  std::string root = "/";
};

// The tightest cgroup CPU bandwidth limit above this process, in CPUs (v2 cpu.max "QUOTA
// PERIOD", v1 cpu.cfs_quota_us / cpu.cfs_period_us; a container's --cpus); nullopt when no level
// sets one.
std::optional<double> cgroup_cpu_limit(const CpuSources& src = {});

// The CPUs the affinity mask allows (taskset, cpusets), capped by cgroup_cpu_limit rounded up;
// at least 1. Falls back to hardware_concurrency() where the mask cannot be read.
int usable_cpus(const CpuSources& src = {});

}  // namespace kvserve
