#include "engine/json_constraint.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace kvserve {

namespace {

// Adds the children of `node`, whose prefix is `depth` bytes long and which covers the tokens
// t.tokens[lo, hi) (sorted by piece, so those that end here come first), then their subtrees.
void build_node(TokenTrie& t, const std::vector<std::string>& pieces, uint32_t node, size_t depth, size_t lo,
                size_t hi) {
  auto piece = [&](size_t i) -> const std::string& { return pieces[size_t(t.tokens[i])]; };
  size_t i = lo;
  while (i < hi && piece(i).size() == depth) ++i;
  t.nodes[node].token_begin = uint32_t(lo);
  t.nodes[node].token_end = uint32_t(i);
  // One child per distinct next byte, all added before any grandchild so that they are adjacent.
  std::vector<std::pair<size_t, size_t>> ranges;
  while (i < hi) {
    const char b = piece(i)[depth];
    size_t j = i;
    while (j < hi && piece(j)[depth] == b) ++j;
    ranges.emplace_back(i, j);
    i = j;
  }
  const uint32_t first = uint32_t(t.nodes.size());
  t.nodes[node].child_begin = first;
  t.nodes[node].child_end = first + uint32_t(ranges.size());
  for (const auto& range : ranges) {
    TokenTrie::Node child;
    child.byte = uint8_t(piece(range.first)[depth]);
    t.nodes.push_back(child);
  }
  for (size_t k = 0; k < ranges.size(); ++k)
    build_node(t, pieces, first + uint32_t(k), depth + 1, ranges[k].first, ranges[k].second);
}

// Marks allowed[id] for every token of the trie whose bytes `start` accepts; true if any.
bool walk(const TokenTrie& t, const JsonPrefix& start, std::vector<uint8_t>* allowed) {
  // Depth-first: a node is entered with the state after its prefix; a child whose byte the state
  // refuses is dropped with all the tokens below it.
  struct Frame {
    uint32_t node;
    JsonPrefix state;
  };
  thread_local std::vector<Frame> stack;
  stack.clear();
  stack.push_back({0, start});
  bool any = false;
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    const TokenTrie::Node& n = t.nodes[f.node];
    for (uint32_t c = n.child_begin; c < n.child_end; ++c) {
      const TokenTrie::Node& child = t.nodes[c];
      JsonPrefix s = f.state;
      if (!s.feed_byte(child.byte)) continue;
      for (uint32_t k = child.token_begin; k < child.token_end; ++k) (*allowed)[size_t(t.tokens[k])] = 1;
      any = any || child.token_end > child.token_begin;
      if (child.child_end > child.child_begin) stack.push_back({c, s});
    }
  }
  return any;
}

}  // namespace

TokenTrie TokenTrie::build(const std::vector<std::string>& pieces, std::vector<int32_t> ids) {
  TokenTrie t;
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return std::make_pair(std::string_view(pieces[size_t(a)]), a) <
           std::make_pair(std::string_view(pieces[size_t(b)]), b);
  });
  t.tokens = std::move(ids);
  t.nodes.emplace_back();  // the root
  build_node(t, pieces, 0, 0, 0, t.tokens.size());
  return t;
}

ConstraintVocab ConstraintVocab::from_pieces(std::vector<std::string> pieces, std::vector<uint8_t> excluded) {
  ConstraintVocab v;
  v.pieces = std::move(pieces);
  v.excluded = std::move(excluded);
  v.string_run.assign(v.pieces.size(), 0);
  JsonPrefix in_string;
  in_string.feed("{\"");
  std::vector<int32_t> all, rest;
  for (size_t id = 0; id < v.pieces.size(); ++id) {
    if (v.excluded[id] != 0) continue;
    all.push_back(int32_t(id));
    // A run never leaves the string, not even for a moment: a token that closes it and opens
    // another (`":"`) may follow a key but not a value.
    JsonPrefix s = in_string;
    bool run = true;
    for (char c : v.pieces[id]) run = run && s.feed_byte(uint8_t(c)) && s.within_string();
    if (run && s.in_string()) {
      v.string_run[id] = 1;
      v.any_string_run = true;
    } else {
      rest.push_back(int32_t(id));
    }
  }
  v.trie = TokenTrie::build(v.pieces, std::move(all));
  v.string_rest = TokenTrie::build(v.pieces, std::move(rest));
  return v;
}

ConstraintVocab ConstraintVocab::from(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.n_vocab();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<uint8_t> excluded(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    pieces[size_t(id)] = tokenizer.token_to_piece(id);
    excluded[size_t(id)] = tokenizer.is_control(id) || tokenizer.is_eog(id) || pieces[size_t(id)].empty();
  }
  return from_pieces(std::move(pieces), std::move(excluded));
}

bool JsonConstraint::allowed(std::vector<uint8_t>* allowed) const {
  const ConstraintVocab& v = *vocab_;
  if (!state_.in_string()) {
    allowed->assign(v.pieces.size(), 0);
    return walk(v.trie, state_, allowed);
  }
  // Inside a string (no escape or character half read): the string runs are allowed whatever
  // came before; the rest is walked.
  *allowed = v.string_run;
  return walk(v.string_rest, state_, allowed) || v.any_string_run;
}

void JsonConstraint::accept(int32_t token) {
  const bool ok = token >= 0 && size_t(token) < vocab_->pieces.size() &&
                  vocab_->excluded[size_t(token)] == 0 && state_.feed(vocab_->pieces[size_t(token)]);
  KVS_ASSERT(ok, "a token the JSON mask allowed continues the object");
}

}  // namespace kvserve
