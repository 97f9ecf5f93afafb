// How one request turns logits into tokens, and when it stops.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvserve {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy (argmax)
  int top_k = 40;            // <= 0: disabled
  float top_p = 0.95f;       // >= 1: disabled
  float min_p = 0.05f;       // <= 0: disabled; keeps tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;     // 1: disabled; divides positive / multiplies negative logits
  int repeat_last_n = 64;          // window of recent tokens the penalties look at (-1: all)
  float presence_penalty = 0.0f;   // subtracted once from every token seen in the window
  float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
  uint64_t seed = 0xC0FFEE;        // same seed, same prompt, same params: same output
  int max_tokens = 128;
  std::vector<std::string> stop;   // generation ends before the first occurrence of any
  bool ignore_eos = false;         // keep going past end-of-generation tokens
  // (token id, bias) pairs added to those tokens' logits after the penalties, before greedy or
  // sampling; a bias of -100 or less bans the token (its logit becomes -inf). The logprobs a
  // request reports stay the model's own.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Constrain the output to one JSON object (OpenAI's response_format json_object): every step
  // masks the tokens that cannot continue one, and generation ends ("stop") when it closes.
  bool json_object = false;
};

// The bounds of a logit bias (OpenAI's) and of how many tokens one request may bias.
constexpr float kMaxLogitBias = 100.0f;
constexpr size_t kMaxLogitBiasTokens = 1024;

}  // namespace kvserve
