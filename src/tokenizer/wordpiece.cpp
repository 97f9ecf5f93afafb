#include "tokenizer/wordpiece.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace kvserve {
namespace {

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // U+2581

// The CJK ideograph blocks BERT isolates (the reference keeps the upstream quirk that the
// Extension-E block starts at U+2B920).
bool is_cjk_ideograph(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_control_category(int8_t t) {
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_SURROGATE || t == U_PRIVATE_USE_CHAR ||
         t == U_UNASSIGNED;
}

bool is_punctuation_category(int8_t t) {
  return t == U_DASH_PUNCTUATION || t == U_START_PUNCTUATION || t == U_END_PUNCTUATION ||
         t == U_CONNECTOR_PUNCTUATION || t == U_OTHER_PUNCTUATION || t == U_INITIAL_PUNCTUATION ||
         t == U_FINAL_PUNCTUATION;
}

bool is_symbol_category(int8_t t) {
  return t == U_MATH_SYMBOL || t == U_CURRENCY_SYMBOL || t == U_MODIFIER_SYMBOL || t == U_OTHER_SYMBOL;
}

bool is_mark_category(int8_t t) {
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK;
}

}  // namespace

WordPieceEncoder::WordPieceEncoder(const Vocab& vocab, int32_t unk_id, bool lowercase, bool strip_accents)
    : vocab_(vocab), unk_id_(unk_id), lowercase_(lowercase), strip_accents_(strip_accents) {
  for (int32_t id = 0; id < vocab.size(); ++id)
    max_token_bytes_ = std::max(max_token_bytes_, vocab.at(id).text.size());
}

std::vector<std::string> WordPieceEncoder::split_words(std::string_view text) const {
  icu::UnicodeString u =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (strip_accents_) {
    // NFD first, so accents become separate combining marks that can be dropped.
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
    if (U_SUCCESS(status)) {
      icu::UnicodeString decomposed = nfd->normalize(u, status);
      if (U_SUCCESS(status)) u = decomposed;
    }
  }
  std::vector<std::string> words(1);
  for (int32_t i = 0; i < u.length();) {
    const UChar32 c = u.char32At(i);
    i += U16_LENGTH(c);
    if (u_isUWhiteSpace(c)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const auto type = static_cast<int8_t>(u_charType(c));
    if (c == 0 || c == 0xFFFD || is_control_category(type)) continue;
    if (strip_accents_ && is_mark_category(type)) continue;
    std::string s;
    utf8::append_codepoint(s, static_cast<char32_t>(lowercase_ ? u_tolower(c) : c));
    if (is_punctuation_category(type) || (c < 0x7F && is_symbol_category(type)) || is_cjk_ideograph(c)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WordPieceEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  for (const std::string& word : split_words(text)) {
    const std::string marked = std::string(kWordStart) + word;
    const size_t n = marked.size();
    const size_t first_token = out.size();
    for (size_t i = 0; i < n;) {
      int32_t id = -1;
      size_t j = std::min(n, i + max_token_bytes_);
      for (; j > i; --j) {
        id = vocab_.find(std::string_view(marked).substr(i, j - i));
        if (id >= 0) break;
      }
      if (id < 0) {
        out.resize(first_token);  // the word cannot be covered: it is unknown as a whole
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (out.size() == first_token && unk_id_ >= 0) out.push_back(unk_id_);
  }
}

}  // namespace kvserve
