// The token table shared by every tokenizer kind: text, score and attributes per id, and
// the reverse text -> id index.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvserve {

// Token types as stored in `tokenizer.ggml.token_type` (the llama.cpp/GGUF numbering).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Attribute bits of a token. A token has exactly one of the type bits plus, optionally,
// strip bits that say which whitespace a matched special token swallows.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrNormal = 1u << 0,
  kAttrUnknown = 1u << 1,
  kAttrControl = 1u << 2,
  kAttrUserDefined = 1u << 3,
  kAttrUnused = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 6,  // whitespace left of the token in the text is dropped
  kAttrRstrip = 1u << 7,  // whitespace right of the token in the text is dropped
};

uint32_t token_attr_from_type(int64_t type);

struct TokenData {
  std::string text;  // as stored in the vocabulary (SPM: '▁' for space; BPE: byte-mapped)
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
};

// Hash that lets the index be probed with a string_view without building a std::string.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class Vocab {
 public:
  // Takes the token texts; scores and types may be empty (then 0 / normal). An empty text
  // becomes "[EMPTY_<id>]" (it could never be matched anyway); when a text repeats, lookups
  // find the last id that has it.
  Vocab(std::vector<std::string> texts, const std::vector<double>& scores, const std::vector<int64_t>& types);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  const TokenData& at(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  TokenData& mutable_at(int32_t id) { return tokens_[static_cast<size_t>(id)]; }
  // -1 when no token has exactly this text.
  int32_t find(std::string_view text) const {
    auto it = index_.find(text);
    return it == index_.end() ? -1 : it->second;
  }
  bool has_attr(int32_t id, uint32_t attr) const { return valid(id) && (at(id).attr & attr) != 0; }

 private:
  std::vector<TokenData> tokens_;
  std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>> index_;
};

}  // namespace kvserve
