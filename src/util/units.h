// Parsing of human-friendly quantities from flags and config files.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace kvserve {

// "512MiB", "2GiB", "1.5GB", "1048576", "64k" -> bytes. IEC (KiB/MiB/GiB/TiB, K/M/G/T) are
// powers of 1024; SI with "B" (KB/MB/GB/TB) are powers of 1000.
Expected<uint64_t> parse_bytes(const std::string& text);

// A memory budget: either bytes as above, or a fraction in (0, 1] of physical RAM, or of the
// cgroup's memory limit when that is lower (util/memory_info.h) ("0.6").
Expected<uint64_t> parse_memory_budget(const std::string& text);

uint64_t physical_memory_bytes();
// "1.50 MiB" style rendering.
std::string format_bytes(uint64_t bytes);

}  // namespace kvserve
