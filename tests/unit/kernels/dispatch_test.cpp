// cpu_model() against the kernel's own reading of cpuid (/proc/cpuinfo): the kernel-table fillers
// pick microarchitecture-specific variants from it (single_stream_hints).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "kernels/vec_dot.h"

namespace kvserve {
namespace {

// The value of the first "key<tabs>: value" line of /proc/cpuinfo ("" when absent).
std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon) continue;
    return colon + 2 <= line.size() ? line.substr(colon + 2) : "";
  }
  return "";
}

TEST(CpuModel, MatchesProcCpuinfo) {
  const std::string vendor = cpuinfo_field("vendor_id");
  if (vendor.empty()) GTEST_SKIP() << "no /proc/cpuinfo vendor_id";
  const CpuModel cpu = cpu_model();
  EXPECT_EQ(cpu.amd, vendor == "AuthenticAMD");
  EXPECT_EQ(cpu.intel, vendor == "GenuineIntel");
  EXPECT_EQ(cpu.family, std::stoi(cpuinfo_field("cpu family")));
  EXPECT_EQ(cpu.model, std::stoi(cpuinfo_field("model")));
}

// The one family measured to stream faster without hints (see vec_dot.h).
TEST(CpuModel, SingleStreamHintsOffOnlyOnAmdFamily19h) {
  const CpuModel cpu = cpu_model();
  EXPECT_EQ(single_stream_hints(), !(cpu.amd && cpu.family == 0x19));
}

}  // namespace
}  // namespace kvserve
