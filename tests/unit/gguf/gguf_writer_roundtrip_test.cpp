// GgufWriter → GgufFile round trips for every value type and tensor layout, and the
// writer's own rejection of invalid input.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "gguf_test_util.h"

namespace kvserve {
namespace {

using namespace gguf_test;

std::shared_ptr<GgufFile> write_and_open(const GgufWriter& w, const std::string& path) {
  Status st = w.write_file(path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? *f : nullptr;
}

TEST(GgufWriterRoundTrip, EveryScalarType) {
  GgufWriter w;
  w.add_uint8("u8", 255);
  w.add_int8("i8", -128);
  w.add_uint16("u16", 65535);
  w.add_int16("i16", -32768);
  w.add_uint32("u32", 4294967295u);
  w.add_int32("i32", std::numeric_limits<int32_t>::min());
  w.add_uint64("u64", std::numeric_limits<uint64_t>::max());
  w.add_uint64("u64.small", 42);
  w.add_int64("i64", std::numeric_limits<int64_t>::min());
  w.add_float32("f32", 0.1f);
  w.add_float64("f64", 1e300);
  w.add_bool("bool.t", true);
  w.add_bool("bool.f", false);
  w.add_string("str", "h\xC3\xA9llo");
  w.add_string("str.empty", "");
  w.add_string("str.nul", std::string("a\0b", 3));
  auto f = write_and_open(w, temp_path("scalars.gguf"));
  ASSERT_TRUE(f);
  ASSERT_EQ(f->metadata().size(), 16u);
  EXPECT_EQ(f->metadata()[0].first, "u8");  // file order kept

  EXPECT_EQ(f->find("u8")->type, GgufValueType::UINT8);
  EXPECT_EQ(*f->get_int("u8"), 255);
  EXPECT_EQ(f->find("u8")->u, 255u);
  EXPECT_EQ(*f->get_int("i8"), -128);
  EXPECT_EQ(*f->get_int("u16"), 65535);
  EXPECT_EQ(*f->get_int("i16"), -32768);
  EXPECT_EQ(*f->get_int("u32"), 4294967295LL);
  EXPECT_EQ(*f->get_int("i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(f->find("u64")->u, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f->get_int("u64.small"), 42);
  EXPECT_EQ(*f->get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->find("f32")->type, GgufValueType::FLOAT32);
  EXPECT_EQ(*f->get_float("f32"), double(0.1f));
  EXPECT_EQ(*f->get_float("f64"), 1e300);
  EXPECT_TRUE(*f->get_bool("bool.t"));
  EXPECT_FALSE(*f->get_bool("bool.f"));
  EXPECT_EQ(*f->get_string("str"), "h\xC3\xA9llo");
  EXPECT_EQ(*f->get_string("str.empty"), "");
  EXPECT_EQ(*f->get_string("str.nul"), std::string("a\0b", 3));
  for (const char* k : {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64"})
    EXPECT_TRUE(f->find(k)->is_integer()) << k;
  EXPECT_TRUE(f->find("f64")->is_float());
  EXPECT_FALSE(f->find("str")->is_integer());
}

TEST(GgufWriterRoundTrip, EveryArrayType) {
  GgufWriter w;
  const std::vector<std::pair<GgufValueType, std::vector<int64_t>>> int_arrays = {
      {GgufValueType::UINT8, {0, 1, 255}},
      {GgufValueType::INT8, {-128, 0, 127}},
      {GgufValueType::UINT16, {0, 65535}},
      {GgufValueType::INT16, {-32768, 32767}},
      {GgufValueType::UINT32, {0, 4294967295LL}},
      {GgufValueType::INT32, {std::numeric_limits<int32_t>::min(), 7}},
      {GgufValueType::UINT64, {0, -1}},  // -1 is the bit pattern of UINT64_MAX
      {GgufValueType::INT64, {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}},
      {GgufValueType::BOOL, {1, 0, 1}},
  };
  for (const auto& [t, v] : int_arrays) w.add_array_int(std::string("arr.") + gguf_value_type_name(t), t, v);
  w.add_array_float("arr.float32", GgufValueType::FLOAT32, {0.5, -2.0, 1e-3f});
  w.add_array_float("arr.float64", GgufValueType::FLOAT64, {1e-300, 3.141592653589793});
  w.add_array_string("arr.string", {"a", "", "\xE2\x96\x81the", std::string(1000, 'x')});
  w.add_array_string("arr.empty", {});
  GgufValue inner =
      gguf_nested_array_value({gguf_array_value(GgufValueType::INT16, std::vector<int64_t>{-1, 2})});
  w.add_value("arr.nested",
              gguf_nested_array_value({gguf_array_value(GgufValueType::FLOAT64, std::vector<double>{1.5}),
                                       gguf_array_value(std::vector<std::string>{"p", "q"}), inner,
                                       gguf_nested_array_value({})}));
  ASSERT_TRUE(w.status().ok()) << w.status().to_string();
  auto f = write_and_open(w, temp_path("arrays.gguf"));
  ASSERT_TRUE(f);

  for (const auto& [t, v] : int_arrays) {
    const GgufValue* a = f->find(std::string("arr.") + gguf_value_type_name(t));
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->type, GgufValueType::ARRAY);
    EXPECT_EQ(a->elem_type, t);
    EXPECT_EQ(a->arr_int, v) << gguf_value_type_name(t);
    EXPECT_EQ(a->array_size(), v.size());
  }
  const GgufValue* f32 = f->find("arr.float32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->arr_float, (std::vector<double>{0.5, -2.0, double(1e-3f)}));
  EXPECT_EQ(f->find("arr.float64")->arr_float, (std::vector<double>{1e-300, 3.141592653589793}));
  EXPECT_EQ(f->find("arr.string")->arr_str,
            (std::vector<std::string>{"a", "", "\xE2\x96\x81the", std::string(1000, 'x')}));
  EXPECT_EQ(f->find("arr.empty")->array_size(), 0u);
  EXPECT_EQ(f->find("arr.empty")->elem_type, GgufValueType::STRING);

  const GgufValue* nested = f->find("arr.nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->elem_type, GgufValueType::ARRAY);
  ASSERT_EQ(nested->array_size(), 4u);
  EXPECT_EQ(nested->arr_nested[0].elem_type, GgufValueType::FLOAT64);
  EXPECT_EQ(nested->arr_nested[0].arr_float, std::vector<double>{1.5});
  EXPECT_EQ(nested->arr_nested[1].arr_str, (std::vector<std::string>{"p", "q"}));
  ASSERT_EQ(nested->arr_nested[2].array_size(), 1u);
  EXPECT_EQ(nested->arr_nested[2].arr_nested[0].arr_int, (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(nested->arr_nested[3].array_size(), 0u);
  EXPECT_EQ(nested->to_string(), "[[1.5], [\"p\", \"q\"], [[-1, 2]], []]");
}

TEST(GgufWriterRoundTrip, TensorsOfSeveralTypesAndRanks) {
  GgufWriter w;
  w.set_alignment(64);
  struct Spec {
    const char* name;
    GgmlType type;
    std::vector<int64_t> shape;
  };
  const std::vector<Spec> specs = {
      {"t.f32", GgmlType::F32, {3}},          {"t.f16", GgmlType::F16, {5, 2}},
      {"t.q4_0", GgmlType::Q4_0, {64, 3, 2}}, {"t.q4_K", GgmlType::Q4_K, {256, 1, 1, 2}},
      {"t.q8_0", GgmlType::Q8_0, {32, 4}},    {"t.i32", GgmlType::I32, {7}},
      {"t.empty", GgmlType::F32, {0, 4}},
  };
  std::vector<Bytes> datas;
  for (size_t k = 0; k < specs.size(); ++k) {
    int64_t rows = 1;
    for (size_t d = 1; d < specs[k].shape.size(); ++d) rows *= specs[k].shape[d];
    datas.push_back(
        pattern_bytes(ggml_row_size(specs[k].type, specs[k].shape[0]) * size_t(rows), uint8_t(k)));
    w.add_tensor(specs[k].name, specs[k].type, specs[k].shape, datas.back());
  }
  auto f = write_and_open(w, temp_path("tensors.gguf"));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->file_size() % 64, 0u);
  ASSERT_EQ(f->tensors().size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const GgufTensorInfo& t = f->tensors()[k];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, specs[k].name);
    EXPECT_EQ(t.type, specs[k].type);
    EXPECT_EQ(t.n_dims, int(specs[k].shape.size()));
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(t.ne[d], d < t.n_dims ? specs[k].shape[size_t(d)] : 1);
    }
    EXPECT_EQ(t.offset % 64, 0u);
    ASSERT_EQ(t.nbytes, datas[k].size());
    EXPECT_EQ(Bytes(t.data, t.data + t.nbytes), datas[k]);
    EXPECT_EQ(f->find_tensor(specs[k].name), &t);
  }
  EXPECT_EQ(f->tensors()[3].shape_string(), "[256, 1, 1, 2]");
}

TEST(GgufWriterRoundTrip, ToBytesMatchesWriteFile) {
  GgufWriter w = sample_writer();
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.ok());
  const std::string path = temp_path("sample.gguf");
  ASSERT_TRUE(w.write_file(path).ok());
  EXPECT_EQ(read_bytes(path), *bytes);
}

// Copying every kv and tensor of a llama.cpp-written file reproduces it byte for byte, so
// the writer follows the same layout conventions and GgufValue carries every value exactly.
TEST(GgufWriterRoundTrip, RewritesStories260KIdentically) {
  const std::string src = models_dir() + "/stories260K.gguf";
  auto f = GgufFile::open(src);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  GgufWriter w;
  for (const auto& [key, value] : (*f)->metadata()) w.add_value(key, value);
  for (const auto& t : (*f)->tensors()) {
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), std::span(t.data, t.nbytes));
  }
  auto out = w.to_bytes();
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(*out == read_bytes(src)) << "rewritten size " << out->size();
}

TEST(GgufWriterRoundTrip, SetValueReplacesInPlace) {
  GgufWriter w;
  w.add_uint32("a", 1);
  w.add_string("b", "x");
  w.set_value("a", gguf_string_value("now a string"));
  w.set_value("c", gguf_bool_value(true));
  auto f = write_and_open(w, temp_path("set.gguf"));
  ASSERT_TRUE(f);
  ASSERT_EQ(f->metadata().size(), 3u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(*f->get_string("a"), "now a string");
  EXPECT_TRUE(*f->get_bool("c"));
}

TEST(GgufWriterRoundTrip, EmptyFileHasOnlyHeader) {
  GgufWriter w;
  auto f = write_and_open(w, temp_path("empty_model.gguf"));
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->metadata().empty());
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->file_size(), 32u);  // 24-byte header padded to 32
}

void expect_writer_error(const GgufWriter& w, const std::string& part) {
  EXPECT_FALSE(w.status().ok());
  EXPECT_HAS_SUBSTR(w.status().message(), part);
  auto b = w.to_bytes();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), w.status().message());
}

TEST(GgufWriterErrors, DuplicateKey) {
  GgufWriter w;
  w.add_uint32("k", 1);
  w.add_string("k", "again");
  expect_writer_error(w, "duplicate metadata key 'k'");
}

TEST(GgufWriterErrors, ValueOutOfRange) {
  GgufWriter w;
  w.add_array_int("bytes", GgufValueType::UINT8, {1, 256});
  expect_writer_error(w, "'bytes' element #1 value 256 does not fit uint8");
  GgufWriter w2;
  w2.add_value("v", gguf_int_value(GgufValueType::INT8, 200));
  expect_writer_error(w2, "'v' value 200 does not fit int8");
  GgufWriter w3;
  w3.add_array_int("b", GgufValueType::BOOL, {2});
  expect_writer_error(w3, "does not fit bool");
  GgufWriter w4;
  w4.add_array_int("f", GgufValueType::FLOAT32, {1});
  expect_writer_error(w4, "add_array_int needs an integer or bool element type");
}

TEST(GgufWriterErrors, InconsistentArrayValue) {
  GgufWriter w;
  GgufValue v = gguf_array_value(GgufValueType::INT32, std::vector<int64_t>{1});
  v.arr_str.push_back("stray");
  w.add_value("mixed", v);
  expect_writer_error(w, "with elements in another type's vector");
  GgufWriter w2;
  GgufValue deep = gguf_array_value(GgufValueType::UINT8, std::vector<int64_t>{});
  for (int k = 0; k < 17; ++k) deep = gguf_nested_array_value({deep});
  w2.add_value("deep", deep);
  expect_writer_error(w2, "nests arrays deeper than 16");
}

TEST(GgufWriterErrors, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w;
    w.set_alignment(a);
    expect_writer_error(w,
                        "'general.alignment' is " + std::to_string(a) + " (must be a nonzero power of two)");
  }
  GgufWriter w;
  w.add_uint64("general.alignment", 32);
  expect_writer_error(w, "'general.alignment' has type uint64 (must be uint32)");
}

