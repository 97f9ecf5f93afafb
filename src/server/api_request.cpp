#include "server/api_request.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "server/json_body.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

Status field_error(const std::string& field, const std::string& why) { return invalid_argument(field + ": " + why); }

// Optional number in [lo, hi]; absent or null leaves *out unchanged.
Status get_number(const json& j, const char* field, double lo, double hi, float* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return Status::ok_status();
  if (!it->is_number()) return field_error(field, "expected a number");
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return field_error(field, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + it->dump());
  *out = float(v);
  return Status::ok_status();
}

// Optional integer in [lo, hi]. 1.0 is not an integer here: clients that send floats for
// counts usually have a bug worth reporting.
Status get_int(const json& j, const char* field, int64_t lo, int64_t hi, int64_t* out, bool* given = nullptr) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return Status::ok_status();
  if (!it->is_number_integer()) return field_error(field, "expected an integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX))
    return field_error(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    return field_error(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                  std::to_string(v));
  *out = v;
  if (given) *given = true;
  return Status::ok_status();
}

Status get_bool(const json& j, const char* field, bool* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return Status::ok_status();
  if (!it->is_boolean()) return field_error(field, "expected true or false");
  *out = it->get<bool>();
  return Status::ok_status();
}

Status get_string(const json& j, const char* field, std::string* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return Status::ok_status();
  if (!it->is_string()) return field_error(field, "expected a string");
  *out = it->get<std::string>();
  return Status::ok_status();
}

Status get_stop(const json& j, std::vector<std::string>* out) {
  auto it = j.find("stop");
  if (it == j.end() || it->is_null()) return Status::ok_status();
  std::vector<std::string> stops;
  if (it->is_string()) {
    stops.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->size() > 16) return field_error("stop", "at most 16 stop strings");
    for (const auto& s : *it) {
      if (!s.is_string()) return field_error("stop", "expected a string or an array of strings");
      stops.push_back(s.get<std::string>());
    }
  } else {
    return field_error("stop", "expected a string or an array of strings");
  }
  for (const auto& s : stops)
    if (s.empty()) return field_error("stop", "stop strings must not be empty");
  *out = std::move(stops);
  return Status::ok_status();
}

// logit_bias: OpenAI's object of token id (a decimal string) -> bias, or llama.cpp's array of
// [id, bias] pairs where a bias of false bans the token. Biases in [-100, 100]; the ids are checked
// against the vocabulary by the engine (check_logit_bias).
Status get_logit_bias(const json& j, std::vector<std::pair<int32_t, float>>* out) {
  auto it = j.find("logit_bias");
  if (it == j.end() || it->is_null()) return Status::ok_status();
  if (!it->is_object() && !it->is_array())
    return field_error("logit_bias",
                       "expected an object of token id -> bias, or an array of [id, bias] pairs");
  if (it->size() > kMaxLogitBiasTokens)
    return field_error("logit_bias", "at most " + std::to_string(kMaxLogitBiasTokens) + " tokens");
  std::vector<std::pair<int32_t, float>> biases;
  auto add = [&](int64_t id, const json& bias, const std::string& where) -> Status {
    if (id < 0 || id > INT32_MAX) return field_error(where, "token ids are non-negative integers");
    float b;
    if (bias.is_boolean() && !bias.get<bool>()) {
      b = -kMaxLogitBias;
    } else if (bias.is_number() && bias.get<double>() >= -kMaxLogitBias &&
               bias.get<double>() <= kMaxLogitBias) {
      b = bias.get<float>();
    } else {
      return field_error(where, "the bias must be a number in [-100, 100] (or false: ban)");
    }
    biases.emplace_back(int32_t(id), b);
    return Status::ok_status();
  };
  if (it->is_object()) {
    for (const auto& [key, bias] : it->items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0')
        return field_error("logit_bias", "keys are token ids, got '" + key + "'");
      KVS_RETURN_IF_ERROR(add(id, bias, "logit_bias[\"" + key + "\"]"));
    }
  } else {
    for (size_t i = 0; i < it->size(); ++i) {
      const json& pair = (*it)[i];
      const std::string where = "logit_bias[" + std::to_string(i) + "]";
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer())
        return field_error(where, "expected [token id, bias]");
      KVS_RETURN_IF_ERROR(add(pair[0].get<int64_t>(), pair[1], where));
    }
  }
  *out = std::move(biases);
  return Status::ok_status();
}

