#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace kvserve {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

// A piece of the text being merged; pieces form a doubly linked list by index.
struct Symbol {
  uint32_t begin;  // byte offset in the text
  uint32_t size;   // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Bigram {
  int32_t left;  // symbol indices
  int32_t right;
  float score;
  uint32_t size;  // byte size of the pair when queued; a changed size marks a stale entry
};

// Highest score first; among equal scores the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

struct SpmEncoder::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

SpmEncoder::SpmEncoder(const Vocab& vocab, int32_t unk_id, bool allow_word_split)
    : vocab_(vocab), split_before_spaces_(allow_word_split && vocab_splits_before_spaces(vocab)) {
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = vocab.find(hex);
    const char raw = static_cast<char>(b);
    if (id < 0) id = vocab.find(std::string_view(&raw, 1));
    byte_tokens_[static_cast<size_t>(b)] = id >= 0 ? id : unk_id;
  }
}

bool SpmEncoder::vocab_splits_before_spaces(const Vocab& vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string_view text = vocab.at(id).text;
    for (size_t pos = text.find(kSpace, 1); pos != std::string_view::npos; pos = text.find(kSpace, pos + 1)) {
      if (pos < kSpace.size() || text.substr(pos - kSpace.size(), kSpace.size()) != kSpace) return false;
    }
  }
  return true;
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  Scratch scratch;
  if (!split_before_spaces_) {
    encode_segment(text, scratch, out);
    return;
  }
  // Cut before every space that follows a non-space character (at character starts, as
  // the merging sees them): no token can span such a cut, so each segment merges alone.
  size_t segment_begin = 0;
  bool prev_is_space = false;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min(utf8::lead_length(static_cast<uint8_t>(text[pos])), text.size() - pos);
    const bool is_space = text.substr(pos, n) == kSpace;
    if (is_space && !prev_is_space && pos > segment_begin) {
      encode_segment(text.substr(segment_begin, pos - segment_begin), scratch, out);
      segment_begin = pos;
    }
    prev_is_space = is_space;
    pos += n;
  }
  encode_segment(text.substr(segment_begin), scratch, out);
}

void SpmEncoder::encode_segment(std::string_view text, Scratch& scratch, std::vector<int32_t>& out) const {
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min(utf8::lead_length(static_cast<uint8_t>(text[pos])), text.size() - pos);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(n), index - 1,
                       pos + n == text.size() ? -1 : index + 1});
    pos += n;
  }

  // A max-heap on BigramOrder in a reused vector (std::priority_queue cannot reuse storage).
  std::vector<Bigram>& heap = scratch.heap;
  heap.clear();
  auto try_add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const uint32_t size = l.size + r.size;
    const int32_t id = vocab_.find(text.substr(l.begin, size));
    if (id < 0) return;
    heap.push_back({left, right, vocab_.at(id).score, size});
    std::push_heap(heap.begin(), heap.end(), BigramOrder{});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramOrder{});
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = symbols[static_cast<size_t>(b.left)];
    Symbol& r = symbols[static_cast<size_t>(b.right)];
    // Skip entries made stale by an earlier merge of either side.
    if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = b.left;
    try_add_bigram(l.prev, b.left);
    try_add_bigram(b.left, l.next);
  }

  // Every merged piece is a token by construction; only unmerged single characters can be
  // missing from the vocabulary, and those fall back to their bytes.
  for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(s.begin, s.size);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (const char c : piece) {
      const int32_t byte_id = byte_tokens_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

}  // namespace kvserve
