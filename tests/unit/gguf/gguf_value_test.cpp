// GgufValue rendering and the typed getters' results and errors.
#include <gtest/gtest.h>

#include "gguf_test_util.h"

namespace kvserve {
namespace {

using namespace gguf_test;

class GgufGetters : public ::testing::Test {
 protected:
  void SetUp() override {
    GgufWriter w;
    w.add_string("s", "text");
    w.add_uint32("n", 7);
    w.add_int8("neg", -5);
    w.add_float32("x", 0.25f);
    w.add_bool("b", true);
    w.add_uint64("big", std::numeric_limits<uint64_t>::max());
    w.add_array_int("arr", GgufValueType::INT32, {1, 2});
    path_ = temp_path("getters.gguf");
    ASSERT_TRUE(w.write_file(path_).ok());
    auto f = GgufFile::open(path_);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    f_ = *f;
  }
  std::string path_;
  std::shared_ptr<GgufFile> f_;
};

TEST_F(GgufGetters, ValuesOfMatchingTypes) {
  EXPECT_EQ(*f_->get_string("s"), "text");
  EXPECT_EQ(*f_->get_int("n"), 7);
  EXPECT_EQ(*f_->get_int("neg"), -5);
  EXPECT_EQ(*f_->get_float("x"), 0.25);
  EXPECT_EQ(*f_->get_float("n"), 7.0);  // integers widen to float
  EXPECT_TRUE(*f_->get_bool("b"));
  EXPECT_EQ(*f_->get_float("big"), 18446744073709551615.0);
}

TEST_F(GgufGetters, MissingKeyNamesFileAndKey) {
  auto r = f_->get_int("nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), path_ + ": metadata key 'nope' not found");
  EXPECT_EQ(f_->find("nope"), nullptr);
  EXPECT_EQ(f_->find_tensor("nope"), nullptr);
}

TEST_F(GgufGetters, WrongTypeNamesBothTypes) {
  auto r = f_->get_int("s");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), path_ + ": metadata key 's' has type string, expected an integer");
  EXPECT_HAS_SUBSTR(f_->get_string("n").status().message(), "'n' has type uint32, expected string");
  EXPECT_HAS_SUBSTR(f_->get_bool("x").status().message(), "'x' has type float32, expected bool");
  EXPECT_HAS_SUBSTR(f_->get_float("arr").status().message(), "'arr' has type array, expected a number");
  EXPECT_HAS_SUBSTR(f_->get_int("big").status().message(),
                    "'big' value 18446744073709551615 does not fit int64");
}

TEST_F(GgufGetters, DefaultsOnMissingOrWrongType) {
  EXPECT_EQ(f_->get_int_or("nope", 3), 3);
  EXPECT_EQ(f_->get_int_or("s", 3), 3);
  EXPECT_EQ(f_->get_int_or("n", 3), 7);
  EXPECT_EQ(f_->get_float_or("nope", 1.5), 1.5);
  EXPECT_EQ(f_->get_string_or("n", "d"), "d");
  EXPECT_EQ(f_->get_string_or("s", "d"), "text");
  EXPECT_FALSE(f_->get_bool_or("nope", false));
  EXPECT_TRUE(f_->get_bool_or("b", false));
}

TEST(GgufValueText, ScalarsAndArrays) {
  EXPECT_EQ(gguf_int_value(GgufValueType::INT32, -7).to_string(), "-7");
  EXPECT_EQ(gguf_uint64_value(18446744073709551615ull).to_string(), "18446744073709551615");
  EXPECT_EQ(gguf_float_value(GgufValueType::FLOAT32, double(1e-5f)).to_string(), "1e-05");
  EXPECT_EQ(gguf_bool_value(true).to_string(), "true");
  EXPECT_EQ(gguf_string_value("a\"b\n").to_string(), "\"a\\\"b\\x0A\"");
  EXPECT_EQ(gguf_array_value(GgufValueType::INT32, std::vector<int64_t>{1, 2, 3}).to_string(), "[1, 2, 3]");
  EXPECT_EQ(gguf_array_value(GgufValueType::INT32, std::vector<int64_t>{1, 2, 3}).to_string(2),
            "[1, 2, ... (3 items)]");
  EXPECT_EQ(gguf_array_value(GgufValueType::BOOL, std::vector<int64_t>{1, 0}).to_string(), "[true, false]");
  EXPECT_EQ(gguf_array_value(GgufValueType::UINT64, std::vector<int64_t>{-1}).to_string(),
            "[18446744073709551615]");
  EXPECT_EQ(gguf_array_value(std::vector<std::string>{"<s>", "\xE2\x96\x81the"}).to_string(),
            "[\"<s>\", \"\xE2\x96\x81the\"]");
  EXPECT_EQ(gguf_array_value(std::vector<std::string>{}).to_string(), "[]");
}

TEST(GgufValueText, TypeNames) {
  EXPECT_STREQ(gguf_value_type_name(GgufValueType::UINT8), "uint8");
  EXPECT_STREQ(gguf_value_type_name(GgufValueType::FLOAT64), "float64");
  EXPECT_STREQ(gguf_value_type_name(GgufValueType::ARRAY), "array");
  EXPECT_STREQ(gguf_value_type_name(GgufValueType(99)), "unknown");
}

TEST(GgufValueText, ArraySizeOfScalarIsZero) {
  EXPECT_EQ(gguf_string_value("x").array_size(), 0u);
  GgufTensorInfo t;
  t.n_dims = 3;
  t.ne[0] = 8;
  t.ne[1] = 2;
  t.ne[2] = 5;
  EXPECT_EQ(t.shape_string(), "[8, 2, 5]");
  EXPECT_EQ(t.nelements(), 80);
  EXPECT_EQ(t.nrows(), 10);
}

}  // namespace
}  // namespace kvserve
