#include "tokenizer/special_tokens.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace kvserve {

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) : vocab_(vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.has_attr(id, kAttrControl | kAttrUserDefined | kAttrUnknown)) candidates_.push_back(id);
  }
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [&](int32_t a, int32_t b) { return vocab.at(a).text.size() > vocab.at(b).text.size(); });
  for (size_t k = 0; k < candidates_.size(); ++k) {
    by_first_byte_[static_cast<uint8_t>(vocab.at(candidates_[k]).text[0])].push_back(k);
  }
}

std::vector<size_t> SpecialTokenSplitter::present_candidates(std::string_view text,
                                                             bool parse_special) const {
  // One pass over the text that only looks closer at bytes some candidate starts with;
  // typical text holds no special token, so the splitting below is then skipped entirely.
  std::vector<char> present(candidates_.size(), 0);
  for (size_t pos = 0; pos < text.size(); ++pos) {
    for (const size_t k : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const std::string& t = vocab_.at(candidates_[k]).text;
      if (!present[k] && t.size() <= text.size() - pos &&
          std::memcmp(text.data() + pos, t.data(), t.size()) == 0) {
        present[k] = 1;
      }
    }
  }
  std::vector<size_t> result;
  for (size_t k = 0; k < candidates_.size(); ++k) {
    if (!present[k]) continue;
    if (!parse_special && vocab_.has_attr(candidates_[k], kAttrControl | kAttrUnknown)) continue;
    result.push_back(k);
  }
  return result;
}

namespace {

// Whether [begin, end) overlaps one of the sorted, disjoint `ranges`.
bool overlaps(std::span<const TextRange> ranges, size_t begin, size_t end) {
  // The first range ending after `begin`; it overlaps when it starts before `end`.
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                                   [](size_t pos, const TextRange& r) { return pos < r.end; });
  return it != ranges.end() && it->begin < end;
}

}  // namespace

void SpecialTokenSplitter::split(std::string_view text, bool parse_special, std::vector<Fragment>& out,
                                 std::span<const TextRange> literal) const {
  out.clear();
  if (text.empty()) return;
  out.push_back({-1, 0, static_cast<uint32_t>(text.size())});

  std::vector<Fragment> next;
  for (const size_t k : present_candidates(text, parse_special)) {
    const int32_t id = candidates_[k];
    const TokenData& token = vocab_.at(id);
    const std::string_view needle = token.text;
    const bool control = vocab_.has_attr(id, kAttrControl | kAttrUnknown);
    next.clear();
    for (const Fragment& f : out) {
      if (!f.is_text()) {
        next.push_back(f);
        continue;
      }
      uint32_t begin = f.begin;
      const uint32_t end = f.end;
      while (begin < end) {
        size_t match = text.substr(0, end).find(needle, begin);
        while (match != std::string_view::npos && control && overlaps(literal, match, match + needle.size()))
          match = text.substr(0, end).find(needle, match + 1);
        if (match == std::string_view::npos) break;
        uint32_t left_end = static_cast<uint32_t>(match);
        if (token.attr & kAttrLstrip) {
          while (left_end > begin && std::isspace(static_cast<unsigned char>(text[left_end - 1]))) --left_end;
        }
        if (left_end > begin) next.push_back({-1, begin, left_end});
        next.push_back({id, 0, 0});
        begin = static_cast<uint32_t>(match + needle.size());
        if (token.attr & kAttrRstrip) {
          while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
        }
      }
      if (begin < end) next.push_back({-1, begin, end});
    }
    out.swap(next);
  }
}

}  // namespace kvserve
