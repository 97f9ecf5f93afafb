// Whether a byte string can begin one JSON object (RFC 8259), byte by byte: the recognizer behind
// `response_format: {"type": "json_object"}`, which masks every token that would leave it.
//
// The state is a small value (no heap), so that the mask can copy it once per vocabulary token and
// feed that token's bytes. Nesting is a bit stack: bit d of `containers_` says whether level d is
// an array (1) or an object (0), so at most kMaxJsonDepth levels. Strings are checked as UTF-8
// (no overlong forms, no surrogates, nothing above U+10FFFF) so that the text stays valid JSON
// for a strict parser; control characters must be escaped. Runs of whitespace between tokens are
// capped at kMaxJsonWhitespace bytes (one byte before the object): without a cap a model could pad
// forever and never close.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvserve {

constexpr int kMaxJsonDepth = 64;
constexpr int kMaxJsonWhitespace = 64;

class JsonPrefix {
 public:
  // Feeds bytes; false when they cannot continue a JSON object (the state is then unusable).
  // After the object closes only whitespace may follow.
  bool feed(std::string_view bytes);
  bool feed_byte(uint8_t c);
  // The object is closed: the text so far is one complete JSON object (and whitespace).
  bool complete() const { return mode_ == Mode::kDone; }
  // Inside a string, between characters (no escape or multi-byte character half read): what may
  // follow then does not depend on anything before the string's opening quote.
  bool in_string() const { return mode_ == Mode::kString; }
  // Anywhere within a string's body (escapes and multi-byte characters included).
  bool within_string() const {
    return mode_ == Mode::kString || mode_ == Mode::kEscape || mode_ == Mode::kHex || mode_ == Mode::kUtf8;
  }

 private:
  enum class Mode : uint8_t {
    kStart,       // before the top-level '{'
    kKeyOrEnd,    // after '{': a key or '}'
    kKey,         // after ',' in an object: a key
    kColon,       // after a key
    kValue,       // after ':' or ',' in an array: a value
    kValueOrEnd,  // after '[': a value or ']'
    kAfterValue,  // after a value in a container: ',' or its closing bracket
    kString,      // inside a string (key_ says which kind)
    kEscape,      // after '\' in a string
    kHex,         // in the 4 hex digits of \uXXXX (hex_left_ of them to go)
    kUtf8,        // in a multi-byte UTF-8 sequence (utf8_left_ continuation bytes to go)
    kNumber,      // in a number (number_ says where)
    kLiteral,     // in true / false / null (literal_, literal_at_)
    kDone,        // the top-level object closed
  };
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExpMark, kExpSign, kExp };

  bool start_value(uint8_t c);  // c opens a value (kValue, kValueOrEnd)
  bool open(bool array);
  bool close(bool array);
  bool end_value();  // a value just ended: back to its container (or kDone)
  bool whitespace();
  bool in_array() const { return depth_ > 0 && ((containers_ >> (depth_ - 1)) & 1u) != 0; }
  bool number_byte(uint8_t c);
  bool string_byte(uint8_t c);

  Mode mode_ = Mode::kStart;
  Num number_ = Num::kMinus;
  bool key_ = false;  // the string being read is an object key
  uint8_t hex_left_ = 0;
  bool hex_d_ = false;  // the \u escape's first hex digit was D (a surrogate if 8..F follows)
  uint8_t utf8_left_ = 0;
  uint8_t utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // the range the next continuation byte must be in
  uint8_t literal_ = 0, literal_at_ = 0;
  uint8_t depth_ = 0;
  uint8_t whitespace_run_ = 0;
  uint64_t containers_ = 0;
};

}  // namespace kvserve
