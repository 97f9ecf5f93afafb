#include "metrics/process.h"

#include <unistd.h>

#include <cstdio>

namespace kvserve::metrics {

uint64_t process_resident_memory_bytes() {
  // statm: size resident shared text lib data dt, in pages.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? uint64_t(resident) * uint64_t(page) : 0;
}

}  // namespace kvserve::metrics
