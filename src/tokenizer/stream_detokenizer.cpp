#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvserve {

std::string StreamDetokenizer::push(int32_t id) {
  pending_ += tokenizer_.token_to_piece(id, special_);
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const utf8::SequenceCheck c = utf8::check_sequence(pending_, pos);
    if (c.kind == utf8::SequenceCheck::kIncomplete) break;  // wait for the next token
    if (c.kind == utf8::SequenceCheck::kValid) {
      out.append(pending_, pos, c.length);
    } else {
      out.append(utf8::kReplacement);
    }
    pos += c.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDetokenizer::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace kvserve
