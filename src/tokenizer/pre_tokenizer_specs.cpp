// The table from `tokenizer.ggml.pre` names to regex lists. The regexes are those of each
// model family's tokenizer.json pre_tokenizer (GPT-2 / tiktoken patterns, Split rules), in
// the form and order in which the reference applies them.
#include <array>

#include "tokenizer/pre_tokenizer.h"

namespace kvserve {
namespace {

// The original GPT-2 pattern: contractions, optional-space words / numbers / other runs,
// and whitespace that does not precede a non-space (so " word" keeps its space).
constexpr const char* kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

// tiktoken cl100k (Llama-3): case-insensitive contractions, a word may take one leading
// non-letter, numbers in groups of up to three, newlines kept together. The contractions are
// spelled with explicit [sS] classes (as the reference does) rather than (?i:), so Unicode
// case folding (e.g. U+017F matching 's') cannot creep in.
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Qwen2: as Llama-3 but every digit is its own piece.
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Qwen3.5: as Qwen2 with combining marks (\p{M}) kept inside words.
constexpr const char* kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// tiktoken o200k (GPT-4o, Llama-4): words split at lower->upper case changes.
constexpr const char* kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Mistral tekken: like o200k without contractions and with single digits.
constexpr const char* kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// DeepSeek-LLM: newlines alone; Latin/Greek/Cyrillic/... letter runs with an optional
// leading space; ASCII and full-width punctuation runs; trailing whitespace; CJK/Hangul runs
// (note: U+0800..U+4E00 is one range, as in the original); digit runs.
constexpr const char* kDeepseekLlmLetters =
    "\\s?["
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}"
    "\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}"
    "\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}"
    "\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}"
    "\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}"
    "]+";
constexpr const char* kDeepseekLlmPunct =
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
constexpr const char* kCjkRuns = "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";

PreTokenizerSpec regexes(std::vector<std::string> list) {
  PreTokenizerSpec s;
  s.regexes = std::move(list);
  return s;
}

template <size_t N>
bool is_one_of(std::string_view name, const std::array<std::string_view, N>& names) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace

std::optional<PreTokenizerSpec> find_pre_tokenizer(std::string_view pre) {
  // Names are grouped by the regex list they share (llama.cpp's grouping of the names that
  // converters write).
  static constexpr std::array<std::string_view, 9> kLlama3Names = {"llama3",   "llama-v3",  "llama-bpe",
                                                                   "falcon3",  "falcon-h1", "pixtral",
                                                                   "midm-2.0", "lfm2",      "jina-v5-nano"};
  static constexpr std::array<std::string_view, 19> kGpt2Names = {
      "gpt-2",       "phi-2",   "mpt",        "olmo",        "jais",           "trillion",     "exaone4",
      "jina-es",     "jina-de", "jina-v1-en", "jina-v2-es",  "jina-v2-de",     "jina-v2-code", "gigachat",
      "roberta-bpe", "a.x-4.0", "mellum",     "modern-bert", "granite-docling"};
  static constexpr std::array<std::string_view, 8> kDigitThenGpt2Names = {
      "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"};
  static constexpr std::array<std::string_view, 8> kQwen2Names = {
      "qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez", "kormo", "f2llmv2", "solar-open"};
  static constexpr std::array<std::string_view, 3> kPoroNames = {"poro-chat", "bloom", "gpt3-finnish"};
  static constexpr std::array<std::string_view, 3> kGpt4oNames = {"gpt-4o", "llama4", "kanana2"};

  if (pre.empty() || pre == "default") {
    return regexes({"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"});
  }
  if (is_one_of(pre, kLlama3Names)) {
    PreTokenizerSpec s = regexes({kLlama3});
    s.ignore_merges = true;
    s.add_bos = true;
    return s;
  }
  if (pre == "dbrx" || pre == "smaug-bpe" || pre == "chatglm-bpe" || pre == "glm4") return regexes({kLlama3});
  if (is_one_of(pre, kGpt2Names)) return regexes({kGpt2});
  if (is_one_of(pre, kDigitThenGpt2Names)) return regexes({"\\p{N}", kGpt2});
  if (is_one_of(pre, kQwen2Names)) return regexes({kQwen2});
  if (pre == "qwen35") return regexes({kQwen35});
  if (pre == "falcon") return regexes({"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"});
  if (pre == "deepseek-llm") {
    return regexes({"[\\r\\n]", kDeepseekLlmLetters, kDeepseekLlmPunct, "\\s+$", kCjkRuns, "\\p{N}+"});
  }
  if (pre == "deepseek-coder") {
    return regexes({"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjkRuns, "\\p{N}"});
  }
  if (is_one_of(pre, kPoroNames)) {
    return regexes({" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"});
  }
  if (is_one_of(pre, kGpt4oNames)) return regexes({kGpt4o});
  if (pre == "tekken") {
    PreTokenizerSpec s = regexes({kTekken});
    s.ignore_merges = true;
    s.add_bos = true;
    return s;
  }
  return std::nullopt;
}

}  // namespace kvserve