TEST(GgufWriterErrors, BadTensors) {
  struct Case {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    size_t nbytes;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"", GgmlType::F32, {1}, 4, "empty tensor name"},
      {std::string(64, 'n'), GgmlType::F32, {1}, 4, "name is longer than 63 bytes"},
      {"t", GgmlType(77), {1}, 4, "unknown type id 77"},
      {"t", GgmlType::F32, {}, 0, "has 0 dims (must be 1..4)"},
      {"t", GgmlType::F32, {1, 1, 1, 1, 1}, 4, "has 5 dims (must be 1..4)"},
      {"t", GgmlType::F32, {4, -1}, 0, "negative ne[1]"},
      {"t", GgmlType::Q4_0, {33}, 18, "ne[0] = 33 is not a multiple of the q4_0 block size 32"},
      {"t", GgmlType::F32, {int64_t(1) << 62, 8}, 0, "shape overflows"},
      {"t", GgmlType::F32, {4}, 15, "needs 16 bytes of data but got 15"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.error);
    GgufWriter w;
    w.add_tensor(c.name, c.type, c.shape, Bytes(c.nbytes));
    expect_writer_error(w, c.error);
  }
  GgufWriter w;
  w.add_tensor("same", GgmlType::F32, {1}, Bytes(4));
  w.add_tensor("same", GgmlType::F32, {1}, Bytes(4));
  expect_writer_error(w, "duplicate tensor name 'same'");
}

