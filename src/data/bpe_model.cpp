// BPE merging (data/bpe_model.h): the word's symbols form a linked list; a min-heap holds the
// candidate merges by (rank, position); a popped candidate whose pair has changed since it was
// pushed is stale and skipped; each merge pushes the new pairs with both neighbours.
#include "data/bpe_model.h"

#include <algorithm>
#include <queue>

#include "core/error.h"

namespace zt {
namespace {

constexpr int32_t kMaxTokenId = (1 << 26) - 1;  // far above any vocabulary; bounds the id table

// Bytes in the UTF-8 character that starts with `lead`.
size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  return 4;
}

struct Symbol {
  int32_t id;
  int prev;  // index of the previous live symbol, -1 at the start
  int next;  // index of the next live symbol, -1 at the end
  bool alive = true;
};

struct Candidate {
  int32_t rank;
  int position;  // the left symbol
  int32_t new_id;
  // std::priority_queue pops the largest: "larger" here means lower priority.
  bool operator<(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : position > other.position;
  }
};

}  // namespace

std::pair<std::string, std::string> parse_merge_line(std::string_view line, const std::string& where) {
  const size_t space = line.find(' ');
  ZT_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
               line.find(' ', space + 1) == std::string_view::npos,
           where, ": a merge must be two tokens separated by one space, not '", line, "'");
  return {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

BpeModel::BpeModel(BpeModelSpec spec)
    : vocab_(std::move(spec.vocab)), ignore_merges_(spec.ignore_merges), fuse_unk_(spec.fuse_unk), source_(std::move(spec.source)) {
  for (const auto& [token, id] : vocab_) {
    ZT_CHECK(id >= 0 && id <= kMaxTokenId, source_, ": the token '", token, "' has the id ", id, ", outside [0, ", kMaxTokenId, "]");
    max_id_ = std::max(max_id_, id);
  }
  token_of_id_.assign(static_cast<size_t>(max_id_ + 1), nullptr);
  for (const auto& [token, id] : vocab_)
    if (token_of_id_[static_cast<size_t>(id)] == nullptr) token_of_id_[static_cast<size_t>(id)] = &token;

  merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    auto id_of = [&](const std::string& token) {
      const auto found = vocab_.find(token);
      ZT_CHECK(found != vocab_.end(), source_, ": merge ", rank, " ('", left, "' '", right, "') needs the token '", token,
               "', which is not in the vocabulary");
      return found->second;
    };
    const int32_t left_id = id_of(left), right_id = id_of(right), new_id = id_of(left + right);
    merges_.insert_or_assign(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), new_id});
  }

  if (spec.unk_token) {
    const auto found = vocab_.find(*spec.unk_token);
    ZT_CHECK(found != vocab_.end(), source_, ": the unk_token '", *spec.unk_token, "' is not in the vocabulary");
    unk_id_ = found->second;
  }
}

const BpeModel::Merge* BpeModel::merge_of(int32_t left, int32_t right) const {
  const auto found = merges_.find(pair_key(left, right));
  return found == merges_.end() ? nullptr : &found->second;
}

const std::string* BpeModel::token(int32_t id) const {
  return id >= 0 && id <= max_id_ ? token_of_id_[static_cast<size_t>(id)] : nullptr;
}

std::optional<int32_t> BpeModel::id(std::string_view token) const {
  const auto found = vocab_.find(token);
  if (found == vocab_.end()) return std::nullopt;
  return found->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto found = vocab_.find(word);
    if (found != vocab_.end()) {
      ids.push_back(found->second);
      return;
    }
  }

  std::vector<Symbol> symbols;  // [characters of the word]
  symbols.reserve(word.size());
  for (size_t at = 0; at < word.size();) {
    const size_t length = std::min(utf8_length(static_cast<unsigned char>(word[at])), word.size() - at);
    const std::string_view character = word.substr(at, length);
    at += length;
    const auto found = vocab_.find(character);
    int32_t id = 0;
    if (found != vocab_.end()) {
      id = found->second;
    } else {
      ZT_CHECK(unk_id_ >= 0, source_, ": the character '", character, "' is not in the vocabulary and the model has no "
               "unk_token (a byte-level vocabulary must hold all 256 byte characters)");
      if (fuse_unk_ && !symbols.empty() && symbols.back().id == unk_id_) continue;  // one unk for a run
      id = unk_id_;
    }
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, -1});
    if (index > 0) symbols[static_cast<size_t>(index - 1)].next = index;
  }

  std::priority_queue<Candidate> queue;
  auto push_candidate = [&](int left) {
    const int right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    if (const Merge* merge = merge_of(symbols[static_cast<size_t>(left)].id, symbols[static_cast<size_t>(right)].id))
      queue.push({merge->rank, left, merge->new_id});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push_candidate(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.position)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    const Merge* merge = merge_of(left.id, right.id);
    if (merge == nullptr || merge->new_id != top.new_id) continue;  // stale: the pair has changed
    left.id = merge->new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = top.position;
    if (left.prev >= 0) push_candidate(left.prev);
    push_candidate(top.position);
  }
  for (const Symbol& symbol : symbols)
    if (symbol.alive) ids.push_back(symbol.id);
}

}  // namespace zt
