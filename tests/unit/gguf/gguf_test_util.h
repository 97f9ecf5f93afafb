// Helpers shared by the gguf tests: temp files, a small valid sample file built with
// GgufWriter, and locators that find a field's byte offset so a test can corrupt exactly it.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

// gtest alone (no gmock) is linked, so a substring check of our own.
#define EXPECT_HAS_SUBSTR(text, part)                        \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "message: " << (text) << "\nexpected to contain: " << (part)

namespace kvserve::gguf_test {

using Bytes = std::vector<uint8_t>;

inline std::string shared_dir() { return KVS_SHARED_DIR; }
inline std::string models_dir() { return shared_dir() + "/models"; }

// The paths temp_path handed out during the running test.
inline std::vector<std::string>& temp_paths_of_this_test() {
  static std::vector<std::string> paths;
  return paths;
}
// Removes them when the test ends, passed or failed: a run leaves nothing in the temp dir (the
// failure messages name the paths, and rerunning one test recreates its files).
class RemoveTempFiles : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo&) override {
    for (const std::string& p : temp_paths_of_this_test()) std::remove(p.c_str());
    temp_paths_of_this_test().clear();
  }
};
// Registered once per test binary, before gtest_main runs the tests (listeners take ownership).
inline const bool kRemoveTempFilesRegistered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new RemoveTempFiles);
  return true;
}();

// A per-test file path under the gtest temp dir, so messages can be checked for the path;
// removed when the test ends.
inline std::string temp_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string path =
      ::testing::TempDir() + "kvs_gguf_" + info->test_suite_name() + "_" + info->name() + "_" + name;
  temp_paths_of_this_test().push_back(path);
  return path;
}

inline void write_bytes(const std::string& path, const uint8_t* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(n));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}
inline void write_bytes(const std::string& path, const Bytes& b) { write_bytes(path, b.data(), b.size()); }

// Rewrites a same-size file in place. Avoids O_TRUNC, after which ext4 flushes the data on
// close (auto_da_alloc) and a loop of thousands of rewrites crawls on a busy disk.
inline void overwrite_bytes(const std::string& path, const Bytes& b) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, b.data(), b.size(), 0), ssize_t(b.size())) << path;
  ASSERT_EQ(::ftruncate(fd, off_t(b.size())), 0) << path;
  ::close(fd);
}

inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

template <typename T>
void poke(Bytes& b, size_t offset, T v) {
  ASSERT_LE(offset + sizeof v, b.size());
  std::memcpy(b.data() + offset, &v, sizeof v);
}
template <typename T>
T peek(const Bytes& b, size_t offset) {
  T v{};
  EXPECT_LE(offset + sizeof v, b.size());
  if (offset + sizeof v <= b.size()) std::memcpy(&v, b.data() + offset, sizeof v);
  return v;
}

// Offset of the first occurrence of `needle`, or npos.
inline size_t find_bytes(const Bytes& b, std::string_view needle) {
  auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  return it == b.end() ? std::string::npos : size_t(it - b.begin());
}

// Byte offsets of one metadata entry's fields, located by its (unique) key text.
struct KvPos {
  size_t key_len;  // uint64 length of the key
  size_t type;     // uint32 value type
  size_t value;    // first byte of the value (an array's elem type, a string's length, ...)
};
inline KvPos find_kv(const Bytes& b, std::string_view key) {
  size_t at = find_bytes(b, key);
  EXPECT_NE(at, std::string::npos) << "key " << key;
  return {at - 8, at + key.size(), at + key.size() + 4};
}

// Byte offsets of one tensor info's fields, located by its (unique) name text.
struct TensorPos {
  size_t name_len;
  size_t n_dims;
  size_t ne0;  // ne[d] is at ne0 + 8 * d
  size_t type;
  size_t offset;
};
inline TensorPos find_tensor_info(const Bytes& b, std::string_view name) {
  size_t at = find_bytes(b, name);
  EXPECT_NE(at, std::string::npos) << "tensor " << name;
  TensorPos p{};
  p.name_len = at - 8;
  p.n_dims = at + name.size();
  p.ne0 = p.n_dims + 4;
  p.type = p.ne0 + 8 * peek<uint32_t>(b, p.n_dims);
  p.offset = p.type + 4;
  return p;
}

// Header field offsets (layout items 1..4 of gguf_file.h).
constexpr size_t kVersionAt = 4;
constexpr size_t kNumTensorsAt = 8;
constexpr size_t kNumKvAt = 16;

inline Bytes pattern_bytes(size_t n, uint8_t seed) {
  Bytes b(n);
  for (size_t k = 0; k < n; ++k) b[k] = uint8_t(seed + k * 7);
  return b;
}

// A small valid file exercising every section: scalars, a string, arrays (strings, ints,
// floats, nested), a custom alignment, and tensors of a plain and a block-quantized type.
// Key and tensor names are unique byte strings so the locators above find them.
inline GgufWriter sample_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.set_alignment(64);
  w.add_uint32("llama.block_count", 2);
  w.add_float32("llama.rms_eps", 1e-5f);
  w.add_bool("sample.flag", true);
  w.add_array_string("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "hello"});
  w.add_array_float("tokenizer.ggml.scores", GgufValueType::FLOAT32, {0.0, -1.5, 2.25, 3.0});
  w.add_array_int("tokenizer.ggml.token_type", GgufValueType::INT32, {2, 3, 3, 1});
  w.add_value("sample.nested",
              gguf_nested_array_value({gguf_array_value(GgufValueType::UINT8, std::vector<int64_t>{1, 2}),
                                       gguf_array_value(std::vector<std::string>{"x"})}));
  w.add_uint64("sample.u64", 1234567890123ull);
  w.add_tensor("tok_embd", GgmlType::F32, {4, 3}, pattern_bytes(48, 1));
  w.add_tensor("blk.q8", GgmlType::Q8_0, {64, 2}, pattern_bytes(34 * 4, 2));
  w.add_tensor("out_norm", GgmlType::F32, {4}, pattern_bytes(16, 3));
  return w;
}

inline Bytes sample_bytes() {
  auto b = sample_writer().to_bytes();
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? *b : Bytes{};
}

}  // namespace kvserve::gguf_test
