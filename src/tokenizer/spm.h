// SentencePiece-style (`tokenizer.ggml.model` == "llama") encoding of one text fragment.
//
// The text is cut into UTF-8 characters; then, repeatedly, the adjacent pair whose
// concatenation is a vocabulary token with the highest score is merged (ties: leftmost
// pair first), until no adjacent pair forms a token. Each resulting piece is its token, and
// a piece that is no token (a character missing from the vocabulary) is emitted as its
// bytes through the byte-fallback tokens <0x00>..<0xFF>.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvserve {

class SpmEncoder {
 public:
  // `unk_id` is the last resort for a byte that has no byte token (may be -1: dropped).
  // `allow_word_split` lets encode() merge word by word when the vocabulary permits it
  // (vocab_splits_before_spaces); false forces whole-text merging (tests compare the two).
  SpmEncoder(const Vocab& vocab, int32_t unk_id, bool allow_word_split = true);

  // `text` must already have spaces replaced by U+2581 (and the prefix space added).
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  // Token of one raw byte: "<0xNN>", else the one-byte text itself, else unk (or -1).
  int32_t byte_token(uint8_t byte) const { return byte_tokens_[byte]; }

  // True when no token holds a U+2581 right after a non-U+2581 character: then no merge
  // can cross the start of a word, and words can be merged one at a time (same result,
  // much smaller heaps than merging a whole document at once).
  static bool vocab_splits_before_spaces(const Vocab& vocab);

 private:
  struct Scratch;  // per-call buffers reused across words
  void encode_segment(std::string_view text, Scratch& scratch, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  std::array<int32_t, 256> byte_tokens_{};
  bool split_before_spaces_ = false;
};

}  // namespace kvserve
