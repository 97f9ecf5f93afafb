// Tokenizer::from_gguf: reads the `tokenizer.ggml.*` metadata into a TokenizerSpec.
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

// Reads metadata with errors of the form "<file>: <key>: <what is wrong>".
class MetadataReader {
 public:
  explicit MetadataReader(const GgufFile& f) : f_(f) {}

  Status error(std::string_view key, const std::string& what) const {
    return corrupt(f_.path() + ": " + std::string(key) + ": " + what);
  }

  const GgufValue* array(std::string_view key, bool required, Status& st) const {
    const GgufValue* v = f_.find(key);
    if (!v) {
      if (required) st = not_found(f_.path() + ": " + std::string(key) + ": missing");
      return nullptr;
    }
    if (v->type != GgufValueType::ARRAY) {
      st = error(key, std::string("expected an array, found ") + gguf_value_type_name(v->type));
      return nullptr;
    }
    return v;
  }

  Status strings(std::string_view key, bool required, std::vector<std::string>& out) const {
    Status st;
    const GgufValue* v = array(key, required, st);
    if (!v) return st;
    if (v->elem_type != GgufValueType::STRING) {
      return error(key,
                   std::string("expected an array of strings, found ") + gguf_value_type_name(v->elem_type));
    }
    out = v->arr_str;
    return st;
  }

  // Scores are float32 in practice; some converters write int32.
  Status numbers(std::string_view key, std::vector<double>& out) const {
    Status st;
    const GgufValue* v = array(key, false, st);
    if (!v) return st;
    if (v->elem_type == GgufValueType::FLOAT32 || v->elem_type == GgufValueType::FLOAT64) {
      out = v->arr_float;
    } else if (v->elem_type == GgufValueType::INT32) {
      out.assign(v->arr_int.begin(), v->arr_int.end());
    } else {
      return error(key,
                   std::string("expected an array of float32, found ") + gguf_value_type_name(v->elem_type));
    }
    return st;
  }

  Status integers(std::string_view key, std::vector<int64_t>& out) const {
    Status st;
    const GgufValue* v = array(key, false, st);
    if (!v) return st;
    if (v->elem_type == GgufValueType::STRING || v->elem_type == GgufValueType::ARRAY ||
        v->elem_type == GgufValueType::FLOAT32 || v->elem_type == GgufValueType::FLOAT64) {
      return error(key,
                   std::string("expected an array of integers, found ") + gguf_value_type_name(v->elem_type));
    }
    out = v->arr_int;
    return st;
  }

  Status integer(std::string_view key, std::optional<int64_t>& out) const {
    const GgufValue* v = f_.find(key);
    if (!v) return {};
    if (!v->is_integer())
      return error(key, std::string("expected an integer, found ") + gguf_value_type_name(v->type));
    out = v->type == GgufValueType::UINT64 && v->u > uint64_t(INT64_MAX) ? -1 : v->i;
    return {};
  }

  Status boolean(std::string_view key, std::optional<bool>& out) const {
    const GgufValue* v = f_.find(key);
    if (!v) return {};
    if (v->type != GgufValueType::BOOL)
      return error(key, std::string("expected a bool, found ") + gguf_value_type_name(v->type));
    out = v->b;
    return {};
  }

  Status string(std::string_view key, bool required, std::string& out) const {
    const GgufValue* v = f_.find(key);
    if (!v) return required ? not_found(f_.path() + ": " + std::string(key) + ": missing") : Status{};
    if (v->type != GgufValueType::STRING)
      return error(key, std::string("expected a string, found ") + gguf_value_type_name(v->type));
    out = v->str;
    return {};
  }

 private:
  const GgufFile& f_;
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& f) {
  const MetadataReader r(f);
  TokenizerSpec s;
  s.source = f.path();
  KVS_RETURN_IF_ERROR(r.string("tokenizer.ggml.model", true, s.model));
  KVS_RETURN_IF_ERROR(r.string("tokenizer.ggml.pre", false, s.pre));
  KVS_RETURN_IF_ERROR(r.string("general.name", false, s.general_name));
  KVS_RETURN_IF_ERROR(r.strings("tokenizer.ggml.tokens", true, s.tokens));
  KVS_RETURN_IF_ERROR(r.numbers("tokenizer.ggml.scores", s.scores));
  KVS_RETURN_IF_ERROR(r.integers("tokenizer.ggml.token_type", s.token_types));
  if (s.model == "gpt2") KVS_RETURN_IF_ERROR(r.strings("tokenizer.ggml.merges", true, s.merges));

  // Per-token arrays shorter than the vocabulary would leave tokens without a value.
  const size_t n = s.tokens.size();
  if (!s.scores.empty() && s.scores.size() < n) {
    return r.error("tokenizer.ggml.scores",
                   std::to_string(s.scores.size()) + " scores for " + std::to_string(n) + " tokens");
  }
  if (!s.token_types.empty() && s.token_types.size() < n) {
    return r.error("tokenizer.ggml.token_type",
                   std::to_string(s.token_types.size()) + " types for " + std::to_string(n) + " tokens");
  }

  KVS_RETURN_IF_ERROR(r.integer("tokenizer.ggml.bos_token_id", s.bos_id));
  KVS_RETURN_IF_ERROR(r.integer("tokenizer.ggml.eos_token_id", s.eos_id));
  KVS_RETURN_IF_ERROR(r.integer("tokenizer.ggml.unknown_token_id", s.unk_id));
  KVS_RETURN_IF_ERROR(r.integer("tokenizer.ggml.eot_token_id", s.eot_id));
  KVS_RETURN_IF_ERROR(r.integer("tokenizer.ggml.eom_token_id", s.eom_id));
  KVS_RETURN_IF_ERROR(r.integer("tokenizer.ggml.seperator_token_id", s.sep_id));  // sic: the GGUF spelling
  KVS_RETURN_IF_ERROR(r.integer("tokenizer.ggml.padding_token_id", s.pad_id));
  KVS_RETURN_IF_ERROR(r.boolean("tokenizer.ggml.add_bos_token", s.add_bos));
  KVS_RETURN_IF_ERROR(r.boolean("tokenizer.ggml.add_eos_token", s.add_eos));
  KVS_RETURN_IF_ERROR(r.boolean("tokenizer.ggml.add_space_prefix", s.add_space_prefix));
  return from_spec(std::move(s));
}

}  // namespace kvserve
