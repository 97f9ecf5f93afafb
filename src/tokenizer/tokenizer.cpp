#include "tokenizer/tokenizer.h"

#include <cctype>

#include "tokenizer/byte_unicode.h"
#include "util/log.h"

namespace kvserve {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (const char c : text) {
    if (c == ' ') {
      out += kSpmSpace;
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (text.substr(pos, kSpmSpace.size()) == kSpmSpace) {
      out += ' ';
      pos += kSpmSpace.size();
    } else {
      out += text[pos++];
    }
  }
  return out;
}

// Byte of a byte-fallback token "<0xNN>"; -1 when the text has another form.
int byte_of_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (const char c : text.substr(3, 2)) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return -1;
    value = value * 16 + (std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10);
  }
  return value;
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec& spec) : vocab_(std::move(spec.tokens), spec.scores, spec.token_types) {}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_spec(TokenizerSpec spec) {
  if (spec.tokens.empty()) return corrupt(spec.source + ": tokenizer.ggml.tokens: the vocabulary is empty");
  std::unique_ptr<Tokenizer> t(new Tokenizer(spec));
  KVS_RETURN_IF_ERROR(t->init(spec));
  return t;
}

Status Tokenizer::init(const TokenizerSpec& spec) {
  model_ = spec.model;
  pre_ = spec.pre;
  KVS_RETURN_IF_ERROR(init_family_defaults(spec));
  KVS_RETURN_IF_ERROR(apply_metadata(spec));
  // EOG detection may turn tokens into control tokens, and the strip attributes apply to
  // special tokens, so both come before the special-token splitter is built.
  init_eog();
  init_strip_attributes(spec.general_name);
  specials_ = std::make_unique<SpecialTokenSplitter>(vocab_);
  KVS_RETURN_IF_ERROR(init_encoder(spec));
  pieces_.resize(static_cast<size_t>(vocab_.size()));
  for (int32_t id = 0; id < vocab_.size(); ++id) pieces_[static_cast<size_t>(id)] = compute_piece(id);
  return Status::ok_status();
}

Status Tokenizer::init_family_defaults(const TokenizerSpec& spec) {
  const std::string& src = spec.source;
  if (model_ == "llama") {
    kind_ = TokenizerKind::kSpm;
    bos_id_ = 1;
    eos_id_ = 2;
    unk_id_ = 0;
    add_space_prefix_ = true;
    add_bos_ = true;
  } else if (model_ == "gpt2") {
    kind_ = TokenizerKind::kBpe;
    // The reference's fallback ids for gpt2 vocabularies; converters nearly always write
    // the real ones, and an id out of range means "none".
    bos_id_ = 11;
    eos_id_ = 11;
    pre_spec_ = find_pre_tokenizer(pre_);
    if (!pre_spec_) return unsupported(src + ": tokenizer.ggml.pre: unknown pre-tokenizer '" + pre_ + "'");
    if (pre_.empty()) KVS_WARN(src + ": tokenizer.ggml.pre is missing; using the default pre-tokenizer");
    add_bos_ = pre_spec_->add_bos;
    if (spec.merges.empty()) {
      return corrupt(src + ": tokenizer.ggml.merges: missing or empty (needed by gpt2)");
    }
  } else if (model_ == "bert") {
    kind_ = TokenizerKind::kWordPiece;
    bos_id_ = 101;  // [CLS]
    unk_id_ = 100;  // [UNK]
    sep_id_ = 102;  // [SEP]
    add_bos_ = true;
  } else {
    return unsupported(src + ": tokenizer.ggml.model: '" + model_ + "' is not supported (llama, gpt2, bert)");
  }
  return Status::ok_status();
}

Status Tokenizer::apply_metadata(const TokenizerSpec& spec) {
  const std::string& src = spec.source;
  // Metadata ids replace the defaults when in range (the reference warns and keeps the
  // default otherwise); defaults out of range mean "none".
  auto apply_id = [&](const std::optional<int64_t>& meta, int32_t& id, const char* key) {
    if (!vocab_.valid(id)) id = -1;
    if (!meta) return;
    if (*meta >= 0 && *meta < vocab_.size()) {
      id = static_cast<int32_t>(*meta);
    } else if (*meta == -1 || *meta == 0xFFFFFFFFll) {
      KVS_DEBUG(src + ": " + key + " is -1 (none)");  // converters write this for "no such token"
    } else {
      KVS_WARN(src + ": " + key + " = " + std::to_string(*meta) + " is out of range; ignored");
    }
  };
  apply_id(spec.bos_id, bos_id_, "tokenizer.ggml.bos_token_id");
  apply_id(spec.eos_id, eos_id_, "tokenizer.ggml.eos_token_id");
  apply_id(spec.unk_id, unk_id_, "tokenizer.ggml.unknown_token_id");
  apply_id(spec.eot_id, eot_id_, "tokenizer.ggml.eot_token_id");
  apply_id(spec.eom_id, eom_id_, "tokenizer.ggml.eom_token_id");
  apply_id(spec.sep_id, sep_id_, "tokenizer.ggml.seperator_token_id");
  if (spec.add_space_prefix) add_space_prefix_ = *spec.add_space_prefix;
  if (spec.add_bos) add_bos_ = *spec.add_bos;
  if (spec.add_eos) add_eos_ = *spec.add_eos;
  if (add_bos_ && bos_id_ < 0) {
    return corrupt(src + ": tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set");
  }
  if (add_eos_ && eos_id_ < 0) {
    return corrupt(src + ": tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is not set");
  }
  return Status::ok_status();
}

