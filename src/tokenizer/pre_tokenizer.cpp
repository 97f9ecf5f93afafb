#include "tokenizer/pre_tokenizer.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utf16.h>
#include <unicode/utf8.h>

#include <climits>

namespace kvserve {

struct RegexSplitter::Compiled {
  std::unique_ptr<icu::RegexPattern> pattern;
};

Expected<RegexSplitter> RegexSplitter::create(const std::vector<std::string>& regexes) {
  RegexSplitter s;
  for (const std::string& re : regexes) {
    UErrorCode status = U_ZERO_ERROR;
    UParseError parse_error{};
    auto c = std::make_shared<Compiled>();
    c->pattern.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(re), 0, parse_error, status));
    if (U_FAILURE(status) || !c->pattern) {
      return invalid_argument("pre-tokenizer regex '" + re + "' does not compile: " + u_errorName(status) +
                              " at offset " + std::to_string(parse_error.offset));
    }
    s.patterns_.push_back(std::move(c));
  }
  return s;
}

void RegexSplitter::split(std::string_view text, std::vector<TextPiece>& pieces) const {
  pieces.clear();
  if (text.empty()) return;
  KVS_ASSERT(text.size() < size_t(INT32_MAX) / 2, "text too large for the regex splitter");

  // ICU regexes are fastest on UTF-16. Convert once and remember, for every UTF-16 unit,
  // the byte offset of the character it belongs to, so matches map back to byte ranges.
  std::vector<char16_t> units;
  std::vector<uint32_t> byte_of_unit;
  units.reserve(text.size() + 1);
  byte_of_unit.reserve(text.size() + 1);
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const auto len = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < len;) {
    const int32_t char_start = i;
    UChar32 c = 0;
    U8_NEXT(bytes, i, len, c);
    if (c < 0) c = 0xFFFD;  // ill-formed: one U+FFFD for the maximal subpart ICU consumed
    if (c <= 0xFFFF) {
      units.push_back(static_cast<char16_t>(c));
      byte_of_unit.push_back(static_cast<uint32_t>(char_start));
    } else {
      units.push_back(static_cast<char16_t>(U16_LEAD(c)));
      units.push_back(static_cast<char16_t>(U16_TRAIL(c)));
      byte_of_unit.push_back(static_cast<uint32_t>(char_start));
      byte_of_unit.push_back(static_cast<uint32_t>(char_start));
    }
  }
  byte_of_unit.push_back(static_cast<uint32_t>(text.size()));
  const auto n_units = static_cast<int32_t>(units.size());
  const icu::UnicodeString input(false, units.data(), n_units);  // read-only alias, no copy

  // Piece ends, in UTF-16 units; the single initial piece is the whole text.
  std::vector<int32_t> ends = {n_units};
  std::vector<int32_t> next_ends;
  for (const auto& compiled : patterns_) {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> m(compiled->pattern->matcher(input, status));
    KVS_ASSERT(U_SUCCESS(status) && m, "cannot create an ICU regex matcher");
    next_ends.clear();
    next_ends.reserve(ends.size() * 2);
    int32_t piece_begin = 0;
    for (const int32_t piece_end : ends) {
      // The region confines the match to this piece; its default opaque, anchoring bounds
      // make lookaheads and `$` see the piece end as the end of input, as in the reference.
      m->region(piece_begin, piece_end, status);
      int32_t cursor = piece_begin;
      while (m->find(status) && U_SUCCESS(status)) {
        const int32_t ms = m->start(status);
        const int32_t me = m->end(status);
        // None of the patterns can match empty; skip such a match all the same.
        if (me == ms) continue;
        if (ms > cursor) next_ends.push_back(ms);  // the gap before the match
        next_ends.push_back(me);
        cursor = me;
      }
      if (cursor < piece_end) next_ends.push_back(piece_end);
      piece_begin = piece_end;
    }
    ends.swap(next_ends);
  }

  pieces.reserve(ends.size());
  uint32_t begin = 0;
  for (const int32_t e : ends) {
    const uint32_t end = byte_of_unit[static_cast<size_t>(e)];
    if (end > begin) pieces.push_back({begin, end});
    begin = end;
  }
}

}  // namespace kvserve
