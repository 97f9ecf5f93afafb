#include "engine/json_constraint.h"

#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace kvserve {

ConstraintVocab ConstraintVocab::from(const Tokenizer& tokenizer) {
  ConstraintVocab v;
  const int32_t n = tokenizer.n_vocab();
  v.pieces.resize(size_t(n));
  v.excluded.resize(size_t(n));
  for (int32_t id = 0; id < n; ++id) {
    v.pieces[size_t(id)] = tokenizer.token_to_piece(id);
    v.excluded[size_t(id)] = tokenizer.is_control(id) || tokenizer.is_eog(id) || v.pieces[size_t(id)].empty();
  }
  return v;
}

bool JsonConstraint::allowed(std::vector<uint8_t>* allowed) const {
  const size_t n = vocab_->pieces.size();
  allowed->assign(n, 0);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (vocab_->excluded[i]) continue;
    JsonPrefix s = state_;
    if (s.feed(vocab_->pieces[i])) (*allowed)[i] = 1, any = true;
  }
  return any;
}

void JsonConstraint::accept(int32_t token) {
  const bool ok =
      token >= 0 && size_t(token) < vocab_->pieces.size() && state_.feed(vocab_->pieces[size_t(token)]);
  KVS_ASSERT(ok, "a token the JSON mask allowed continues the object");
}

}  // namespace kvserve
