#include "engine/engine_core.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/random.h"

namespace gpusched::engine {
namespace {

uint64_t Mix(uint64_t z) { return Mix64(z); }

// Words the detokenizer maps token ids onto, so output reads as text.
constexpr const char* kWords[] = {
    "the",   "model", "serves", "tokens", "on",    "a",       "GPU",
    "and",   "queue", "waits",  "for",    "batch", "cache",   "of",
    "keys",  "fair",  "share",  "tenant", "fast",  "latency", "replica",
    "node",  "runs",  "with",   "prefix", "block", "memory",  "slice",
    "route", "load",  "time",   "first"};
constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);

}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

absl::Status ValidateEngineOptions(const EngineOptions& o) {
  if (o.hidden < 1 || o.hidden > 4096 || o.layers < 0 || o.layers > 64 ||
      o.vocab < 2 || o.vocab > 1 << 20) {
    return absl::InvalidArgumentError(
        "engine: --hidden must be 1..4096, --layers 0..64, --vocab 2..1048576");
  }
  if (o.kv_blocks < 1 || o.block_tokens < 1 || o.max_num_seqs < 1 ||
      o.max_model_len < 2) {
    return absl::InvalidArgumentError(
        "engine: --kv-blocks, --block-tokens, --max-num-seqs must be >= 1 and "
        "--max-model-len >= 2");
  }
  return absl::OkStatus();
}

EngineCore::EngineCore(EngineOptions options)
    : options_(std::move(options)), free_blocks_(options_.kv_blocks) {
  CHECK(ValidateEngineOptions(options_).ok());
  Rng rng(options_.seed);
  const int h = options_.hidden;
  auto draw = [&] { return static_cast<float>(rng.UniformDouble() * 2 - 1); };
  embed_.resize(static_cast<size_t>(options_.vocab) * h);
  for (float& w : embed_) w = draw();
  weights_.resize(options_.layers);
  const float scale = 1.0f / std::sqrt(static_cast<float>(h));
  for (auto& layer : weights_) {
    layer.resize(static_cast<size_t>(h) * h);
    for (float& w : layer) w = draw() * scale * 1.5f;
  }
}

std::vector<int32_t> EngineCore::Tokenize(const std::string& text) const {
  // Whitespace-separated words, each hashed to a token id (a real tokenizer
  // is not the point; stable ids per word are).
  std::vector<int32_t> out;
  uint64_t h = 0;
  bool in_word = false;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      if (in_word) out.push_back(static_cast<int32_t>(Mix(h) % options_.vocab));
      h = 0;
      in_word = false;
    } else {
      h = h * 131 + static_cast<unsigned char>(c);
      in_word = true;
    }
  }
  if (in_word) out.push_back(static_cast<int32_t>(Mix(h) % options_.vocab));
  return out;
}

std::string EngineCore::Detokenize(int32_t token) const {
  return absl::StrCat(" ", kWords[token % kNumWords]);
}

int32_t EngineCore::Forward(int32_t token, std::vector<float>& state) const {
  const int h = options_.hidden;
  std::vector<float> x(embed_.begin() + static_cast<size_t>(token) * h,
                       embed_.begin() + static_cast<size_t>(token + 1) * h);
  // Carry history: the new input is mixed with the running state.
  for (int i = 0; i < h; ++i) x[i] = 0.5f * x[i] + 0.5f * state[i];
  std::vector<float> y(h);
  for (const auto& w : weights_) {
    for (int r = 0; r < h; ++r) {
      float acc = 0;
      const float* row = &w[static_cast<size_t>(r) * h];
      for (int c = 0; c < h; ++c) acc += row[c] * x[c];
      y[r] = std::tanh(acc);
    }
    x.swap(y);
  }
  state = x;
  // Logits against the embedding table; the largest wins (greedy).
  int32_t best = 0;
  float best_logit = -1e30f;
  for (int v = 0; v < options_.vocab; ++v) {
    const float* e = &embed_[static_cast<size_t>(v) * h];
    float logit = 0;
    for (int i = 0; i < h; ++i) logit += e[i] * x[i];
    if (logit > best_logit) {
      best_logit = logit;
      best = v;
    }
  }
  return best;
}

