// A scratch folder standing in for "/" (the /proc and /sys files the cgroup readers look at),
// removed when the test ends.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kvserve::testing {

class FakeRoot {
 public:
  FakeRoot() {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvs_root_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~FakeRoot() { std::filesystem::remove_all(dir_); }
  FakeRoot(const FakeRoot&) = delete;
  FakeRoot& operator=(const FakeRoot&) = delete;
  // Writes `text` at the absolute `path` under the fake root.
  void write(const std::string& path, const std::string& text) {
    const std::filesystem::path p = dir_ / path.substr(1);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string path() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace kvserve::testing
