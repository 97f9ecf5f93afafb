// Corrupt and truncated files: each must yield a non-ok Status whose message names the file
// and the offending field, and none may crash or read out of bounds (run under ASan too).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <random>

#include "gguf_test_util.h"

namespace kvserve {
namespace {

using namespace gguf_test;

constexpr uint64_t kHuge = uint64_t(1) << 60;

// Writes `bytes` to a temp file, opens it, and checks the failure names the path and
// contains every part in `parts`. Returns the status code for further checks.
StatusCode expect_open_fails(const Bytes& bytes, const std::string& file_name,
                             std::initializer_list<std::string> parts) {
  const std::string path = temp_path(file_name);
  write_bytes(path, bytes);
  auto f = GgufFile::open(path);
  EXPECT_FALSE(f.ok()) << file_name << " opened although corrupt";
  if (f.ok()) return StatusCode::kOk;
  EXPECT_HAS_SUBSTR(f.status().message(), path + ": ");
  for (const auto& p : parts) EXPECT_HAS_SUBSTR(f.status().message(), p);
  return f.status().code();
}

TEST(GgufCorrupt, SampleIsValid) {
  const std::string path = temp_path("sample.gguf");
  write_bytes(path, sample_bytes());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->tensors().size(), 3u);
}

TEST(GgufCorrupt, BadMagic) {
  Bytes b = sample_bytes();
  std::memcpy(b.data(), "GGML", 4);
  EXPECT_EQ(expect_open_fails(b, "magic.gguf", {"bad magic 'GGML' (expected 'GGUF')"}), StatusCode::kCorrupt);
  b[0] = 0x01;  // non-printable bytes are escaped, not dumped raw
  expect_open_fails(b, "magic2.gguf", {"bad magic '\\x01GML'"});
}

TEST(GgufCorrupt, UnsupportedVersions) {
  Bytes b = sample_bytes();
  poke<uint32_t>(b, kVersionAt, 1);
  EXPECT_EQ(expect_open_fails(b, "v1.gguf", {"GGUF version 1 is not supported"}), StatusCode::kUnsupported);
  poke<uint32_t>(b, kVersionAt, 4);
  expect_open_fails(b, "v4.gguf", {"unsupported GGUF version 4 (expected 2 or 3)"});
  poke<uint32_t>(b, kVersionAt, 0);
  expect_open_fails(b, "v0.gguf", {"unsupported GGUF version 0"});
  poke<uint32_t>(b, kVersionAt, 0x03000000);
  expect_open_fails(b, "big_endian.gguf", {"big-endian"});
}

TEST(GgufCorrupt, Version2IsAccepted) {
  Bytes b = sample_bytes();
  poke<uint32_t>(b, kVersionAt, 2);
  const std::string path = temp_path("v2.gguf");
  write_bytes(path, b);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->version(), 2u);
}

TEST(GgufCorrupt, EmptyFile) { expect_open_fails({}, "empty.gguf", {"empty file", "magic"}); }

