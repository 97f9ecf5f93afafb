#include "tokenizer/bpe_files.h"

#include <charconv>

#include "tokenizer/utf8.h"
#include "util/mmap_file.h"

namespace kvserve {
namespace {

// Just enough JSON for encoder.json: one object of string keys and non-negative integer
// values, with the full string escape syntax (\uXXXX and surrogate pairs included).
class EncoderJsonParser {
 public:
  EncoderJsonParser(std::string_view json, const std::string& source) : s_(json), source_(source) {}

  Status parse(std::vector<std::string>& tokens) {
    tokens.clear();
    skip_space();
    if (!consume('{')) return fail("expected '{'");
    skip_space();
    if (consume('}')) return {};
    while (true) {
      std::string key;
      KVS_RETURN_IF_ERROR(parse_string(key));
      skip_space();
      if (!consume(':')) return fail("expected ':'");
      skip_space();
      int64_t id = 0;
      KVS_RETURN_IF_ERROR(parse_id(id));
      if (static_cast<size_t>(id) >= tokens.size()) tokens.resize(static_cast<size_t>(id) + 1);
      std::string& slot = tokens[static_cast<size_t>(id)];
      if (!slot.empty()) return fail("id " + std::to_string(id) + " appears twice");
      slot = std::move(key);
      skip_space();
      if (consume('}')) break;
      if (!consume(',')) return fail("expected ',' or '}'");
      skip_space();
    }
    skip_space();
    if (pos_ != s_.size()) return fail("trailing characters after the object");
    return {};
  }

 private:
  Status fail(const std::string& what) const {
    return corrupt(source_ + ": offset " + std::to_string(pos_) + ": " + what);
  }
  void skip_space() {
    while (pos_ < s_.size() && std::string_view(" \n\r\t").find(s_[pos_]) != std::string_view::npos) ++pos_;
  }
  bool consume(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Status parse_id(int64_t& id) {
    const char* begin = s_.data() + pos_;
    const auto [end, ec] = std::from_chars(begin, s_.data() + s_.size(), id);
    if (ec != std::errc() || id < 0 || id > (int64_t(1) << 24)) return fail("expected a token id");
    pos_ += static_cast<size_t>(end - begin);
    return {};
  }

  Status parse_hex4(uint32_t& value) {
    if (pos_ + 4 > s_.size()) return fail("truncated \\u escape");
    value = 0;
    for (int k = 0; k < 4; ++k) {
      const int digit = hex_digit(s_[pos_++]);
      if (digit < 0) return fail("bad hex digit in \\u escape");
      value = (value << 4) | uint32_t(digit);
    }
    return {};
  }

  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // The character a one-letter escape stands for; 0 for \u (handled apart) and bad escapes.
  static char simple_escape(char e) {
    switch (e) {
      case '"':
      case '\\':
      case '/':
        return e;
      case 'b':
        return '\b';
      case 'f':
        return '\f';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      default:
        return 0;
    }
  }

  Status parse_string(std::string& out) {
    if (!consume('"')) return fail("expected a string");
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return {};
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      if (e != 'u') {
        const char c2 = simple_escape(e);
        if (c2 == 0) return fail(std::string("bad escape \\") + e);
        out += c2;
        continue;
      }
      uint32_t cp = 0;
      KVS_RETURN_IF_ERROR(parse_hex4(cp));
      // A high surrogate must pair with a following \uDC00..\uDFFF escape.
      if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(pos_, 2) == "\\u") {
        pos_ += 2;
        uint32_t low = 0;
        KVS_RETURN_IF_ERROR(parse_hex4(low));
        if (low < 0xDC00 || low > 0xDFFF) return fail("unpaired surrogate");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      } else if (cp >= 0xD800 && cp <= 0xDFFF) {
        return fail("unpaired surrogate");
      }
      utf8::append_codepoint(out, cp);
    }
    return fail("unterminated string");
  }

  std::string_view s_;
  const std::string& source_;
  size_t pos_ = 0;
};

std::string_view file_text(const MmapFile& f) {
  return f.size() ? std::string_view(reinterpret_cast<const char*>(f.data()), f.size()) : std::string_view();
}

}  // namespace

Status parse_encoder_json(std::string_view json, const std::string& source,
                          std::vector<std::string>& tokens) {
  return EncoderJsonParser(json, source).parse(tokens);
}

Expected<TokenizerSpec> read_bpe_files(const std::string& encoder_json_path,
                                       const std::string& vocab_bpe_path, const std::string& pre) {
  TokenizerSpec s;
  s.source = encoder_json_path;
  s.model = "gpt2";
  s.pre = pre;
  {
    KVS_ASSIGN_OR_RETURN(MmapFile json, MmapFile::open(encoder_json_path));
    KVS_RETURN_IF_ERROR(parse_encoder_json(file_text(json), encoder_json_path, s.tokens));
  }
  KVS_ASSIGN_OR_RETURN(MmapFile merges, MmapFile::open(vocab_bpe_path));
  const std::string_view text = file_text(merges);
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.substr(0, 9) == "#version:")) continue;
    if (line.find(' ', 1) == std::string_view::npos) {
      return corrupt(vocab_bpe_path + ": line " + std::to_string(line_no) + ": expected \"left right\"");
    }
    s.merges.emplace_back(line);
  }
  return s;
}

}  // namespace kvserve
