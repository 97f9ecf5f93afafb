// Byte-level BPE (`tokenizer.ggml.model` == "gpt2") encoding of one pre-tokenizer piece.
//
// Each byte of the piece starts as the token of its GPT-2 mapped character. Then,
// repeatedly, the adjacent pair with the lowest merge rank (its position in
// `tokenizer.ggml.merges`; ties: leftmost pair) is replaced by the merged token, until no
// adjacent pair has a merge rule.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvserve {

class BpeEncoder {
 public:
  // `merges` are "left right" strings in rank order. Rules whose sides or result are not
  // tokens can never apply to token pieces and are left out (counted in num_unusable_merges).
  // `ignore_merges`: a piece whose whole mapped text is a token becomes that token directly
  // (Llama-3 / tiktoken behaviour).
  BpeEncoder(const Vocab& vocab, const std::vector<std::string>& merges, bool ignore_merges);

  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  size_t num_merges() const { return merges_.size(); }
  size_t num_unusable_merges() const { return num_unusable_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // token id of the merged pair
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }

  const Vocab& vocab_;
  bool ignore_merges_;
  std::array<int32_t, 256> byte_tokens_{};  // token of each byte's mapped character, or -1
  std::unordered_map<uint64_t, Merge> merges_;
  size_t num_unusable_merges_ = 0;
};

}  // namespace kvserve
