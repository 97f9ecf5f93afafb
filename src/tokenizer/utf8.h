// UTF-8 helpers shared by the tokenizers and the streaming detokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Byte length a lead byte announces, judged by its top four bits only: ASCII and stray
// continuation bytes count as 1, 0xC_/0xD_ as 2, 0xE_ as 3, 0xF_ as 4. The reference
// tokenizers cut text into "characters" with exactly this rule (no validation), and token
// ids depend on that cut, so the tokenizers use it too.
inline size_t lead_length(uint8_t lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

// Appends the UTF-8 encoding of `cp` (which must be <= 0x10FFFF).
void append_codepoint(std::string& out, char32_t cp);

// Result of validating the sequence that starts at a position.
struct SequenceCheck {
  enum Kind { kValid, kIncomplete, kInvalid } kind;
  size_t length;  // kValid: bytes of the character; kInvalid: bytes of the maximal invalid subpart
};

// Strict check (RFC 3629: no overlongs, no surrogates, <= U+10FFFF) of the character at
// s[pos]. kIncomplete means the bytes so far are a valid prefix that the end of `s` cut off.
SequenceCheck check_sequence(std::string_view s, size_t pos);

// Copies `s` with every maximal invalid subpart (and a truncated tail) replaced by U+FFFD,
// the "substitution of maximal subparts" practice of the Unicode standard (ch. 3.9).
std::string sanitize(std::string_view s);

// `s` readable on one line: valid printable characters as they are; \n, \r, \t, \\ and \'
// escaped; C1 controls as \u00NN; other control characters and every byte that is not part of a
// valid character as \xNN. Distinct inputs give distinct outputs (a debugging view of token
// pieces, which can be partial UTF-8).
std::string escape_for_display(std::string_view s);

}  // namespace kvserve::utf8
