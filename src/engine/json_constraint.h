// `response_format: {"type": "json_object"}`: the vocabulary as the JSON mask sees it, and the
// per-request state that masks every token whose bytes cannot continue one JSON object.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/json_prefix.h"

namespace kvserve {

class Tokenizer;

// Each token's bytes (its decoded piece; a byte token's one byte) and whether it may be generated
// under a constraint at all: control and end-of-generation tokens, and tokens with no bytes, may
// not (the answer ends when the object closes, not at an end-of-generation token). Built once per
// engine, on the first constrained request: [n_vocab] strings, a few MiB for a 150k vocabulary.
struct ConstraintVocab {
  std::vector<std::string> pieces;
  std::vector<uint8_t> excluded;

  static ConstraintVocab from(const Tokenizer& tokenizer);
};

class JsonConstraint {
 public:
  explicit JsonConstraint(const ConstraintVocab& vocab) : vocab_(&vocab) {}

  // allowed[i] = 1 when token i may come next, else 0 ([n_vocab]); false when no token may
  // (a vocabulary without the bytes to go on). One copy of the recognizer and a feed of the
  // token's bytes per token: O(vocabulary bytes) per step.
  bool allowed(std::vector<uint8_t>* allowed) const;
  // Advances past a chosen token (one `allowed` said yes to).
  void accept(int32_t token);
  // The object has closed: nothing more may follow.
  bool complete() const { return state_.complete(); }

 private:
  const ConstraintVocab* vocab_;
  JsonPrefix state_;
};

}  // namespace kvserve