TEST(GgufWriterErrors, FirstErrorSticks) {
  GgufWriter w;
  w.add_tensor("t", GgmlType::F32, {4}, Bytes(3));
  w.add_uint32("k", 1);
  w.add_uint32("k", 1);
  expect_writer_error(w, "needs 16 bytes of data but got 3");
  EXPECT_EQ(w.num_kv(), 0u);
}

TEST(GgufWriterErrors, UnwritablePath) {
  GgufWriter w = sample_writer();
  const std::string path = "/nonexistent-dir-kvs/x.gguf";
  Status st = w.write_file(path);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_HAS_SUBSTR(st.message(), path);
}

// rename() over an existing node replaces the node: a FIFO (or /dev/null, for a root user) would
// become a model file. The writer refuses and leaves the node as it was.
TEST(GgufWriterErrors, RefusesAnExistingPathThatIsNotARegularFile) {
  GgufWriter w = sample_writer();
  const std::string fifo = temp_path("fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const Status& st : {w.write_file(fifo), GgufWriter::check_writable(fifo)}) {
    ASSERT_FALSE(st.ok());
    EXPECT_HAS_SUBSTR(st.message(), "not a regular file");
  }
  struct stat s {};
  ASSERT_EQ(::lstat(fifo.c_str(), &s), 0);
  EXPECT_TRUE(S_ISFIFO(s.st_mode));
  ::unlink(fifo.c_str());
}

// Writing to a symbolic link replaces the file it names; the link stays a link.
TEST(GgufWriterRoundTrip, WritesThroughASymlink) {
  GgufWriter w = sample_writer();
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.ok());
  const std::string target = temp_path("target.gguf");
  const std::string link = temp_path("link.gguf");
  {
    std::FILE* f = std::fopen(target.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("old", f);
    std::fclose(f);
  }
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ASSERT_TRUE(w.write_file(link).ok());
  struct stat s {};
  ASSERT_EQ(::lstat(link.c_str(), &s), 0);
  EXPECT_TRUE(S_ISLNK(s.st_mode));
  EXPECT_EQ(read_bytes(target), *bytes);
  ::unlink(link.c_str());
  ::unlink(target.c_str());
}

}  // namespace
}  // namespace kvserve
