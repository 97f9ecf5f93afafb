// Pre-tokenizers of byte-level BPE vocabularies: the regex lists that cut text into pieces
// before BPE merging, chosen by the GGUF key `tokenizer.ggml.pre`.
//
// A list of regexes is applied in order, the way the reference (llama.cpp) applies it: the
// first regex splits the whole text into matches and the gaps between them (both become
// pieces); every following regex splits each existing piece the same way, seeing only that
// piece (its lookaheads and `$` stop at the piece end). BPE merges never cross a piece
// boundary.
//
// Matching uses ICU regexes on the real code points, so \p{L}, \p{N}, \p{P} and \s have
// their Unicode meaning, as in the Hugging Face tokenizers the vocabularies come from.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace kvserve {

// What a pre-tokenizer name implies for the tokenizer.
struct PreTokenizerSpec {
  std::vector<std::string> regexes;
  bool ignore_merges = false;  // a piece that is itself a token is emitted whole (Llama-3)
  bool add_bos = false;        // family default when tokenizer.ggml.add_bos_token is absent
};

// nullopt for names this project does not know. "" means the reference's "default".
std::optional<PreTokenizerSpec> find_pre_tokenizer(std::string_view pre);

// A piece of the input: bytes [begin, end).
struct TextPiece {
  uint32_t begin = 0;
  uint32_t end = 0;
};

class RegexSplitter {
 public:
  // Compiles the regexes once; errors name the regex and ICU's reason.
  static Expected<RegexSplitter> create(const std::vector<std::string>& regexes);

  // Replaces `pieces` with the pieces of `text`: in order, non-empty, covering all of it.
  // Invalid UTF-8 is matched as U+FFFD but the pieces still cover the original bytes.
  // Thread-safe (each call uses its own matchers).
  void split(std::string_view text, std::vector<TextPiece>& pieces) const;

 private:
  struct Compiled;
  std::vector<std::shared_ptr<const Compiled>> patterns_;
};

}  // namespace kvserve
