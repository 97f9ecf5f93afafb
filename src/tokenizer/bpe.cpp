#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/byte_unicode.h"

namespace kvserve {
namespace {

struct Symbol {
  int32_t id;  // current token; -1 for a byte without a token (never merges)
  int32_t prev;
  int32_t next;
  bool alive;  // false once merged into its left neighbour
};

struct Candidate {
  int32_t rank;
  int32_t left;  // symbol indices
  int32_t right;
  int32_t left_id;  // ids when queued; a change marks a stale entry
  int32_t right_id;
  int32_t result;
};

// std heap functions build a max-heap; "greater" puts the lowest rank, then the leftmost
// pair, on top.
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

BpeEncoder::BpeEncoder(const Vocab& vocab, const std::vector<std::string>& merges, bool ignore_merges)
    : vocab_(vocab), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    byte_tokens_[static_cast<size_t>(b)] = vocab.find(byte_to_unicode_utf8(static_cast<uint8_t>(b)));
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& rule = merges[rank];
    // The separator is the first space after the first character: a side is never empty.
    const size_t space = rule.find(' ', 1);
    if (space == std::string::npos) {
      ++num_unusable_merges_;
      continue;
    }
    const std::string_view left(rule.data(), space);
    const std::string_view right = std::string_view(rule).substr(space + 1);
    const int32_t left_id = vocab.find(left);
    const int32_t right_id = vocab.find(right);
    const int32_t result = vocab.find(std::string(left) + std::string(right));
    if (left_id < 0 || right_id < 0 || result < 0) {
      ++num_unusable_merges_;
      continue;
    }
    // A repeated rule keeps its first (lowest) rank.
    merges_.try_emplace(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), result});
  }
}

void BpeEncoder::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges_) {
    std::string mapped;
    mapped.reserve(piece.size() * 2);
    for (const char c : piece) mapped += byte_to_unicode_utf8(static_cast<uint8_t>(c));
    const int32_t id = vocab_.find(mapped);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }

  // Pieces are short (a word), so per-call vectors are cheap next to the hash lookups.
  std::vector<Symbol> symbols(piece.size());
  const auto n = static_cast<int32_t>(piece.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[static_cast<size_t>(i)] = {byte_tokens_[static_cast<uint8_t>(piece[static_cast<size_t>(i)])],
                                       i - 1, i + 1 < n ? i + 1 : -1, true};
  }

  std::vector<Candidate> heap;
  heap.reserve(piece.size());
  auto add_candidate = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t lid = symbols[static_cast<size_t>(left)].id;
    const int32_t rid = symbols[static_cast<size_t>(right)].id;
    if (lid < 0 || rid < 0) return;
    const auto it = merges_.find(pair_key(lid, rid));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, left, right, lid, rid, it->second.result});
    std::push_heap(heap.begin(), heap.end(), CandidateAfter{});
  };
  for (int32_t i = 1; i < n; ++i) add_candidate(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateAfter{});
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = symbols[static_cast<size_t>(c.left)];
    Symbol& r = symbols[static_cast<size_t>(c.right)];
    // Both alive with unchanged ids means they are still adjacent and still this pair:
    // symbols only ever absorb their right neighbour.
    if (!l.alive || !r.alive || l.id != c.left_id || r.id != c.right_id) continue;
    l.id = c.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = c.left;
    add_candidate(l.prev, c.left);
    add_candidate(c.left, l.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const int32_t id = symbols[static_cast<size_t>(i)].id;
    if (id >= 0) out.push_back(id);  // a byte with no token is dropped, as the reference does
  }
}

}  // namespace kvserve
