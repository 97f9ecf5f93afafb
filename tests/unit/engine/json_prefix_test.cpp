#include "engine/json_prefix.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace kvserve {
namespace {

// Feeds text byte by byte: -1 when all of it is accepted, else the index of the refused byte.
int refused_at(JsonPrefix* m, const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!m->feed_byte(uint8_t(text[i]))) return int(i);
  }
  return -1;
}

void expect_complete_object(const std::string& text) {
  JsonPrefix m;
  for (size_t i = 0; i < text.size(); ++i) {
    ASSERT_TRUE(m.feed_byte(uint8_t(text[i]))) << "byte " << i << " of " << text;
    // A proper prefix is never complete unless only whitespace is left.
    if (i + 1 < text.size() && m.complete()) {
      EXPECT_EQ(text.find_first_not_of(" \t\r\n", i + 1), std::string::npos) << text;
    }
  }
  EXPECT_TRUE(m.complete()) << text;
}

TEST(JsonPrefix, AcceptsObjectsByteByByte) {
  for (const char* text : {
           "{}",
           "\n{ }\n",
           R"({"a":1})",
           R"({"a":-0.5e+10,"b":[1,2.25,-3E2,0],"c":{"d":null,"e":true,"f":false}})",
           R"({"s":"esc \" \\ \/ \b \f \n \r \t \u00e9 \uFFFF"})",
           "{\"utf8\":\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"}",
           R"({"nested":[[[]],[{}],{"x":[{"y":[]}]}]})",
           "{\n  \"pretty\": [\n    1,\n    2\n  ]\n}",
           R"({"zero":0,"frac":0.0,"exp":1e5,"negexp":-1.5E-3})",
       })
    expect_complete_object(text);
}

TEST(JsonPrefix, RefusesWhatCannotContinueAnObject) {
  const std::pair<const char*, int> cases[] = {
      {"[1]", 0},  // the top level must be an object
      {"1", 0},
      {"{a:1}", 1},  // keys are strings
      {R"({"a" 1})", 5},
      {R"({"a":01})", 6},  // no leading zeros
      {R"({"a":1,})", 7},  // no trailing comma
      {R"({"a":.5})", 5},
      {R"({"a":1.})", 7},
      {R"({"a":1e})", 7},
      {R"({"a":-})", 6},
      {R"({"a":tru})", 8},
      {R"({"a":nul })", 8},
      {R"({"a":"\x"})", 7},  // unknown escape
      {R"({"a":"\u12G4"})", 10},
      {R"({"a":"\ud800"})", 9},             // surrogate escapes are refused
      {"{\"a\":\"\x01\"}", 6},              // raw control character
      {"{\"a\":\"\xC0\xAF\"}", 6},          // overlong UTF-8
      {"{\"a\":\"\xED\xA0\x80\"}", 7},      // an encoded surrogate
      {"{\"a\":\"\xF4\x90\x80\x80\"}", 7},  // above U+10FFFF
      {"{\"a\":\"\xC3x\"}", 7},             // a missing continuation byte
      {R"({"a":1]})", 6},                   // mismatched brackets
      {R"({"a":[1}})", 7},
      {"{}x", 2},  // nothing after the object but whitespace
      {"{},", 2},
  };
  for (const auto& [text, at] : cases) {
    JsonPrefix m;
    EXPECT_EQ(refused_at(&m, text), at) << text;
  }
}

TEST(JsonPrefix, BoundsDepthAndWhitespace) {
  std::string deep = "{\"a\":";
  for (int d = 1; d < kMaxJsonDepth; ++d) deep += "[";
  JsonPrefix m;
  EXPECT_EQ(refused_at(&m, deep), -1);  // kMaxJsonDepth levels, the object included
  EXPECT_FALSE(m.feed_byte('['));

  JsonPrefix w;
  std::string padded = "{";
  padded.append(size_t(kMaxJsonWhitespace), ' ').append("\"k\":").append(size_t(kMaxJsonWhitespace), '\n');
  EXPECT_EQ(refused_at(&w, padded), -1);
  EXPECT_FALSE(w.feed(std::string(kMaxJsonWhitespace + 1, ' ')));
  JsonPrefix lead;  // before the object, one byte
  EXPECT_TRUE(lead.feed_byte(' '));
  EXPECT_FALSE(lead.feed_byte('\n'));
  JsonPrefix s;  // inside strings whitespace is content, not padding
  std::string spaced = "{\"";
  spaced.append(size_t(4 * kMaxJsonWhitespace), ' ').append("\":1}");
  EXPECT_TRUE(s.feed(spaced));
  EXPECT_TRUE(s.complete());
}