// A list of token ids into `out`; false when an element is not an id.
bool get_token_list(const json& list, std::vector<int32_t>* out) {
  for (const auto& t : list) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) return false;
    out->push_back(int32_t(t.get<int64_t>()));
  }
  return true;
}

// prompt: a string; on completions also OpenAI's other forms: a list of token ids, or a batch (a
// list of strings, or a list of token-id lists), each prompt answered by its own choices.
Status get_prompt(const json& j, ApiRequest* r) {
  constexpr const char* kForms =
      "expected a string, a list of strings, a list of token ids, or a list of token-id lists";
  auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) return field_error("prompt", "required");
  if (it->is_string()) {
    r->prompts.push_back(PromptInput{it->get<std::string>(), {}});
  } else if (it->is_array() && r->route == Route::kCompletion) {
    if (it->empty()) return field_error("prompt", "must not be empty");
    if (it->size() > kMaxBatchPrompts && !(*it)[0].is_number_integer())
      return field_error("prompt", "at most " + std::to_string(kMaxBatchPrompts) + " prompts in a batch");
    if ((*it)[0].is_number_integer()) {  // one prompt of token ids
      PromptInput p;
      if (!get_token_list(*it, &p.tokens)) return field_error("prompt", kForms);
      r->prompts.push_back(std::move(p));
    } else {
      for (size_t i = 0; i < it->size(); ++i) {
        const json& e = (*it)[i];
        const std::string where = "prompt[" + std::to_string(i) + "]";
        PromptInput p;
        if (e.is_string()) {
          p.text = e.get<std::string>();
        } else if (!e.is_array() || !get_token_list(e, &p.tokens)) {
          return field_error(where, kForms);
        }
        if (p.text.empty() && p.tokens.empty()) return field_error(where, "must not be empty");
        r->prompts.push_back(std::move(p));
      }
    }
  } else {
    return field_error("prompt", r->route == Route::kCompletion ? kForms : "expected a string");
  }
  if (r->prompts.size() == 1 && r->prompts[0].text.empty() && r->prompts[0].tokens.empty())
    return field_error("prompt", "must not be empty");
  return Status::ok_status();
}

Status get_messages(const json& j, ApiRequest* r) {
  auto it = j.find("messages");
  if (it == j.end() || it->is_null()) return field_error("messages", "required");
  if (!it->is_array() || it->empty()) return field_error("messages", "expected a non-empty array of messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return field_error(at, "expected an object with role and content");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return field_error(at + ".role", "expected a string");
    std::string rs = role->get<std::string>();
    if (rs == "developer") rs = "system";  // OpenAI's newer name for the system role
    if (rs != "system" && rs != "user" && rs != "assistant")
      return field_error(at + ".role", "must be system, developer, user or assistant, got '" + rs + "'");
    ChatMessage msg{rs, ""};
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (rs != "assistant") return field_error(at + ".content", "required");
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: only text parts can be served by a text model.
      for (const auto& part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          return field_error(at + ".content", "only parts of type \"text\" with a string \"text\" are supported");
        msg.content += part["text"].get<std::string>();
      }
    } else {
      return field_error(at + ".content", "expected a string or an array of text parts");
    }
    r->messages.push_back(std::move(msg));
  }
  return Status::ok_status();
}

// response_format: {"type": "text"} (free text, the default) or {"type": "json_object"} (one JSON
// object, SamplingParams::json_object). JSON schemas are refused: constraining to a schema is more
// than constraining to JSON, and answering one with unchecked JSON would be wrong.
Status get_response_format(const json& j, bool* json_object) {
  auto it = j.find("response_format");
  if (it == j.end() || it->is_null()) return Status::ok_status();
  const json type = it->is_object() ? it->value("type", json()) : json();
  if (type == "json_object") {
    *json_object = true;
    return Status::ok_status();
  }
  if (type == "json_schema")
    return field_error("response_format", "json_schema is not supported (json_object and text are)");
  if (type != "text")
    return field_error("response_format", "expected {\"type\": \"text\" | \"json_object\"}");
  return Status::ok_status();
}

