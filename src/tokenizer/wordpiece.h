// WordPiece (`tokenizer.ggml.model` == "bert") encoding of one text fragment.
//
// Normalization as BERT's BasicTokenizer: optional NFD + removal of combining marks
// (strip_accents) and lower-casing; control characters dropped; whitespace separates words;
// every punctuation character, ASCII symbol and CJK ideograph is a word of its own.
// Each word, prefixed with U+2581 (how GGUF marks word-initial pieces), is covered greedily
// by the longest vocabulary tokens from left to right; a word that cannot be covered
// becomes the unknown token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvserve {

class WordPieceEncoder {
 public:
  WordPieceEncoder(const Vocab& vocab, int32_t unk_id, bool lowercase, bool strip_accents);

  void encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  std::vector<std::string> split_words(std::string_view text) const;

  const Vocab& vocab_;
  int32_t unk_id_;
  bool lowercase_;
  bool strip_accents_;
  size_t max_token_bytes_ = 0;
};

}  // namespace kvserve
