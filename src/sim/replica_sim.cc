#include "sim/replica_sim.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace gpusched::sim {

namespace {

using Phase = internal::LlmSeqState::Phase;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Iteration or batch duration, at least 1 us so virtual time always moves.
Micros Duration(double seconds) {
  return std::max<Micros>(1, FromSeconds(seconds));
}

void ResetResults(SimRequest* r, Micros now) {
  r->dispatched = now;
  r->started = kNever;
  r->first_token = kNever;
  r->finished = kNever;
  r->cached_prompt_tokens = 0;
  r->preemptions = 0;
  r->rejected_too_long = false;
}

}  // namespace

// ---------------------------------------------------------------------------
// LlmReplicaSim

absl::Status ValidateLlmReplicaConfig(const LlmReplicaConfig& config) {
  if (config.block_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_tokens must be >= 1, got ", config.block_tokens));
  }
  const int64_t capacity = config.kv_capacity_tokens > 0
                               ? config.kv_capacity_tokens
                               : config.latency.kv_capacity_tokens;
  if (capacity < config.block_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_capacity_tokens must hold at least one block of block_tokens=",
        config.block_tokens, ", got ", capacity));
  }
  if (config.max_num_seqs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_num_seqs must be >= 1, got ", config.max_num_seqs));
  }
  if (config.max_num_batched_tokens < config.max_num_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_num_batched_tokens must be >= max_num_seqs (", config.max_num_seqs,
        "), got ", config.max_num_batched_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LlmReplicaSim>> LlmReplicaSim::Create(
    const LlmReplicaConfig& config) {
  if (absl::Status s = ValidateLlmReplicaConfig(config); !s.ok()) return s;
  return std::unique_ptr<LlmReplicaSim>(new LlmReplicaSim(config));
}

LlmReplicaSim::LlmReplicaSim(const LlmReplicaConfig& config)
    : config_(config), block_tokens_(config.block_tokens) {
  if (config_.kv_capacity_tokens <= 0) {
    config_.kv_capacity_tokens = config_.latency.kv_capacity_tokens;
  }
  capacity_blocks_ = config_.kv_capacity_tokens / block_tokens_;
  free_blocks_ = capacity_blocks_;
}

void LlmReplicaSim::Enqueue(SimRequest* r, Micros now) {
  internal::LlmSeqState& s = r->llm;
  CHECK(s.phase == Phase::kNone || s.phase == Phase::kDone)
      << "request " << r->req.id << " enqueued while in a replica";
  ResetResults(r, now);
  s.shared.clear();
  s = internal::LlmSeqState{.epoch = s.epoch + 1,
                            .shared = std::move(s.shared)};
  s.prompt = std::max<int64_t>(1, r->req.input_tokens);
  s.target = std::max<int32_t>(1, r->output_tokens);
  const int64_t prompt_blocks = CeilDiv(s.prompt, block_tokens_);
  if (config_.prefix_caching) {
    s.hashed_blocks = static_cast<int32_t>(std::min<int64_t>(
        prompt_blocks, static_cast<int64_t>(r->req.prefix_blocks.size())));
  }
  if (CeilDiv(s.prompt + s.target, block_tokens_) > capacity_blocks_) {
    r->rejected_too_long = true;
    s.phase = Phase::kDone;
    reject_due_ = std::min(reject_due_, now);
    rejects_.push_back(r);
    ++counters_.rejected_too_long;
    return;
  }
  s.phase = Phase::kWaiting;
  s.prefill_len = s.prompt;
  waiting_.push_back(r);
  if (!in_flight_ && !in_advance_) StartIteration(now);
}

Micros LlmReplicaSim::NextEventTime() const {
  Micros t = in_flight_ ? iter_end_ : kNever;
  if (!rejects_.empty()) t = std::min(t, reject_due_);
  return t;
}

void LlmReplicaSim::Advance(Micros now, ReplicaSimListener& listener) {
  CHECK(now == NextEventTime()) << "LlmReplicaSim::Advance at " << now
                                << ", next event at " << NextEventTime();
  in_advance_ = true;
  events_.clear();
  for (SimRequest* r : rejects_) {
    r->finished = now;
    events_.emplace_back(true, r);
  }
  rejects_.clear();
  reject_due_ = kNever;
  if (in_flight_ && now == iter_end_) CompleteIteration(now);
  // The listener may enqueue (even onto this replica) and free requests; it
  // sees a consistent replica and nothing here touches a request afterwards.
  for (const auto& [finished, r] : events_) {
    if (finished) {
      listener.OnFinished(r, now);
    } else {
      listener.OnFirstToken(r, now);
    }
  }
  events_.clear();
  in_advance_ = false;
  if (!in_flight_ && (running_ > 0 || !waiting_.empty())) StartIteration(now);
}

void LlmReplicaSim::StartIteration(Micros start) {
  const int64_t k = ++iter_;
  // 1. KV growth of decoding sequences (oldest admitted first).
  bool preempted = false;
  while (!block_heap_.empty() && block_heap_.front().iter <= k) {
    const HeapEntry e = HeapPop(block_heap_);
    SimRequest* r = e.request;
    if (e.epoch != r->llm.epoch || r->llm.phase != Phase::kDecoding) continue;
    CHECK(e.iter == k) << "missed a block boundary";
    bool self_preempted = false;
    while (!ReserveFree(1)) {
      SimRequest* victim = running_tail_;
      CHECK(victim != nullptr);
      Preempt(victim);
      preempted = true;
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) continue;
    --free_blocks_;
    ++r->llm.blocks;
    ++r->llm.private_blocks;
    const int64_t next = k + block_tokens_;
    if (next <= r->llm.finish_iter) {
      HeapPush(block_heap_, {next, r->llm.admit_seq, r, r->llm.epoch});
    }
  }

  // 2. Decodes come first in the budget.
  iter_decodes_ = decoding_;
  int64_t budget = config_.max_num_batched_tokens - decoding_;
  CHECK(budget >= 0);

  // 3. Prefill chunks for sequences admitted earlier.
  int64_t prefill_tokens = 0;
  scheduled_.clear();
  for (SimRequest* r : prefilling_) {
    if (budget == 0) break;
    internal::LlmSeqState& s = r->llm;
    s.chunk = std::min(s.prefill_len - s.prefilled, budget);
    budget -= s.chunk;
    prefill_tokens += s.chunk;
    scheduled_.push_back(r);
  }

  // 4. Admission, FCFS; the head blocks the rest. An iteration that had to
  // preempt admits nothing (unless nothing runs at all).
  if (!preempted || running_ == 0) {
    while (budget > 0 && !waiting_.empty() && running_ < config_.max_num_seqs) {
      SimRequest* r = waiting_.front();
      if (!Admit(r, start)) break;
      waiting_.pop_front();
      internal::LlmSeqState& s = r->llm;
      s.chunk = std::min(s.prefill_len - s.prefilled, budget);
      budget -= s.chunk;
      prefill_tokens += s.chunk;
      scheduled_.push_back(r);
    }
  }

  CHECK(iter_decodes_ > 0 || prefill_tokens > 0)
      << "iteration with no work: running=" << running_
      << " waiting=" << waiting_.size();
  const Micros d =
      Duration(config_.latency.DecodeSeconds(iter_decodes_, decode_ctx_) +
               config_.latency.PrefillSeconds(prefill_tokens));
  in_flight_ = true;
  iter_end_ = start + d;
  ++counters_.iterations;
  counters_.busy_time += d;
}

void LlmReplicaSim::CompleteIteration(Micros end) {
  const int64_t k = iter_;
  in_flight_ = false;
  counters_.generated_tokens += iter_decodes_;
  // Sequences that emitted their last token in a decode.
  while (!finish_heap_.empty() && finish_heap_.front().iter <= k) {
    const HeapEntry e = HeapPop(finish_heap_);
    SimRequest* r = e.request;
    if (e.epoch != r->llm.epoch || r->llm.phase != Phase::kDecoding) continue;
    CHECK(e.iter == k) << "missed a finish";
    --decoding_;
    decode_ctx_ -= DecodeContext(r);
    r->llm.generated = r->llm.target;
    Finish(r, end);
  }
  // Survivors each hold one more token in iteration k + 1.
  decode_ctx_ += decoding_;
  // Prefill chunks.
  bool prefill_done = false;
  for (SimRequest* r : scheduled_) {
    internal::LlmSeqState& s = r->llm;
    s.prefilled += s.chunk;
    prefill_ctx_ += s.chunk;
    counters_.prompt_tokens += s.chunk;
    s.chunk = 0;
    if (config_.prefix_caching) RegisterCompletedBlocks(r);
    if (s.prefilled < s.prefill_len) continue;
    // The prefill sampled a token.
    prefill_done = true;
    prefill_ctx_ -= s.prefilled;
    ++s.generated;
    ++counters_.generated_tokens;
    if (r->first_token == kNever) {
      r->first_token = end;
      events_.emplace_back(false, r);
    }
    if (s.generated >= s.target) {
      s.phase = Phase::kDone;  // leaves prefilling_ below
      Finish(r, end);
    } else {
      BeginDecode(r);
    }
  }
  scheduled_.clear();
  if (prefill_done) {
    prefilling_.erase(std::remove_if(prefilling_.begin(), prefilling_.end(),
                                     [](const SimRequest* r) {
                                       return r->llm.phase !=
                                              Phase::kPrefilling;
                                     }),
                      prefilling_.end());
  }
}

void LlmReplicaSim::BeginDecode(SimRequest* r) {
  internal::LlmSeqState& s = r->llm;
  s.phase = Phase::kDecoding;
  // Decoding starts in the next iteration with the sampled token written:
  // context = prefill_len + 1 = prompt + generated.
  s.decode_start_iter = iter_ + 1;
  s.decode_start_ctx = s.prefill_len + 1;
  s.finish_iter = iter_ + (s.target - s.generated);
  ++decoding_;
  decode_ctx_ += s.decode_start_ctx;
  HeapPush(finish_heap_, {s.finish_iter, s.admit_seq, r, s.epoch});
  // The first iteration whose context exceeds the blocks held.
  const int64_t next_block =
      s.decode_start_iter + (s.blocks * block_tokens_ + 1 - s.decode_start_ctx);
  if (next_block <= s.finish_iter) {
    HeapPush(block_heap_, {next_block, s.admit_seq, r, s.epoch});
  }
}

void LlmReplicaSim::Finish(SimRequest* r, Micros t) {
  RunningUnlink(r);
  ReleaseBlocks(r);
  r->llm.phase = Phase::kDone;
  r->finished = t;
  ++counters_.finished;
  events_.emplace_back(true, r);
}

bool LlmReplicaSim::Admit(SimRequest* r, Micros now) {
  internal::LlmSeqState& s = r->llm;
  const int64_t blocks = CeilDiv(s.prefill_len, block_tokens_);
  // Leading prefix-cache hits.
  hit_scratch_.clear();
  int64_t evictable_hits = 0;
  const int64_t hashable = std::min<int64_t>(s.hashed_blocks, blocks);
  for (int64_t i = 0; i < hashable; ++i) {
    auto it = cache_index_.find(r->req.prefix_blocks[i]);
    if (it == cache_index_.end()) break;
    hit_scratch_.push_back(it->second);
    if (nodes_[it->second].refs == 0) ++evictable_hits;
  }
  const int64_t hits = static_cast<int64_t>(hit_scratch_.size());
  const int64_t fresh = blocks - hits;
  if (fresh > free_blocks_ + evictable_blocks_ - evictable_hits) return false;
  for (int32_t node : hit_scratch_) {
    if (nodes_[node].refs++ == 0) {
      LruUnlink(node);
      --evictable_blocks_;
    }
  }
  CHECK(ReserveFree(fresh));
  free_blocks_ -= fresh;
  s.shared.assign(hit_scratch_.begin(), hit_scratch_.end());
  s.next_register = static_cast<int32_t>(hits);
  s.private_blocks = fresh;
  s.blocks = blocks;
  // The last token is always computed: its logits sample the next token.
  const int64_t cached =
      std::min({hits * block_tokens_, s.prompt, s.prefill_len - 1});
  s.prefilled = cached;
  prefill_ctx_ += cached;
  counters_.cached_tokens += cached;
  if (r->first_token == kNever) r->cached_prompt_tokens = cached;
  if (r->started == kNever) r->started = now;
  s.phase = Phase::kPrefilling;
  s.admit_seq = ++admit_seq_;
  RunningAppend(r);
  prefilling_.push_back(r);
  return true;
}

void LlmReplicaSim::Preempt(SimRequest* r) {
  internal::LlmSeqState& s = r->llm;
  if (s.phase == Phase::kDecoding) {
    const int64_t ctx = DecodeContext(r);
    --decoding_;
    decode_ctx_ -= ctx;
    s.generated = static_cast<int32_t>(ctx - s.prompt);
  } else {
    CHECK(s.phase == Phase::kPrefilling);
    prefill_ctx_ -= s.prefilled;
    prefilling_.erase(std::find(prefilling_.begin(), prefilling_.end(), r));
  }
  RunningUnlink(r);
  ReleaseBlocks(r);
  ++s.epoch;
  s.phase = Phase::kWaiting;
  s.prefill_len = s.prompt + s.generated;
  s.prefilled = 0;
  s.chunk = 0;
  ++r->preemptions;
  ++counters_.preemptions;
  waiting_.push_front(r);
}

bool LlmReplicaSim::ReserveFree(int64_t n) {
  if (n > free_blocks_ + evictable_blocks_) return false;
  while (free_blocks_ < n) {
    const int32_t node = lru_head_;
    LruUnlink(node);
    cache_index_.erase(nodes_[node].hash);
    free_nodes_.push_back(node);
    --evictable_blocks_;
    ++free_blocks_;
    ++counters_.evicted_blocks;
  }
  return true;
}

void LlmReplicaSim::ReleaseBlocks(SimRequest* r) {
  internal::LlmSeqState& s = r->llm;
  // Tail blocks become least recently used first, so a shared head outlives
  // the tails that hang off it.
  for (auto it = s.shared.rbegin(); it != s.shared.rend(); ++it) {
    if (--nodes_[*it].refs == 0) {
      LruPushBack(*it);
      ++evictable_blocks_;
    }
  }
  s.shared.clear();
  free_blocks_ += s.private_blocks;
  s.private_blocks = 0;
  s.blocks = 0;
}

void LlmReplicaSim::RegisterCompletedBlocks(SimRequest* r) {
  internal::LlmSeqState& s = r->llm;
  // Block i is complete when the prefill has covered it (the prompt's last,
  // partial block when the whole prompt is in).
  const int64_t covered = std::min(s.prefilled, s.prompt);
  while (s.next_register < s.hashed_blocks) {
    const int64_t i = s.next_register;
    if (covered < std::min((i + 1) * block_tokens_, s.prompt)) break;
    ++s.next_register;
    const uint64_t hash = r->req.prefix_blocks[i];
    auto [it, inserted] = cache_index_.try_emplace(hash, -1);
    if (!inserted) continue;  // computed elsewhere too: ours stays private
    int32_t node;
    if (!free_nodes_.empty()) {
      node = free_nodes_.back();
      free_nodes_.pop_back();
    } else {
      node = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[node] = CacheNode{.hash = hash, .refs = 1};
    it->second = node;
    // One of the request's private blocks becomes this shared block.
    --s.private_blocks;
    s.shared.push_back(node);
  }
}

void LlmReplicaSim::LruPushBack(int32_t node) {
  nodes_[node].prev = lru_tail_;
  nodes_[node].next = -1;
  if (lru_tail_ >= 0) {
    nodes_[lru_tail_].next = node;
  } else {
    lru_head_ = node;
  }
  lru_tail_ = node;
}

void LlmReplicaSim::LruUnlink(int32_t node) {
  CacheNode& n = nodes_[node];
  if (n.prev >= 0) {
    nodes_[n.prev].next = n.next;
  } else {
    lru_head_ = n.next;
  }
  if (n.next >= 0) {
    nodes_[n.next].prev = n.prev;
  } else {
    lru_tail_ = n.prev;
  }
  n.prev = n.next = -1;
}

void LlmReplicaSim::RunningAppend(SimRequest* r) {
  r->llm.prev = running_tail_;
  r->llm.next = nullptr;
  if (running_tail_ != nullptr) {
    running_tail_->llm.next = r;
  } else {
    running_head_ = r;
  }
  running_tail_ = r;
  ++running_;
}

void LlmReplicaSim::RunningUnlink(SimRequest* r) {
  internal::LlmSeqState& s = r->llm;
  if (s.prev != nullptr) {
    s.prev->llm.next = s.next;
  } else {
    running_head_ = s.next;
  }
  if (s.next != nullptr) {
    s.next->llm.prev = s.prev;
  } else {
    running_tail_ = s.prev;
  }
  s.prev = s.next = nullptr;
  --running_;
}

void LlmReplicaSim::HeapPush(std::vector<HeapEntry>& heap, const HeapEntry& e) {
  heap.push_back(e);
  std::push_heap(heap.begin(), heap.end(), std::greater<HeapEntry>());
}

LlmReplicaSim::HeapEntry LlmReplicaSim::HeapPop(std::vector<HeapEntry>& heap) {
  std::pop_heap(heap.begin(), heap.end(), std::greater<HeapEntry>());
  const HeapEntry e = heap.back();
  heap.pop_back();
  return e;
}

serving::ReplicaLoad LlmReplicaSim::Load() const {
  serving::ReplicaLoad load;
  load.waiting = static_cast<int>(waiting_.size());
  load.running = running_;
  load.kv_tokens = decode_ctx_ + prefill_ctx_;
  load.kv_used_fraction = static_cast<double>(pinned_blocks()) /
                          static_cast<double>(capacity_blocks_);
  return load;
}

// ---------------------------------------------------------------------------
// TensorReplicaSim

absl::Status ValidateTensorReplicaConfig(const TensorReplicaConfig& config) {
  if (absl::Status s = serving::ValidateBatcherConfig(config.batcher);
      !s.ok()) {
    return s;
  }
  if (config.instances < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("instances must be >= 1, got ", config.instances));
  }
  if (config.base_s < 0 || config.per_item_s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("base_s and per_item_s must be >= 0, got ", config.base_s,
                     " and ", config.per_item_s));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TensorReplicaSim>> TensorReplicaSim::Create(
    const TensorReplicaConfig& config) {
  if (absl::Status s = ValidateTensorReplicaConfig(config); !s.ok()) return s;
  absl::StatusOr<serving::Batcher> batcher =
      serving::Batcher::Create(config.batcher);
  if (!batcher.ok()) return batcher.status();
  return std::unique_ptr<TensorReplicaSim>(
      new TensorReplicaSim(config, *std::move(batcher)));
}

TensorReplicaSim::TensorReplicaSim(const TensorReplicaConfig& config,
                                   serving::Batcher batcher)
    : config_(config),
      batcher_(std::move(batcher)),
      instances_(config.instances) {}

bool TensorReplicaSim::Enqueue(SimRequest* r, Micros now) {
  if (!batcher_.Add(r->req.id, now)) return false;
  ResetResults(r, now);
  const bool inserted = queued_.emplace(r->req.id, r).second;
  CHECK(inserted) << "request " << r->req.id << " queued twice";
  Dispatch(now);
  return true;
}

bool TensorReplicaSim::Remove(SimRequest* r) {
  if (!batcher_.Remove(r->req.id)) return false;
  queued_.erase(r->req.id);
  return true;
}

Micros TensorReplicaSim::NextEventTime() const {
  Micros t = kNever;
  bool any_free = false;
  for (const Instance& inst : instances_) {
    if (inst.busy_until == kNever) {
      any_free = true;
    } else {
      t = std::min(t, inst.busy_until);
    }
  }
  if (any_free) t = std::min(t, batcher_.NextDeadline());
  return t;
}

void TensorReplicaSim::Advance(Micros now, ReplicaSimListener& listener) {
  CHECK(now == NextEventTime()) << "TensorReplicaSim::Advance at " << now
                                << ", next event at " << NextEventTime();
  in_advance_ = true;
  done_.clear();
  for (Instance& inst : instances_) {
    if (inst.busy_until != now) continue;
    for (SimRequest* r : inst.batch) {
      r->first_token = now;
      r->finished = now;
      done_.push_back(r);
    }
    running_ -= static_cast<int>(inst.batch.size());
    inst.batch.clear();
    inst.busy_until = kNever;
  }
  for (SimRequest* r : done_) {
    listener.OnFirstToken(r, now);
    listener.OnFinished(r, now);
  }
  done_.clear();
  in_advance_ = false;
  Dispatch(now);
}

void TensorReplicaSim::Dispatch(Micros now) {
  if (in_advance_) return;  // Advance dispatches once its events are out
  for (Instance& inst : instances_) {
    if (inst.busy_until != kNever) continue;
    if (batcher_.NextDeadline() > now) return;
    const std::vector<serving::RequestId> ids = batcher_.TakeBatch(now);
    CHECK(!ids.empty()) << "batcher deadline passed but no batch";
    for (serving::RequestId id : ids) {
      auto it = queued_.find(id);
      CHECK(it != queued_.end());
      it->second->started = now;
      inst.batch.push_back(it->second);
      queued_.erase(it);
    }
    const int n = static_cast<int>(ids.size());
    const Micros d = Duration(config_.base_s + config_.per_item_s * n);
    inst.busy_until = now + d;
    running_ += n;
    ++counters_.batches;
    counters_.items += n;
    counters_.max_batch = std::max(counters_.max_batch, n);
    counters_.busy_time += d;
  }
}

int TensorReplicaSim::free_instances() const {
  int n = 0;
  for (const Instance& inst : instances_) n += inst.busy_until == kNever;
  return n;
}

serving::ReplicaLoad TensorReplicaSim::Load() const {
  serving::ReplicaLoad load;
  load.waiting = batcher_.pending();
  load.running = running_;
  return load;
}

}  // namespace gpusched::sim
