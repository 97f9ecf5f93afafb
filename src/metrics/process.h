// Process-level figures for the exposition (process_resident_memory_bytes).
#pragma once

#include <cstdint>

namespace kvserve::metrics {

// Resident set size in bytes from /proc/self/statm; 0 when it cannot be read.
uint64_t process_resident_memory_bytes();

}  // namespace kvserve::metrics