std::vector<float> EngineCore::Embed(const std::vector<int32_t>& tokens) const {
  std::vector<float> state(options_.hidden, 0.0f);
  std::vector<float> sum(options_.hidden, 0.0f);
  for (int32_t t : tokens) {
    Forward(t, state);
    for (int i = 0; i < options_.hidden; ++i) sum[i] += state[i];
  }
  double norm = 0;
  for (float v : sum) norm += static_cast<double>(v) * v;
  norm = std::sqrt(norm);
  if (norm > 0) {
    for (float& v : sum) v = static_cast<float>(v / norm);
  }
  return sum;
}

int64_t EngineCore::BlocksFor(int64_t tokens) const {
  return (tokens + options_.block_tokens - 1) / options_.block_tokens;
}

bool EngineCore::TakeBlocks(int64_t n) {
  // Evict cached prefix blocks (LRU) when free blocks run short.
  while (free_blocks_ < n && !lru_.empty()) {
    cache_.erase(lru_.front());
    lru_.pop_front();
    ++free_blocks_;
  }
  if (free_blocks_ < n) return false;
  free_blocks_ -= n;
  return true;
}

void EngineCore::CacheInsert(uint64_t hash) {
  auto it = cache_.find(hash);
  if (it != cache_.end()) {
    lru_.splice(lru_.end(), lru_, it->second);  // refresh
    ++free_blocks_;  // the sequence's copy is not needed
    return;
  }
  lru_.push_back(hash);
  cache_[hash] = std::prev(lru_.end());
}

absl::StatusOr<uint64_t> EngineCore::Add(SequenceRequest request) {
  const int64_t total =
      static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError("the prompt is empty");
  }
  if (request.max_tokens < 1) {
    return absl::InvalidArgumentError("max_tokens must be at least 1");
  }
  if (total > options_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", request.prompt.size(), " tokens) + max_tokens (",
        request.max_tokens, ") exceeds the model's context of ",
        options_.max_model_len, " tokens"));
  }
  if (BlocksFor(total) > options_.kv_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request needs ", BlocksFor(total),
                     " KV blocks; the engine has ", options_.kv_blocks));
  }
  auto seq = std::make_unique<Seq>();
  seq->id = next_id_++;
  seq->req = std::move(request);
  seq->state.assign(options_.hidden, 0.0f);
  // Chained hashes of the full prompt blocks.
  uint64_t h = 0;
  const auto& p = seq->req.prompt;
  for (size_t b = 0; (b + 1) * options_.block_tokens <= p.size(); ++b) {
    for (int i = 0; i < options_.block_tokens; ++i) {
      h = Mix(h ^ static_cast<uint64_t>(p[b * options_.block_tokens + i]));
    }
    seq->block_hashes.push_back(h);
  }
  const uint64_t id = seq->id;
  waiting_.push_back(std::move(seq));
  return id;
}

void EngineCore::Finish(std::unique_ptr<Seq> seq, FinishReason reason) {
  // Full prompt blocks stay cached; the rest is freed.
  int64_t kept = 0;
  if (seq->prefilled) {
    for (uint64_t hash : seq->block_hashes) {
      CacheInsert(hash);
      ++kept;
    }
  }
  free_blocks_ += seq->blocks - kept;
  if (seq->req.on_finish) seq->req.on_finish(reason, seq->cached_tokens);
}

void EngineCore::Cancel(uint64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id == id) {
      std::unique_ptr<Seq> s = std::move(*it);
      waiting_.erase(it);
      Finish(std::move(s), FinishReason::kCancelled);
      return;
    }
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->id == id) {
      std::unique_ptr<Seq> s = std::move(*it);
      running_.erase(it);
      Finish(std::move(s), FinishReason::kCancelled);
      return;
    }
  }
}