// OpenAI fields that change what a response must be and that kvserve cannot honour: a request
// that sets one to anything but its neutral value is refused (400 naming it) rather than answered
// as if it had not (a caller asking for a tool call would otherwise get free text). Neutral
// values, which client libraries send by default, pass: null, empty tool lists, "none"/"auto"
// tool choices without tools, echo false, best_of 1, modalities ["text"].
Status reject_unhonoured(const json& j, Route route) {
  const auto given = [&](const char* f) { return j.contains(f) && !j[f].is_null(); };
  for (const char* f : {"tools", "functions"})
    if (given(f) && !(j[f].is_array() && j[f].empty())) return field_error(f, "function calling is not supported");
  for (const char* f : {"tool_choice", "function_call"})
    if (given(f) && j[f] != "none" && j[f] != "auto")
      return field_error(f, "function calling is not supported");
  if (given("echo") && route != Route::kCompletion && j["echo"] != false)
    return field_error("echo", "only /v1/completions echoes the prompt");
  if (given("suffix") && j["suffix"] != "") return field_error("suffix", "not supported (insertion)");
  if (given("best_of") && j["best_of"] != 1) return field_error("best_of", "only 1 is supported");
  // Output modalities: text only. ["text"] is neutral; an audio request is not.
  if (given("modalities") && j["modalities"] != json::array({"text"}))
    return field_error("modalities", "only [\"text\"] is supported");
  if (given("audio")) return field_error("audio", "audio output is not supported");
  return Status::ok_status();
}

Status parse_into(const json& j, const ApiLimits& limits, ApiRequest* r) {
  if (!j.is_object()) return invalid_argument("body: expected a JSON object");
  if (r->route == Route::kChat) {
    KVS_RETURN_IF_ERROR(get_messages(j, r));
  } else {
    KVS_RETURN_IF_ERROR(get_prompt(j, r));
  }
  SamplingParams& p = r->params;
  if (r->route != Route::kGenerate) {
    // OpenAI semantics: temperature 1 and top_p 1 by default, no top-k/min-p unless asked.
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.top_k = 0;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.max_tokens = 16;  // the OpenAI default for completions; chat runs to the context end
  }
  if (r->route == Route::kCompletion) KVS_RETURN_IF_ERROR(get_bool(j, "echo", &r->echo));
  int64_t max_tokens = p.max_tokens;
  const int64_t lim = limits.max_tokens_limit;
  const char* names[] = {"max_tokens", "max_length", "max_completion_tokens", "n_predict"};
  // An echo may ask for no new token at all: the prompt alone, scored with logprobs.
  for (const char* name : names)
    KVS_RETURN_IF_ERROR(get_int(j, name, r->echo ? 0 : 1, lim, &max_tokens, &r->max_tokens_given));
  p.max_tokens = int(max_tokens);
  KVS_RETURN_IF_ERROR(get_number(j, "temperature", 0, 2, &p.temperature));
  KVS_RETURN_IF_ERROR(get_number(j, "top_p", 0, 1, &p.top_p));
  if (j.contains("top_p") && j["top_p"].is_number() && p.top_p <= 0) return field_error("top_p", "must be in (0, 1]");
  int64_t top_k = p.top_k;
  KVS_RETURN_IF_ERROR(get_int(j, "top_k", -1, 1 << 20, &top_k));
  p.top_k = int(top_k < 0 ? 0 : top_k);
  KVS_RETURN_IF_ERROR(get_number(j, "min_p", 0, 1, &p.min_p));
  KVS_RETURN_IF_ERROR(get_number(j, "presence_penalty", -2, 2, &p.presence_penalty));
  KVS_RETURN_IF_ERROR(get_number(j, "frequency_penalty", -2, 2, &p.frequency_penalty));
  KVS_RETURN_IF_ERROR(get_number(j, "repeat_penalty", 0.01, 10, &p.repeat_penalty));
  int64_t last_n = p.repeat_last_n;
  KVS_RETURN_IF_ERROR(get_int(j, "repeat_last_n", -1, 1 << 20, &last_n));
  p.repeat_last_n = int(last_n);
  int64_t seed = int64_t(p.seed & 0x7fffffffffffffffULL);
  KVS_RETURN_IF_ERROR(get_int(j, "seed", 0, INT64_MAX, &seed, &r->seed_given));
  if (r->seed_given) p.seed = uint64_t(seed);
  KVS_RETURN_IF_ERROR(get_stop(j, &p.stop));
  KVS_RETURN_IF_ERROR(get_logit_bias(j, &p.logit_bias));
  KVS_RETURN_IF_ERROR(get_response_format(j, &p.json_object));
  KVS_RETURN_IF_ERROR(get_bool(j, "ignore_eos", &p.ignore_eos));
  KVS_RETURN_IF_ERROR(get_bool(j, "stream", &r->stream));
  KVS_RETURN_IF_ERROR(get_string(j, "model", &r->model));
  KVS_RETURN_IF_ERROR(get_string(j, "cache_salt", &r->cache_salt));
  int64_t n = 1;
  KVS_RETURN_IF_ERROR(get_int(j, "n", 1, r->route == Route::kGenerate ? 1 : kMaxChoices, &n));
  r->n = int(n);
  KVS_RETURN_IF_ERROR(reject_unhonoured(j, r->route));
  if (auto so = j.find("stream_options"); so != j.end() && !so->is_null()) {
    if (!so->is_object()) return field_error("stream_options", "expected an object");
    Status st = get_bool(*so, "include_usage", &r->include_usage);
    if (!st.ok()) return field_error("stream_options.include_usage", "expected true or false");
  }
  // logprobs: an integer (how many alternatives) for completions, a boolean plus
  // top_logprobs for chat, as in the OpenAI API; /generate accepts either.
  if (auto lp = j.find("logprobs"); lp != j.end() && !lp->is_null()) {
    if (lp->is_boolean()) {
      if (r->route == Route::kCompletion) return field_error("logprobs", "expected an integer in [0, 20]");
      r->logprobs = lp->get<bool>();
    } else if (lp->is_number_integer() && r->route != Route::kChat) {
      int64_t k = 0;
      KVS_RETURN_IF_ERROR(get_int(j, "logprobs", 0, 20, &k));
      r->logprobs = true;
      r->top_logprobs = int(k);
    } else {
      return field_error("logprobs", r->route == Route::kChat ? "expected true or false" : "expected an integer in [0, 20]");
    }
  }
  if (r->route != Route::kCompletion) {
    int64_t k = r->top_logprobs;
    KVS_RETURN_IF_ERROR(get_int(j, "top_logprobs", 0, 20, &k));
    r->top_logprobs = int(k);
    if (k > 0 && !r->logprobs) return field_error("top_logprobs", "requires logprobs: true");
  }
  return Status::ok_status();
}

}  // namespace

