#include "engine/json_prefix.h"

namespace kvserve {

namespace {

bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

constexpr std::string_view kLiterals[] = {"true", "false", "null"};

}  // namespace

bool JsonPrefix::feed(std::string_view bytes) {
  for (char ch : bytes)
    if (!feed_byte(uint8_t(ch))) return false;
  return true;
}

bool JsonPrefix::whitespace() {
  // Before the object one byte at most: the leading space some tokenizers fold into a word, no
  // padding.
  return ++whitespace_run_ <= (mode_ == Mode::kStart ? 1 : kMaxJsonWhitespace);
}

bool JsonPrefix::open(bool array) {
  if (depth_ >= kMaxJsonDepth) return false;
  const uint64_t bit = uint64_t(1) << depth_;
  containers_ = array ? containers_ | bit : containers_ & ~bit;
  ++depth_;
  mode_ = array ? Mode::kValueOrEnd : Mode::kKeyOrEnd;
  return true;
}

bool JsonPrefix::close(bool array) {
  if (depth_ == 0 || in_array() != array) return false;
  --depth_;
  return end_value();
}

bool JsonPrefix::end_value() {
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfterValue;
  return true;
}

bool JsonPrefix::start_value(uint8_t c) {
  switch (c) {
    case '{':
      return open(false);
    case '[':
      return open(true);
    case '"':
      key_ = false;
      mode_ = Mode::kString;
      return true;
    case '-':
      mode_ = Mode::kNumber, number_ = Num::kMinus;
      return true;
    case '0':
      mode_ = Mode::kNumber, number_ = Num::kZero;
      return true;
    case 't':
    case 'f':
    case 'n':
      mode_ = Mode::kLiteral;
      literal_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
      literal_at_ = 1;
      return true;
    default:
      if (c < '1' || c > '9') return false;
      mode_ = Mode::kNumber, number_ = Num::kInt;
      return true;
  }
}

bool JsonPrefix::number_byte(uint8_t c) {
  const bool digit = is_digit(c);
  // The states that need a digit next: it moves them to `next`.
  const auto digit_to = [&](Num next) {
    if (!digit) return false;
    number_ = next;
    return true;
  };
  switch (number_) {
    case Num::kMinus:
      return digit_to(c == '0' ? Num::kZero : Num::kInt);
    case Num::kDot:
      return digit_to(Num::kFrac);
    case Num::kExpMark:
      if (c == '+' || c == '-') {
        number_ = Num::kExpSign;
        return true;
      }
      return digit_to(Num::kExp);
    case Num::kExpSign:
      return digit_to(Num::kExp);
    case Num::kZero:
    case Num::kInt:
    case Num::kFrac:
    case Num::kExp:
      if (digit && number_ != Num::kZero) return true;
      if ((c == '.') && (number_ == Num::kZero || number_ == Num::kInt)) {
        number_ = Num::kDot;
        return true;
      }
      if ((c == 'e' || c == 'E') && number_ != Num::kExp) {
        number_ = Num::kExpMark;
        return true;
      }
      // Any other byte ends the number (a leading zero's digit too, which the container then
      // refuses); the byte itself belongs to what follows.
      end_value();
      return feed_byte(c);
  }
  return false;
}

bool JsonPrefix::string_byte(uint8_t c) {
  if (c == '"') {
    if (!key_) return end_value();
    mode_ = Mode::kColon;
    return true;
  }
  if (c == '\\') {
    mode_ = Mode::kEscape;
    return true;
  }
  if (c < 0x20) return false;  // control characters must be escaped
  if (c < 0x80) return true;
  // A UTF-8 lead byte and the range of its first continuation byte (RFC 3629's table).
  utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    utf8_left_ = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    utf8_left_ = 2;
    if (c == 0xE0) utf8_lo_ = 0xA0;  // no overlong forms
    if (c == 0xED) utf8_hi_ = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    utf8_left_ = 3;
    if (c == 0xF0) utf8_lo_ = 0x90;
    if (c == 0xF4) utf8_hi_ = 0x8F;  // nothing above U+10FFFF
  } else {
    return false;
  }
  mode_ = Mode::kUtf8;
  return true;
}

bool JsonPrefix::feed_byte(uint8_t c) {
  switch (mode_) {
    case Mode::kString:
      return string_byte(c);
    case Mode::kEscape:
      if (c == 'u') {
        mode_ = Mode::kHex, hex_left_ = 4;
        return true;
      }
      if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't')
        return false;
      mode_ = Mode::kString;
      return true;
    case Mode::kHex:
      // \uD800..\uDFFF (surrogates) are refused: a pair would need a second escape to be valid,
      // and a strict parser rejects a lone one. Characters beyond U+FFFF can be written raw.
      if (!is_hex(c)) return false;
      if (hex_left_ == 3 && hex_d_ && !(c >= '0' && c <= '7')) return false;
      hex_d_ = hex_left_ == 4 && (c == 'd' || c == 'D');
      if (--hex_left_ == 0) mode_ = Mode::kString;
      return true;
    case Mode::kUtf8:
      if (c < utf8_lo_ || c > utf8_hi_) return false;
      utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
      if (--utf8_left_ == 0) mode_ = Mode::kString;
      return true;
    case Mode::kNumber:
      return number_byte(c);
    case Mode::kLiteral: {
      const std::string_view lit = kLiterals[literal_];
      if (c != uint8_t(lit[literal_at_])) return false;
      if (++literal_at_ == lit.size()) return end_value();
      return true;
    }
    default:
      break;
  }
  // The structural modes: whitespace between tokens, then what each mode expects.
  if (is_ws(c)) return whitespace();
  whitespace_run_ = 0;
  switch (mode_) {
    case Mode::kStart:
      return c == '{' && open(false);
    case Mode::kKeyOrEnd:
      if (c == '}') return close(false);
      [[fallthrough]];
    case Mode::kKey:
      if (c != '"') return false;
      key_ = true;
      mode_ = Mode::kString;
      return true;
    case Mode::kColon:
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kValueOrEnd:
      if (c == ']') return close(true);
      return start_value(c);
    case Mode::kValue:
      return start_value(c);
    case Mode::kAfterValue:
      if (c == ',') {
        mode_ = in_array() ? Mode::kValue : Mode::kKey;
        return true;
      }
      if (c == '}' || c == ']') return close(c == ']');
      return false;
    default:
      return false;  // kDone: only whitespace
  }
}

}  // namespace kvserve
