// A probe of the machine's memory read bandwidth: the denominator of the decode roofline.
//
// Decoding one token reads every weight once, so tokens/s can never exceed
// bandwidth / weight_bytes. To measure the bandwidth that matters, the probe streams through a
// buffer far larger than the last-level cache with every thread of the pool (one core alone
// cannot saturate the memory controllers) and keeps the best of several passes. The buffer is
// huge-page advised like the weights, so TLB misses do not lower the figure.
#pragma once

#include <cstddef>
#include <vector>

#include "util/status.h"
#include "util/thread_pool.h"

namespace kvserve {

struct MemBandwidth {
  double gb_per_s = 0;  // best pass, 1 GB = 1e9 bytes
  double median_gb_per_s = 0;
  size_t buffer_bytes = 0;  // bytes read per pass
  int threads = 0;
  int passes = 0;
  std::vector<double> pass_gb_per_s;  // every pass, in the order run
};

// Two probes of the same buffer size taken as one: passes pooled, best and median over all.
MemBandwidth combine(const MemBandwidth& a, const MemBandwidth& b);

// Size of the largest CPU cache in bytes (sysfs, then sysconf); 0 when unknown.
size_t last_level_cache_bytes();

// Bytes the probe reads per pass when the caller does not choose: 1 GiB, or, on a machine
// with under 8 GiB of RAM, the larger of 8 x the LLC and 64 MiB.
size_t default_bandwidth_buffer_bytes();

// Streams `buffer_bytes` (0: the default above) `passes` times with all of pool's threads.
// invalid_argument for passes < 1 or a buffer under 1 MiB, out_of_memory when it cannot be had.
Expected<MemBandwidth> measure_read_bandwidth(ThreadPool& pool, size_t buffer_bytes = 0, int passes = 5);

}  // namespace kvserve