Status Tokenizer::init_encoder(const TokenizerSpec& spec) {
  switch (kind_) {
    case TokenizerKind::kSpm:
      spm_ = std::make_unique<SpmEncoder>(vocab_, unk_id_);
      break;
    case TokenizerKind::kBpe: {
      Expected<RegexSplitter> splitter = RegexSplitter::create(pre_spec_->regexes);
      if (!splitter.ok()) {
        return invalid_argument(spec.source + ": tokenizer.ggml.pre: " + splitter.status().message());
      }
      splitter_.emplace(std::move(splitter).value());
      bpe_ = std::make_unique<BpeEncoder>(vocab_, spec.merges, pre_spec_->ignore_merges);
      if (bpe_->num_unusable_merges() > 0) {
        KVS_DEBUG(spec.source + ": " + std::to_string(bpe_->num_unusable_merges()) +
                  " merges name pieces that are not tokens; skipped");
      }
      break;
    }
    case TokenizerKind::kWordPiece:
      // BERT-style uncased vocabularies (the GGUF converters write no normalizer flags).
      wordpiece_ =
          std::make_unique<WordPieceEncoder>(vocab_, unk_id_, /*lowercase=*/true, /*strip_accents=*/true);
      break;
  }
  return Status::ok_status();
}

std::string Tokenizer::compute_piece(int32_t id) const {
  const TokenData& t = vocab_.at(id);
  if (t.attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) return t.text;
  if (t.attr & kAttrByte) {
    const int b = byte_of_byte_token(t.text);
    return b >= 0 ? std::string(1, static_cast<char>(b)) : std::string();
  }
  if (t.attr & kAttrNormal) {
    return kind_ == TokenizerKind::kBpe ? unicode_to_bytes(t.text) : unescape_spaces(t.text);
  }
  return {};  // unused and undefined tokens render as nothing, like the reference
}

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string kEmpty;
  return vocab_.valid(id) ? vocab_.at(id).text : kEmpty;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  if (!vocab_.valid(id)) return {};
  if (!special && vocab_.has_attr(id, kAttrControl | kAttrUnknown)) return {};
  return pieces_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, const DecodeOptions& opts) const {
  std::string out;
  bool strip_pending = opts.strip_space_prefix && add_space_prefix_;
  for (const int32_t id : ids) {
    if (!vocab_.valid(id)) continue;
    if (!opts.special && vocab_.has_attr(id, kAttrControl | kAttrUnknown)) continue;
    std::string_view piece = pieces_[static_cast<size_t>(id)];
    // The prefix space sits in the first text token; rendered control tokens (BOS) before
    // it are kept as they are.
    if (strip_pending && !piece.empty() && !vocab_.has_attr(id, kAttrControl | kAttrUnknown)) {
      if (piece.front() == ' ') piece.remove_prefix(1);
      strip_pending = false;
    }
    out += piece;
  }
  return out;
}

void Tokenizer::encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  switch (kind_) {
    case TokenizerKind::kSpm: {
      // SentencePiece treats text as starting at a word boundary: a space is prefixed to
      // the start of the input and after every special token.
      std::string prefixed = add_space_prefix_ && after_special ? " " : "";
      prefixed += text;
      spm_->encode(escape_spaces(prefixed), out);
      break;
    }
    case TokenizerKind::kBpe: {
      std::vector<TextPiece> pieces;
      splitter_->split(text, pieces);
      for (const TextPiece& p : pieces) bpe_->encode(text.substr(p.begin, p.end - p.begin), out);
      break;
    }
    case TokenizerKind::kWordPiece:
      wordpiece_->encode(text, out);
      break;
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return encode(text, add_special, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                       std::span<const TextRange> literal) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  std::vector<Fragment> fragments;
  specials_->split(text, parse_special, fragments, literal);

  if (add_special && (add_bos_ || kind_ == TokenizerKind::kWordPiece) && bos_id_ >= 0) out.push_back(bos_id_);
  bool after_special = true;  // the start of the text counts as a word boundary
  for (const Fragment& f : fragments) {
    if (f.is_text()) {
      encode_text(text.substr(f.begin, f.end - f.begin), after_special, out);
      after_special = false;
    } else {
      out.push_back(f.token);
      after_special = true;
    }
  }
  if (add_special) {
    if (kind_ == TokenizerKind::kWordPiece) {
      if (sep_id_ >= 0) out.push_back(sep_id_);
    } else if (add_eos_) {
      out.push_back(eos_id_);
    }
  }
  return out;
}

}  // namespace kvserve