void EngineCore::CancelAll() {
  while (!waiting_.empty()) {
    std::unique_ptr<Seq> s = std::move(waiting_.front());
    waiting_.pop_front();
    Finish(std::move(s), FinishReason::kCancelled);
  }
  while (!running_.empty()) {
    std::unique_ptr<Seq> s = std::move(running_.back());
    running_.pop_back();
    Finish(std::move(s), FinishReason::kCancelled);
  }
}

StepResult EngineCore::Step() {
  StepResult result;
  // Admit FCFS while a whole sequence's blocks fit.
  while (!waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.max_num_seqs) {
    Seq& s = *waiting_.front();
    int64_t hits = 0;
    for (uint64_t hash : s.block_hashes) {
      if (!cache_.contains(hash)) break;
      ++hits;
    }
    // Cached blocks in use leave the LRU (pinned by this sequence).
    const int64_t need =
        BlocksFor(static_cast<int64_t>(s.req.prompt.size()) + s.req.max_tokens);
    for (int64_t b = 0; b < hits; ++b) {
      auto it = cache_.find(s.block_hashes[b]);
      lru_.erase(it->second);
      cache_.erase(it);
    }
    if (!TakeBlocks(need - hits)) {
      // Put the pinned blocks back and wait for room.
      for (int64_t b = 0; b < hits; ++b) CacheInsert(s.block_hashes[b]);
      break;
    }
    s.blocks = need;
    s.cached_tokens =
        std::min<int64_t>(hits * options_.block_tokens,
                          static_cast<int64_t>(s.req.prompt.size()) - 1);
    counters_.prefix_hits += s.cached_tokens;
    counters_.prefix_queries += static_cast<int64_t>(s.req.prompt.size());
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  // Prefill admitted prompts (all tokens run through the model for its
  // state; only uncached ones count as compute), then decode one token each.
  std::vector<size_t> done;
  for (size_t i = 0; i < running_.size(); ++i) {
    Seq& s = *running_[i];
    int32_t next;
    if (!s.prefilled) {
      for (size_t t = 0; t + 1 < s.req.prompt.size(); ++t) {
        Forward(s.req.prompt[t], s.state);
      }
      next = Forward(s.req.prompt.back(), s.state);
      s.prefilled = true;
      const int64_t computed =
          static_cast<int64_t>(s.req.prompt.size()) - s.cached_tokens;
      result.prefill_tokens += computed;
      counters_.prompt_tokens += static_cast<int64_t>(s.req.prompt.size());
    } else {
      next = Forward(s.output.back(), s.state);
      ++result.decoded;
    }
    s.output.push_back(next);
    ++counters_.generation_tokens;
    if (s.req.on_token) s.req.on_token(next);
    if (static_cast<int>(s.output.size()) >= s.req.max_tokens)
      done.push_back(i);
  }
  for (auto it = done.rbegin(); it != done.rend(); ++it) {
    std::unique_ptr<Seq> s = std::move(running_[*it]);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(*it));
    Finish(std::move(s), FinishReason::kLength);
  }
  if (options_.profile) {
    int64_t kv = 0;
    for (const auto& s : running_) {
      kv += static_cast<int64_t>(s->req.prompt.size() + s->output.size());
    }
    result.seconds = options_.profile->DecodeSeconds(result.decoded, kv) +
                     options_.profile->PrefillSeconds(result.prefill_tokens);
  }
  return result;
}

EngineStats EngineCore::stats() const {
  EngineStats s = counters_;
  s.running = static_cast<int>(running_.size());
  s.waiting = static_cast<int>(waiting_.size());
  const int64_t used =
      options_.kv_blocks - free_blocks_ - static_cast<int64_t>(lru_.size());
  s.kv_usage = static_cast<double>(used) / options_.kv_blocks;
  return s;
}

}  // namespace gpusched::engine
