// `response_format: {"type": "json_object"}`: the vocabulary as the JSON mask sees it, and the
// per-request state that masks every token whose bytes cannot continue one JSON object.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/json_prefix.h"

namespace kvserve {

class Tokenizer;

// A byte trie over some tokens' pieces. Node 0 is the root (the empty prefix); a node's children
// are nodes [child_begin, child_end), in byte order; the tokens whose piece ends at a node are
// tokens[token_begin, token_end).
struct TokenTrie {
  struct Node {
    uint32_t child_begin = 0, child_end = 0;
    uint32_t token_begin = 0, token_end = 0;
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;
  std::vector<int32_t> tokens;

  static TokenTrie build(const std::vector<std::string>& pieces, std::vector<int32_t> ids);
};

// Each token's bytes (its decoded piece; a byte token's one byte) and whether it may be generated
// under a constraint at all: control and end-of-generation tokens, and tokens with no bytes, may
// not (the answer ends when the object closes, not at an end-of-generation token). Built once per
// engine, on the first constrained request (a few MiB for a 32,000-token vocabulary).
//
// For the mask, two shortcuts. The allowed tokens form a byte trie, so that a prefix the tokens
// share is fed once and a whole subtree goes at its first refused byte: where few bytes may
// follow (a value expected) a step visits a few hundred nodes, not every token. And inside a
// string, where nearly every token may follow, the tokens that stay within any string (no
// closing quote, no control byte, whole UTF-8 characters and escapes) are allowed as a
// precomputed mask; only the rest are walked, in a trie of their own.
struct ConstraintVocab {
  std::vector<std::string> pieces;  // [n_vocab]
  std::vector<uint8_t> excluded;    // [n_vocab]
  TokenTrie trie;                   // every token not excluded
  std::vector<uint8_t> string_run;  // [n_vocab] 1: stays within any string
  bool any_string_run = false;
  TokenTrie string_rest;  // the tokens neither excluded nor string_run

  static ConstraintVocab from(const Tokenizer& tokenizer);
  // The same from pieces and exclusions alone (tests).
  static ConstraintVocab from_pieces(std::vector<std::string> pieces, std::vector<uint8_t> excluded);
};

class JsonConstraint {
 public:
  explicit JsonConstraint(const ConstraintVocab& vocab) : vocab_(&vocab) {}

  // allowed[i] = 1 when token i may come next, else 0 ([n_vocab]); false when no token may
  // (a vocabulary without the bytes to go on).
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
