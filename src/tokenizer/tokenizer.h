// Text <-> token ids, reproducing the reference (llama.cpp) tokenizers exactly.
//
// Kinds, by `tokenizer.ggml.model`:
//   "llama"  SentencePiece-style: score-driven bigram merging, byte fallback <0xNN>
//            (spm.h), a space prefixed to the text (tokenizer.ggml.add_space_prefix).
//   "gpt2"   byte-level BPE: a pre-tokenizer chosen by tokenizer.ggml.pre cuts the text
//            (pre_tokenizer.h), then ranked merges apply inside each piece (bpe.h).
//   "bert"   WordPiece: greedy longest-match-first over lower-cased, accent-stripped
//            words (wordpiece.h).
//
// encode(): special-token texts are cut out first (special_tokens.h), the text between
// them goes through the kind's algorithm; BOS/EOS are added when asked and the model
// says so. Decoding maps each id to its raw bytes and concatenates, stripping nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"
#include "tokenizer/wordpiece.h"
#include "util/status.h"

namespace kvserve {

class GgufFile;

enum class TokenizerKind { kSpm, kBpe, kWordPiece };

// Everything a tokenizer is built from, whatever the source (GGUF metadata, BPE files).
// Optional fields left empty take the family defaults of the reference.
struct TokenizerSpec {
  std::string source;        // names the origin (file path) in error messages
  std::string model;         // tokenizer.ggml.model: "llama", "gpt2" or "bert"
  std::string pre;           // tokenizer.ggml.pre
  std::string general_name;  // general.name: a few models get per-token strip attributes
  std::vector<std::string> tokens;
  std::vector<double> scores;        // may be empty
  std::vector<int64_t> token_types;  // may be empty (all normal)
  std::vector<std::string> merges;   // "left right", rank order (gpt2 only)
  std::optional<int64_t> bos_id, eos_id, unk_id, eot_id, eom_id, sep_id, pad_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

struct DecodeOptions {
  bool special = false;  // render control/unknown tokens as their text instead of ""
  // Drop the space that encode() prefixes (see add_space_prefix()): one ' ' at the start of
  // the first non-empty piece of a non-control token (a rendered BOS before it stays).
  bool strip_space_prefix = false;
};

class Tokenizer {
 public:
  // Errors name the file and the metadata key that is missing or malformed.
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& f);
  static Expected<std::unique_ptr<Tokenizer>> from_spec(TokenizerSpec spec);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: prepend BOS / append EOS as add_bos()/add_eos() say (WordPiece: CLS/SEP).
  // parse_special: control-token texts ("<|endoftext|>", "<s>") become those tokens;
  // user-defined tokens are matched either way. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // The same, with control tokens parsed everywhere but in the `literal` byte ranges (sorted,
  // disjoint): a chat template's markup is parsed, the messages' content stays text.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                              std::span<const TextRange> literal) const;

  // Raw bytes of the token as it appears in text (SPM: '▁' -> ' ', <0xNN> -> the byte;
  // BPE: byte-level decoding). Control and unknown tokens give "" unless `special`.
  // Out-of-range ids give "". A piece may be an incomplete UTF-8 sequence.
  std::string token_to_piece(int32_t id) const { return token_to_piece(id, false); }
  std::string token_to_piece(int32_t id, bool special) const;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids, DecodeOptions{}); }
  std::string decode(const std::vector<int32_t>& ids, const DecodeOptions& opts) const;

  int32_t n_vocab() const { return vocab_.size(); }
  int32_t bos_id() const { return bos_id_; }  // -1 when the model has none
  int32_t eos_id() const { return eos_id_; }
  int32_t eot_id() const { return eot_id_; }
  int32_t unk_id() const { return unk_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // True when encode() prefixes a space to the text (SentencePiece); decoding such ids then
  // yields that extra leading space unless DecodeOptions::strip_space_prefix.
  bool add_space_prefix() const { return add_space_prefix_; }
  // End of generation: EOS, EOT, EOM and the end-of-turn tokens known by text.
  bool is_eog(int32_t id) const { return vocab_.valid(id) && is_eog_[static_cast<size_t>(id)]; }
  bool is_control(int32_t id) const { return vocab_.has_attr(id, kAttrControl); }

  TokenizerKind kind() const { return kind_; }
  const std::string& model() const { return model_; }  // "llama", "gpt2", "bert"
  const std::string& pre() const { return pre_; }      // pre-tokenizer name ("" if none)
  // Vocabulary text of a token (not decoded); "" for out-of-range ids.
  const std::string& token_text(int32_t id) const;
  int32_t find_token(std::string_view text) const { return vocab_.find(text); }

 private:
  explicit Tokenizer(TokenizerSpec& spec);
  Status init(const TokenizerSpec& spec);
  Status init_family_defaults(const TokenizerSpec& spec);
  Status apply_metadata(const TokenizerSpec& spec);
  Status init_encoder(const TokenizerSpec& spec);
  void init_eog();
  void init_strip_attributes(const std::string& general_name);
  void encode_text(std::string_view text, bool first_fragment_after_special, std::vector<int32_t>& out) const;
  std::string compute_piece(int32_t id) const;

  TokenizerKind kind_ = TokenizerKind::kSpm;
  std::string model_;
  std::string pre_;
  Vocab vocab_;
  std::unique_ptr<SpmEncoder> spm_;
  std::unique_ptr<BpeEncoder> bpe_;
  std::unique_ptr<WordPieceEncoder> wordpiece_;
  std::optional<PreTokenizerSpec> pre_spec_;  // gpt2 only
  std::optional<RegexSplitter> splitter_;
  std::unique_ptr<SpecialTokenSplitter> specials_;
  std::vector<std::string> pieces_;  // token_to_piece(id, special=true) for every id
  std::vector<char> is_eog_;
  int32_t bos_id_ = -1, eos_id_ = -1, eot_id_ = -1, eom_id_ = -1, unk_id_ = -1, sep_id_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
};

// Streams valid UTF-8 out of a token sequence: a piece that ends inside a multi-byte
// character (byte-fallback and byte-level tokens split characters) is held back until the
// character completes; invalid bytes come out as U+FFFD.
class StreamDetokenizer {
 public:
  explicit StreamDetokenizer(const Tokenizer& t) : StreamDetokenizer(t, false) {}
  StreamDetokenizer(const Tokenizer& t, bool special) : tokenizer_(t), special_(special) {}

  // Text that became complete with this token (possibly "").
  std::string push(int32_t id);
  // Whatever is held back, with the incomplete sequence replaced by U+FFFD; resets.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool special_;
  std::string pending_;
};

}  // namespace kvserve