TEST(GgufCorrupt, DirectoryAndMissingFile) {
  const std::string dir = ::testing::TempDir();
  auto d = GgufFile::open(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_HAS_SUBSTR(d.status().message(), dir);
  EXPECT_HAS_SUBSTR(d.status().message(), "not a regular file");

  const std::string missing = temp_path("does_not_exist.gguf");
  auto m = GgufFile::open(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_HAS_SUBSTR(m.status().message(), missing);
}

// Every prefix up to the data section, then a sample of prefixes that cut into tensor
// bytes: none may parse, and each names the file and what was being read.
void check_truncations(const Bytes& full, const std::string& label) {
  const std::string path = temp_path(label);
  write_bytes(path, full);
  auto whole = GgufFile::open(path);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const size_t data_offset = (*whole)->data_offset();
  size_t data_end = data_offset;
  for (const auto& t : (*whole)->tensors())
    data_end = std::max<size_t>(data_end, data_offset + t.offset + t.nbytes);
  ASSERT_GT(data_end, data_offset) << "the file needs tensor bytes for the data-section cases";

  std::vector<size_t> lengths;
  for (size_t n = 0; n <= data_offset; ++n) lengths.push_back(n);
  const size_t step = std::max<size_t>(1, (data_end - data_offset) / 64);
  for (size_t n = data_offset + 1; n < data_end; n += step) lengths.push_back(n);
  lengths.push_back(data_end - 1);

  // Longest first, shrinking the one file in place: truncate(2) writes no data, which keeps
  // ~15k cases fast even on a busy disk.
  std::sort(lengths.rbegin(), lengths.rend());
  for (size_t n : lengths) {
    ASSERT_EQ(::truncate(path.c_str(), off_t(n)), 0) << path;
    auto f = GgufFile::open(path);
    ASSERT_FALSE(f.ok()) << label << " truncated to " << n << " bytes opened";
    const std::string& msg = f.status().message();
    ASSERT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    const bool names_cause = msg.find("truncated while reading") != std::string::npos ||
                             msg.find("runs past end of file") != std::string::npos ||
                             msg.find("cannot fit") != std::string::npos ||
                             msg.find("empty file") != std::string::npos;
    ASSERT_TRUE(names_cause) << "length " << n << ": " << msg;
  }
}

TEST(GgufCorrupt, TruncatedSampleAtEveryPrefix) { check_truncations(sample_bytes(), "trunc_sample.gguf"); }

TEST(GgufCorrupt, TruncatedStories260KAtEveryPrefix) {
  check_truncations(read_bytes(models_dir() + "/stories260K.gguf"), "trunc_stories.gguf");
}

TEST(GgufCorrupt, TruncationMessageNamesField) {
  Bytes b = sample_bytes();
  // Cut inside the value of the 'llama.block_count' uint32.
  KvPos kv = find_kv(b, "llama.block_count");
  b.resize(kv.value + 2);
  expect_open_fails(b, "cut_value.gguf",
                    {"truncated while reading metadata key #2 'llama.block_count' value"});
  b.resize(kNumKvAt + 3);
  expect_open_fails(b, "cut_nkv.gguf", {"truncated while reading n_kv"});
}

TEST(GgufCorrupt, StringLengthPastEof) {
  Bytes b = sample_bytes();
  KvPos kv = find_kv(b, "general.architecture");
  poke<uint64_t>(b, kv.value, 1000000);  // the value string's length
  expect_open_fails(b, "strlen_value.gguf",
                    {"'general.architecture' value: string length 1000000 runs past end of file"});
  b = sample_bytes();
  poke<uint64_t>(b, kv.key_len, std::numeric_limits<uint64_t>::max());  // the key's own length
  expect_open_fails(b, "strlen_key.gguf",
                    {"metadata key #0: string length 18446744073709551615 runs past end"});
  b = sample_bytes();
  TensorPos t = find_tensor_info(b, "blk.q8");
  poke<uint64_t>(b, t.name_len, kHuge);
  expect_open_fails(b, "strlen_tensor.gguf", {"tensor #1 name: string length", "runs past end"});
  b = sample_bytes();
  size_t elem = find_bytes(b, "hello");  // last element of tokenizer.ggml.tokens
  poke<uint64_t>(b, elem - 8, 1u << 30);
  expect_open_fails(b, "strlen_elem.gguf",
                    {"'tokenizer.ggml.tokens' value element #3: string length 1073741824"});
}

TEST(GgufCorrupt, HugeArrayCount) {
  Bytes b = sample_bytes();
  KvPos kv = find_kv(b, "tokenizer.ggml.tokens");
  poke<uint64_t>(b, kv.value + 4, kHuge);
  expect_open_fails(b, "huge_str_array.gguf",
                    {"'tokenizer.ggml.tokens' value array count 1152921504606846976 cannot fit"});
  b = sample_bytes();
  kv = find_kv(b, "tokenizer.ggml.scores");
  poke<uint64_t>(b, kv.value + 4, std::numeric_limits<uint64_t>::max());  // count * 4 overflows
  expect_open_fails(b, "huge_f32_array.gguf", {"'tokenizer.ggml.scores' value array count", "cannot fit"});
  b = sample_bytes();
  kv = find_kv(b, "sample.nested");
  poke<uint64_t>(b, kv.value + 4, kHuge);
  expect_open_fails(b, "huge_nested.gguf", {"'sample.nested' value array count"});
}

TEST(GgufCorrupt, HugeCounts) {
  Bytes b = sample_bytes();
  poke<uint64_t>(b, kNumKvAt, kHuge);
  expect_open_fails(b, "huge_nkv.gguf", {"n_kv 1152921504606846976 cannot fit"});
  poke<uint64_t>(b, kNumKvAt, std::numeric_limits<uint64_t>::max());
  expect_open_fails(b, "max_nkv.gguf", {"n_kv 18446744073709551615 cannot fit"});
  b = sample_bytes();
  poke<uint64_t>(b, kNumTensorsAt, kHuge);
  expect_open_fails(b, "huge_ntensors.gguf", {"n_tensors 1152921504606846976 cannot fit"});
  // A count just past the real one fails where the extra entry would start.
  b = sample_bytes();
  poke<uint64_t>(b, kNumTensorsAt, 4);
  expect_open_fails(b, "one_more_tensor.gguf", {"tensor #3 has an empty name"});
  // Plausible but too-large counts parse on and fail where the bytes run out.
  b = sample_bytes();
  poke<uint64_t>(b, kNumKvAt, 50);
  expect_open_fails(b, "more_kv.gguf", {"metadata key #"});
}

TEST(GgufCorrupt, UnknownValueTypes) {
  Bytes b = sample_bytes();
  KvPos kv = find_kv(b, "llama.block_count");
  poke<uint32_t>(b, kv.type, 99);
  expect_open_fails(b, "kv_type.gguf", {"metadata key #2 'llama.block_count' has unknown value type 99"});
  b = sample_bytes();
  kv = find_kv(b, "tokenizer.ggml.token_type");
  poke<uint32_t>(b, kv.value, 13);
  expect_open_fails(b, "elem_type.gguf",
                    {"'tokenizer.ggml.token_type' value is an array of unknown value type 13"});
}

TEST(GgufCorrupt, BoolOutOfRange) {
  Bytes b = sample_bytes();
  KvPos kv = find_kv(b, "sample.flag");
  b[kv.value] = 2;
  expect_open_fails(b, "bool.gguf", {"'sample.flag' value is a bool with byte value 2"});
}

TEST(GgufCorrupt, DuplicateKey) {
  GgufWriter w = sample_writer();
  w.add_uint32("dup.kv_a", 1);
  w.add_uint32("dup.kv_b", 2);
  Bytes b = *w.to_bytes();
  b[find_bytes(b, "dup.kv_b") + 7] = 'a';
  expect_open_fails(b, "dup_key.gguf", {"'dup.kv_a' duplicates metadata key #"});
}

TEST(GgufCorrupt, ArraysNestedTooDeep) {
  // Hand-built: one kv whose value is 40 arrays each holding one array.
  Bytes b;
  auto put = [&](auto v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  };
  b.insert(b.end(), {'G', 'G', 'U', 'F'});
  put(uint32_t(3));
  put(uint64_t(0));
  put(uint64_t(1));
  put(uint64_t(4));
  b.insert(b.end(), {'d', 'e', 'e', 'p'});
  put(uint32_t(GgufValueType::ARRAY));
  for (int k = 0; k < 40; ++k) {
    put(uint32_t(GgufValueType::ARRAY));
    put(uint64_t(1));
  }
  expect_open_fails(b, "deep.gguf", {"'deep' value", "nests arrays deeper than 16 levels"});
}

TEST(GgufCorrupt, BadAlignmentValue) {
  for (uint32_t a : {0u, 3u, 96u}) {
    Bytes b = sample_bytes();
    poke<uint32_t>(b, find_kv(b, "general.alignment").value, a);
    expect_open_fails(b, "align" + std::to_string(a) + ".gguf",
                      {"'general.alignment' is " + std::to_string(a) + " (must be a nonzero power of two)"});
  }
  Bytes b = sample_bytes();
  poke<uint32_t>(b, find_kv(b, "general.alignment").type, uint32_t(GgufValueType::INT32));
  expect_open_fails(b, "align_type.gguf", {"'general.alignment' has type int32 (must be uint32)"});
}

TEST(GgufCorrupt, TensorPastEndOfFile) {
  Bytes b = sample_bytes();
  TensorPos t = find_tensor_info(b, "out_norm");
  poke<uint64_t>(b, t.offset, uint64_t(1) << 20);
  expect_open_fails(b, "past_eof.gguf",
                    {"tensor 'out_norm': data [offset ", ", 16 bytes] runs past end of file (size "});
  // An offset so large that data_offset + offset overflows.
  poke<uint64_t>(b, t.offset, std::numeric_limits<uint64_t>::max() - 63);
  expect_open_fails(b, "offset_overflow.gguf", {"tensor 'out_norm': data [offset", "runs past end of file"});
}

TEST(GgufCorrupt, UnknownTensorType) {
  for (uint32_t id : {77u, 31u, 36u, 0xFFFFFFFFu}) {
    Bytes b = sample_bytes();
    poke<uint32_t>(b, find_tensor_info(b, "tok_embd").type, id);
    expect_open_fails(b, "type" + std::to_string(id) + ".gguf",
                      {"tensor 'tok_embd' has unknown type id " + std::to_string(id)});
  }
}

TEST(GgufCorrupt, BadNumDims) {
  for (uint32_t n : {0u, 5u, 0xFFFFFFFFu}) {
    Bytes b = sample_bytes();
    poke<uint32_t>(b, find_tensor_info(b, "blk.q8").n_dims, n);
    expect_open_fails(b, "ndims" + std::to_string(n) + ".gguf",
                      {"tensor 'blk.q8' has n_dims " + std::to_string(n) + " (must be 1..4)"});
  }
}

TEST(GgufCorrupt, OverflowingShape) {
  Bytes b = sample_bytes();
  TensorPos t = find_tensor_info(b, "tok_embd");
  poke<uint64_t>(b, t.ne0, uint64_t(1) << 62);
  poke<uint64_t>(b, t.ne0 + 8, uint64_t(1) << 62);
  expect_open_fails(
      b, "elements_overflow.gguf",
      {"tensor 'tok_embd' shape [4611686018427387904, 4611686018427387904] has more elements than fit"});
  // Element count fits int64 but bytes (4 per f32 element) do not fit 64 bits.
  b = sample_bytes();
  poke<uint64_t>(b, t.ne0, uint64_t(1) << 62);
  poke<uint64_t>(b, t.ne0 + 8, 1);
  expect_open_fails(b, "bytes_overflow.gguf", {"tensor 'tok_embd' shape", "byte size overflows"});
  // Fits everything but the file.
  b = sample_bytes();
  poke<uint64_t>(b, t.ne0 + 8, uint64_t(1) << 40);
  expect_open_fails(b, "too_big.gguf", {"tensor 'tok_embd': data", "runs past end of file"});
}

TEST(GgufCorrupt, NegativeShape) {
  Bytes b = sample_bytes();
  poke<int64_t>(b, find_tensor_info(b, "tok_embd").ne0 + 8, -3);
  expect_open_fails(b, "negative.gguf", {"tensor 'tok_embd' has negative ne[1] = -3"});
}

TEST(GgufCorrupt, NeZeroNotMultipleOfBlockSize) {
  Bytes b = sample_bytes();
  poke<uint64_t>(b, find_tensor_info(b, "blk.q8").ne0, 48);
  expect_open_fails(b, "block.gguf",
                    {"tensor 'blk.q8' ne[0] = 48 is not a multiple of the q8_0 block size 32"});
}

TEST(GgufCorrupt, MisalignedOffset) {
  Bytes b = sample_bytes();
  TensorPos t = find_tensor_info(b, "blk.q8");
  poke<uint64_t>(b, t.offset, peek<uint64_t>(b, t.offset) + 8);
  expect_open_fails(b, "misaligned.gguf",
                    {"tensor 'blk.q8' offset", "is not a multiple of the alignment 64"});
}

TEST(GgufCorrupt, DuplicateTensorName) {
  GgufWriter w;
  w.add_tensor("dupa", GgmlType::F32, {2}, pattern_bytes(8, 0));
  w.add_tensor("dupb", GgmlType::F32, {2}, pattern_bytes(8, 1));
  Bytes b = *w.to_bytes();
  b[find_bytes(b, "dupb") + 3] = 'a';
  expect_open_fails(b, "dup_tensor.gguf", {"tensor #1 name 'dupa' duplicates tensor #0"});
}

// Random byte corruption of a valid file: whatever happens must be a clean Status (or, when
// the flipped byte is in tensor data or a value, a successful open). ASan checks the reads.
TEST(GgufCorrupt, RandomByteFlipsNeverCrash) {
  const Bytes base = sample_bytes();
  const std::string path = temp_path("fuzz.gguf");
  std::mt19937 rng(12345);
  int failures = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = base;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = uint8_t(rng());
    overwrite_bytes(path, b);
    auto f = GgufFile::open(path);
    if (!f.ok()) {
      ++failures;
      ASSERT_EQ(f.status().message().rfind(path + ": ", 0), 0u) << f.status().message();
      continue;
    }
    for (const auto& t : (*f)->tensors()) {
      ASSERT_LE((*f)->data_offset() + t.offset + t.nbytes, b.size());
      volatile uint8_t sink = t.nbytes ? t.data[t.nbytes - 1] : 0;  // touch the last byte
      (void)sink;
    }
    for (const auto& kv : (*f)->metadata()) (void)kv.second.to_string();
  }
  EXPECT_GT(failures, 100);
}

}  // namespace
}  // namespace kvserve
