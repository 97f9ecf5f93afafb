#include "tokenizer/vocab.h"

namespace kvserve {

uint32_t token_attr_from_type(int64_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kByte:
      return kAttrByte;
    case TokenType::kUndefined:
      break;
  }
  return kAttrUndefined;
}

Vocab::Vocab(std::vector<std::string> texts, const std::vector<double>& scores,
             const std::vector<int64_t>& types) {
  tokens_.resize(texts.size());
  index_.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    TokenData& t = tokens_[i];
    t.text = texts[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : std::move(texts[i]);
    t.score = i < scores.size() ? static_cast<float>(scores[i]) : 0.0f;
    t.attr = i < types.size() ? token_attr_from_type(types[i]) : kAttrNormal;
    index_.insert_or_assign(t.text, static_cast<int32_t>(i));
  }
}

}  // namespace kvserve