TEST(JsonPrefix, AnOpenNumberEndsAtTheNextByte) {
  JsonPrefix m;
  EXPECT_TRUE(m.feed(R"({"n":12)"));
  EXPECT_FALSE(m.complete());
  JsonPrefix copy = m;
  EXPECT_TRUE(copy.feed("}"));
  EXPECT_TRUE(copy.complete());
  EXPECT_TRUE(m.feed("3.5e-1 ,\"m\":-0}"));
  EXPECT_TRUE(m.complete());
}

// A random JSON value: objects, arrays, strings (ASCII, escapes, multi-byte UTF-8), numbers and
// literals, nested up to `depth`.
nlohmann::json random_value(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth > 0 ? 6 : 4);
  switch (kind(rng)) {
    case 0:
      return nullptr;
    case 1:
      return bool(rng() & 1);
    case 2:
      return int64_t(rng()) - int64_t(1u << 31);
    case 3:
      return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    case 4: {
      static const char* pieces[] = {"a",  "Z", " ",    "\"",       "\\",           "\n",
                                     "\t", "/", "\x01", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                     "0",  "{", "]"};
      std::string s;
      for (int n = int(rng() % 8); n > 0; --n) s += pieces[rng() % std::size(pieces)];
      return s;
    }
    case 5: {
      nlohmann::json a = nlohmann::json::array();
      for (int n = int(rng() % 4); n > 0; --n) a.push_back(random_value(rng, depth - 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (int n = int(rng() % 4); n > 0; --n) o[random_value(rng, 0).dump()] = random_value(rng, depth - 1);
      return o;
    }
  }
}

// Against nlohmann's parser: every random object, compact or indented, is accepted and complete;
// and after random byte edits, the recognizer calls the text complete exactly when the parser
// accepts it as an object (leaving out what kvserve refuses on purpose: \u surrogate escapes).
TEST(JsonPrefix, AgreesWithAParserOnRandomObjects) {
  std::mt19937 rng(20261206);
  int edited_complete = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    nlohmann::json o = nlohmann::json::object();
    for (int n = int(rng() % 5); n > 0; --n)
      o[std::string("k").append(std::to_string(n))] = random_value(rng, 4);
    const std::string text = o.dump(int(rng() % 3) - 1);
    expect_complete_object(text);
    for (int edit = 0; edit < 5; ++edit) {
      std::string t = text;
      const size_t at = rng() % t.size();
      // No 'e' / 'E': an exponent edited into a number can overflow a double, which the parser
      // refuses and RFC 8259 allows (exponents are covered above).
      static const char bytes[] = "{}[],:\" \\0123456789.+-tfnul\x01\xC3\xA9";
      switch (rng() % 3) {
        case 0:
          t[at] = bytes[rng() % (sizeof(bytes) - 1)];
          break;
        case 1:
          t.erase(at, 1);
          break;
        default:
          t.insert(at, 1, bytes[rng() % (sizeof(bytes) - 1)]);
          break;
      }
      JsonPrefix m;
      const bool complete = m.feed(t) && m.complete();
      const bool parses = nlohmann::json::accept(t);
      const bool object = parses && nlohmann::json::parse(t).is_object();
      if (complete) {
        EXPECT_TRUE(object) << t;
        ++edited_complete;
      } else if (object && t.find("\\u") == std::string::npos) {
        ADD_FAILURE() << "a JSON object the recognizer refuses: " << t;
      }
    }
  }
  EXPECT_GT(edited_complete, 100);  // the edits did leave valid objects often enough to test both ways
}

}  // namespace
}  // namespace kvserve
