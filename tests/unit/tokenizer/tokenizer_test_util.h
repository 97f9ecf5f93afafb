// Shared fixtures of the tokenizer tests: loading the shared vocabularies (cached per
// process, they take a moment to build) and reading llama.cpp's vocab test vectors.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::test {

inline std::string shared_path(const std::string& rel) { return std::string(KVS_SHARED_DIR) + "/" + rel; }
inline std::string vocab_path(const std::string& name) {
  return shared_path("models/llama.cpp-vocab/ggml-vocab-" + name + ".gguf");
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Loads a tokenizer from a GGUF file once per process; fails the test (returns nullptr)
// with the Status message when it cannot.
inline const Tokenizer* gguf_tokenizer(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(path);
  if (it != cache.end()) return it->second.get();
  Expected<std::shared_ptr<GgufFile>> f = GgufFile::open(path);
  if (!f.ok()) {
    ADD_FAILURE() << f.status().to_string();
    return nullptr;
  }
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_gguf(**f);
  if (!t.ok()) {
    ADD_FAILURE() << t.status().to_string();
    return nullptr;
  }
  return (cache[path] = std::move(t).value()).get();
}

inline const Tokenizer* vocab_tokenizer(const std::string& name) { return gguf_tokenizer(vocab_path(name)); }

// The Llama-3.2 BPE vocabulary from encoder.json + vocab.bpe, with the llama-bpe pre-tokenizer.
inline const Tokenizer* llama3_files_tokenizer() {
  static std::unique_ptr<Tokenizer> cached;
  if (cached) return cached.get();
  Expected<TokenizerSpec> spec = read_bpe_files(shared_path("models/llama3.2-bpe/encoder.json"),
                                                shared_path("models/llama3.2-bpe/vocab.bpe"), "llama-bpe");
  if (!spec.ok()) {
    ADD_FAILURE() << spec.status().to_string();
    return nullptr;
  }
  spec->add_bos = false;  // the files carry no special tokens, so there is no BOS to add
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_spec(std::move(spec).value());
  if (!t.ok()) {
    ADD_FAILURE() << t.status().to_string();
    return nullptr;
  }
  cached = std::move(t).value();
  return cached.get();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Reads <vocab>.gguf.inp/.out the way llama.cpp's test-tokenizer-0 does: the .inp texts are
// separated by "\n__ggml_vocab_test__\n" (so no text keeps its final newline; the file ends
// with a separator), and each .out line holds the expected ids of one text.
inline std::vector<VocabCase> read_vocab_cases(const std::string& name) {
  const std::string inp = read_file(vocab_path(name) + ".inp");
  const std::string out = read_file(vocab_path(name) + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<VocabCase> cases;
  std::istringstream lines(out);
  std::string line;
  for (size_t i = 0; std::getline(lines, line); ++i) {
    VocabCase c;
    c.text = i < texts.size() ? texts[i] : "";
    std::istringstream ids(line);
    for (int32_t id = 0; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(texts.size(), cases.size()) << name << ": .inp and .out disagree on the number of texts";
  return cases;
}

inline std::string ids_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

// Runs every vector of `name` through `t` with add_special=false (the reference test calls
// tokenize(text, add_special=false, parse_special=false); no vector text holds a special
// token, so parse_special=true must give the same ids) and reports every mismatching text;
// returns the number that match.
inline size_t check_vocab_cases(const Tokenizer& t, const std::string& name, bool parse_special = false) {
  const std::vector<VocabCase> cases = read_vocab_cases(name);
  EXPECT_FALSE(cases.empty()) << name << ": no test vectors";
  size_t num_ok = 0;
  for (const VocabCase& c : cases) {
    const std::vector<int32_t> got = t.encode(c.text, false, parse_special);
    if (got == c.ids) {
      ++num_ok;
    } else {
      ADD_FAILURE() << name << (parse_special ? " (parse_special)" : "") << ": text '" << c.text
                    << "'\n  expected: " << ids_string(c.ids) << "\n  got:      " << ids_string(got);
    }
  }
  return num_ok;
}

}  // namespace kvserve::test
