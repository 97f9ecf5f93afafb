#include "util/membw.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "util/huge_pages.h"
#include "util/units.h"

namespace kvserve {
namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kGiB = size_t(1) << 30;
constexpr size_t kChunkBytes = 128;  // four 256-bit loads per loop iteration

// "32768K" / "1024K" / "32M" as written in /sys/devices/system/cpu/cpu0/cache/index*/size.
size_t parse_cache_size(const std::string& s) {
  if (s.empty()) return 0;
  size_t v = size_t(std::strtoull(s.c_str(), nullptr, 10));
  switch (s.back()) {
    case 'K':
      return v << 10;
    case 'M':
      return v << 20;
    case 'G':
      return v << 30;
    default:
      return v;
  }
}

// Sums the 64-bit words of [p, p + n) (n a multiple of kChunkBytes). Four independent
// accumulators keep several loads in flight; the sum is returned so the loads cannot be elided.
uint64_t sum_words(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += kChunkBytes) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (f >> s) best = std::max(best, parse_cache_size(s));
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (best == 0) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) best = size_t(l3);
  }
#endif
  return best;
}

size_t default_bandwidth_buffer_bytes() {
  const size_t ram = size_t(physical_memory_bytes());
  if (ram == 0 || ram >= 8 * kGiB) return kGiB;
  // Small machines: still well beyond the caches, without taking a large share of RAM.
  return std::max(8 * last_level_cache_bytes(), 64 * kMiB);
}

namespace {

// gb_per_s and median_gb_per_s from pass_gb_per_s (not empty).
void summarize_passes(MemBandwidth* r) {
  std::vector<double> rates = r->pass_gb_per_s;
  std::sort(rates.begin(), rates.end());
  r->gb_per_s = rates.back();
  const size_t n = rates.size();
  r->median_gb_per_s = n % 2 == 1 ? rates[n / 2] : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
}

}  // namespace

MemBandwidth combine(const MemBandwidth& a, const MemBandwidth& b) {
  if (a.pass_gb_per_s.empty()) return b;
  if (b.pass_gb_per_s.empty()) return a;
  MemBandwidth r = a;
  r.pass_gb_per_s.insert(r.pass_gb_per_s.end(), b.pass_gb_per_s.begin(), b.pass_gb_per_s.end());
  r.passes = a.passes + b.passes;
  summarize_passes(&r);
  return r;
}

Expected<MemBandwidth> measure_read_bandwidth(ThreadPool& pool, size_t buffer_bytes, int passes) {
  if (passes < 1) return invalid_argument("bandwidth probe: passes must be >= 1");
  if (buffer_bytes == 0) buffer_bytes = default_bandwidth_buffer_bytes();
  if (buffer_bytes < kMiB) return invalid_argument("bandwidth probe: buffer must be at least 1 MiB");
  const int nt = pool.num_threads();
  // One equal slice per thread, each a whole number of chunks.
  const size_t slice = buffer_bytes / size_t(nt) / kChunkBytes * kChunkBytes;
  const size_t total = slice * size_t(nt);
  // On huge pages like the packed weights and the KV arena the roofline compares against
  // (util/huge_pages.h). In 4 KiB pages, on our 2-vCPU VM: faulting 1 GiB took ~2 s (huge pages:
  // ~75 ms), the first pass after it read 5-11 GB/s (dragging each probe's median down) and the
  // best pass 62-65 GB/s against 66-72 in huge pages.
  const size_t align = huge_page_alignment(total, 64);
  const size_t alloc_bytes = round_up_to(total, align);
  void* raw = std::aligned_alloc(align, alloc_bytes);
  if (raw == nullptr)
    return out_of_memory("bandwidth probe: cannot allocate " + std::to_string(total) + " bytes");
  advise_huge_pages(raw, alloc_bytes, align);
  auto* buf = static_cast<uint8_t*>(raw);
  // Each thread writes its own slice first, so pages are faulted in before timing and, on a
  // NUMA machine, land on the node of the thread that will read them.
  pool.parallel_for(nt, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t)
      for (size_t i = 0; i < slice; i += 8) {
        uint64_t v = i ^ uint64_t(t);
        std::memcpy(buf + size_t(t) * slice + i, &v, 8);
      }
  });
  std::atomic<uint64_t> sink{0};
  std::vector<double> rates;
  for (int p = 0; p < passes; ++p) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(nt, [&](int64_t b, int64_t e, int) {
      uint64_t s = 0;
      for (int64_t t = b; t < e; ++t) s += sum_words(buf + size_t(t) * slice, slice);
      sink.fetch_add(s, std::memory_order_relaxed);
    });
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(double(total) / sec / 1e9);
  }
  std::free(raw);
  MemBandwidth r;
  r.pass_gb_per_s = rates;
  summarize_passes(&r);
  r.buffer_bytes = total;
  r.threads = nt;
  r.passes = passes;
  // The sink is read so the compiler must keep every load of the passes above.
  if (sink.load() == 0x5eed) r.passes = passes;
  return r;
}

}  // namespace kvserve