uint64_t fresh_seed() {
  // One generator per thread, seeded from the OS: no lock, and no two threads share a stream.
  thread_local std::mt19937_64 gen{(uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()};
  return gen() & 0x7fffffffffffffffULL;  // a seed a client could also have sent (0..INT64_MAX)
}

Expected<ApiRequest> parse_api_request(const std::string& body, Route route, const ApiLimits& limits) {
  KVS_ASSIGN_OR_RETURN(const json j, parse_json_body(body));
  ApiRequest r;
  r.route = route;
  Status st = parse_into(j, limits, &r);
  if (!st.ok()) return st;
  return r;
}

Expected<int> resolve_max_tokens(const ApiRequest& req, int64_t prompt_tokens, int64_t context_length,
                                 const ApiLimits& limits) {
  if (limits.shift_context) {
    if (req.route == Route::kChat && !req.max_tokens_given) return limits.max_tokens_limit;
    return req.params.max_tokens;
  }
  if (limits.truncate_prompt) {
    const int64_t room = std::max<int64_t>(context_length - prompt_tokens, 0);
    if (req.route == Route::kChat && !req.max_tokens_given)
      return int(std::min<int64_t>(room > 0 ? room : context_length / 2, limits.max_tokens_limit));
    if (req.params.max_tokens > context_length - 2)
      return invalid_argument("max_tokens: " + std::to_string(req.params.max_tokens) +
                              " leaves no room for the prompt in the context length (" +
                              std::to_string(context_length) + " tokens), even truncated");
    return req.params.max_tokens;
  }
  if (prompt_tokens >= context_length)
    return invalid_argument("prompt: " + std::to_string(prompt_tokens) + " tokens do not fit in the context length (" +
                            std::to_string(context_length) + " tokens)");
  int64_t room = context_length - prompt_tokens;
  if (req.route == Route::kChat && !req.max_tokens_given)
    return int(std::min<int64_t>(room, limits.max_tokens_limit));
  if (req.params.max_tokens > room)
    return invalid_argument("max_tokens: prompt (" + std::to_string(prompt_tokens) + " tokens) + max_tokens (" +
                            std::to_string(req.params.max_tokens) + ") exceeds the context length (" +
                            std::to_string(context_length) + " tokens)");
  return req.params.max_tokens;
}

}  // namespace kvserve::server
