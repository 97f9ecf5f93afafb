// Loader for GPT-2-style BPE vocabularies kept as two files (as in the original GPT-2
// release and Hugging Face "slow" tokenizers):
//   encoder.json  a JSON object mapping each token's (byte-mapped) text to its id
//   vocab.bpe     the merges, one "left right" per line in rank order, after an optional
//                 "#version: ..." line
// The files hold regular tokens only (no special tokens), so the result has no BOS/EOS.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace kvserve {

// A "gpt2" TokenizerSpec with pre-tokenizer `pre` (e.g. "llama-bpe"). Errors name the
// file and the offset or line that is malformed.
Expected<TokenizerSpec> read_bpe_files(const std::string& encoder_json_path,
                                       const std::string& vocab_bpe_path, const std::string& pre);

// Parses the encoder.json text (exposed for tests). `source` names it in errors.
Status parse_encoder_json(std::string_view json, const std::string& source, std::vector<std::string>& tokens);

}  // namespace kvserve
