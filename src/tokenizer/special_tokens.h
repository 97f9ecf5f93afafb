// Splitting raw text at special-token texts before normal tokenization.
//
// Candidates are the control, unknown and user-defined tokens. Longest text first, each
// candidate cuts every text fragment at all of its (non-overlapping, left to right)
// occurrences; the text between the cuts is tokenized normally later. Control and unknown
// tokens are matched only when the caller asks (parse_special); user-defined tokens are
// always matched, as the Hugging Face tokenizers do with non-special added tokens. Ranges marked
// literal never match control or unknown tokens.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvserve {

// Bytes [begin, end) of a text.
struct TextRange {
  uint32_t begin = 0;
  uint32_t end = 0;
};

struct Fragment {
  int32_t token = -1;  // >= 0: this fragment is that special token
  uint32_t begin = 0;  // otherwise: raw text bytes [begin, end)
  uint32_t end = 0;
  bool is_text() const { return token < 0; }
};

class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);

  // Replaces `out` with the fragments of `text`, in order. Empty text gives no fragment.
  // `literal`: sorted, disjoint ranges of `text` in which control and unknown tokens never match
  // even with parse_special (a chat message's content inside its template's markup).
  void split(std::string_view text, bool parse_special, std::vector<Fragment>& out,
             std::span<const TextRange> literal = {}) const;

  // The candidates, longest text first (equal lengths: lower id first).
  const std::vector<int32_t>& candidates() const { return candidates_; }

 private:
  // Indices into candidates_ of the ones that occur in `text` and may match.
  std::vector<size_t> present_candidates(std::string_view text, bool parse_special) const;

  const Vocab& vocab_;
  std::vector<int32_t> candidates_;
  std::array<std::vector<size_t>, 256> by_first_byte_;  // candidate indices per first byte
};

}  // namespace kvserve
