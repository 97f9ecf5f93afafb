// Which tokens end generation, and which special tokens swallow neighbouring whitespace.
// GGUF files carry only some of this (EOS/EOT/EOM ids); the rest the reference infers from
// token texts, and so does this file.
#include <array>
#include <cctype>

#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

// DeepSeek's "<｜end▁of▁sentence｜>" (full-width bars, U+2581 spaces).
constexpr std::string_view kDeepseekEos =
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";

// Token texts that end a turn when the metadata names no EOT token, in the order of
// preference (the reference picks whichever its hash map yields first; a fixed order keeps
// this deterministic).
constexpr std::array<std::string_view, 11> kEotTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",     "<|end_of_text|>",
    "<EOT>",      "_<EOT>",     "[EOT]",   kDeepseekEos,    "<end_of_utterance>"};

// Every token with one of these texts ends generation (chat-template turn ends of the
// common families), as in the reference.
constexpr std::array<std::string_view, 22> kEogTexts = {"<|eot_id|>",
                                                        "<|im_end|>",
                                                        "<|end|>",
                                                        "<|return|>",
                                                        "<|call|>",
                                                        "<|flush|>",
                                                        "<|calls|>",
                                                        "<end_of_turn>",
                                                        "<|endoftext|>",
                                                        "</s>",
                                                        "<|eom_id|>",
                                                        "<EOT>",
                                                        "_<EOT>",
                                                        "[EOT]",
                                                        "[EOS]",
                                                        "<|end_of_text|>",
                                                        "<end_of_utterance>",
                                                        "<eos>",
                                                        "<turn|>",
                                                        "<|tool_response>",
                                                        kDeepseekEos,
                                                        "[e~["};

std::string lowercase_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void Tokenizer::init_eog() {
  if (eot_id_ < 0) {
    for (const std::string_view text : kEotTexts) {
      const int32_t id = vocab_.find(text);
      if (id >= 0) {
        eot_id_ = id;
        break;
      }
    }
  }
  if (eom_id_ < 0) eom_id_ = vocab_.find("<|eom_id|>");

  is_eog_.assign(static_cast<size_t>(vocab_.size()), 0);
  auto mark = [&](int32_t id) {
    if (!vocab_.valid(id)) return;
    is_eog_[static_cast<size_t>(id)] = 1;
    // A turn-ending token must never be produced from plain text, so the reference makes
    // it a control token even when the converter typed it as normal.
    TokenData& t = vocab_.mutable_at(id);
    if (!(t.attr & kAttrControl)) t.attr |= kAttrControl;
  };
  for (const std::string_view text : kEogTexts) mark(vocab_.find(text));
  mark(eot_id_);
  mark(eom_id_);
  if (vocab_.valid(eos_id_)) is_eog_[static_cast<size_t>(eos_id_)] = 1;

  // Harmony-style vocabularies (gpt-oss, solar-open) end a turn with <|return|>/<|call|>;
  // their <|end|> only closes a message, so it is not EOG there and stays visible.
  const auto eog_has = [&](std::string_view text) {
    const int32_t id = vocab_.find(text);
    return id >= 0 && is_eog_[static_cast<size_t>(id)];
  };
  const int32_t end_id = vocab_.find("<|end|>");
  if (end_id >= 0 && eog_has("<|end|>") &&
      ((eog_has("<|return|>") && eog_has("<|call|>")) || (eog_has("<|calls|>") && eog_has("<|flush|>")))) {
    is_eog_[static_cast<size_t>(end_id)] = 0;
    vocab_.mutable_at(end_id).attr = kAttrUserDefined;
    if (eot_id_ == end_id) eot_id_ = -1;
  }
}

void Tokenizer::init_strip_attributes(const std::string& general_name) {
  // GGUF stores no per-token strip flags; the reference hard-codes the one family that
  // needs them: Phi-3's added tokens swallow the whitespace that follows them.
  const std::string name = lowercase_ascii(general_name);
  if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return;
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    if (vocab_.has_attr(id, kAttrControl | kAttrUserDefined | kAttrUnknown))
      vocab_.mutable_at(id).attr |= kAttrRstrip;
  }
  const int32_t eos_text = vocab_.find("</s>");
  if (eos_text >= 0) vocab_.mutable_at(eos_text).attr |= kAttrRstrip;
  for (const std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
    const int32_t id = vocab_.find(text);
    if (id >= 0) vocab_.mutable_at(id).attr &= ~uint32_t(kAttrRstrip);
  }
}

}  // namespace kvserve
