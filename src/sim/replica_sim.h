// Simulated replicas for `gpusched sim serve`: what a dispatched request
// experiences inside one engine, driven by the simulator's virtual clock.
//
//   LlmReplicaSim     one continuous-batching LLM engine (vLLM-like), run
//                     iteration by iteration with chunked prefill, a bounded
//                     KV cache, an LRU prefix cache and recompute preemption.
//   TensorReplicaSim  model instances fed by serving::Batcher (Triton's
//                     dynamic batcher), batch latency base + per-item.
//
// Both follow the policy core's clock contract: no threads, no wall clock;
// the owner calls Enqueue(r, now) when the dispatcher sends a request and
// Advance(now, listener) exactly at NextEventTime(). Each replica is owned by
// one simulation run and is not thread-safe. SimRequests are owned by the
// caller and must outlive their time in the replica (until OnFinished).
//
// LlmReplicaSim iteration model (vLLM v0 scheduler with chunked prefill)
// ---------------------------------------------------------------------
// An iteration k is scheduled the moment the previous one ends (or when a
// request arrives at an idle engine) and is fixed when scheduled:
//   1. KV growth: every decoding sequence whose context crosses into a new
//      block in iteration k gets one more block (oldest admitted first).
//      With no free or evictable block left, the most recently admitted
//      running request is preempted (recompute, as vLLM does): its KV is
//      released, it returns to the front of the waiting queue and later
//      re-prefills its prompt plus the tokens already generated (its blocks
//      stay in the prefix cache, so part of that may be a cache hit). Tokens
//      already emitted are not emitted again.
//   2. Decodes: every decoding sequence advances one token.
//   3. Prefill continues: sequences admitted earlier with prompt left get
//      chunks, in admission order, from the token budget
//      max_num_batched_tokens - #decodes.
//   4. Admission (skipped in an iteration that preempted, as vLLM does):
//      waiting requests FCFS while the budget lasts, running < max_num_seqs,
//      and the blocks of the whole prompt fit (free + evictable cached
//      blocks, leading prefix-cache hits counted as already present; all
//      of them are allocated at admission, as vLLM v0 does). The
//      head of the queue blocks those behind it. A long prompt spans several
//      iterations.
//   Duration = DecodeSeconds(#decodes, their context tokens)
//            + PrefillSeconds(prompt tokens prefilled in this iteration),
//   rounded to the microsecond (at least 1). A mixed iteration costs the sum
//   of both parts: decode attention and the prefill chunk share the step but
//   the fitted profiles measure them separately, so the sum is the simple,
//   slightly pessimistic estimate of the fused batch.
//   At the end of iteration k: a sequence whose prefill completed samples a
//   token (its first token, OnFirstToken, unless recomputing); each decode
//   yields one token; a sequence with all output_tokens finishes
//   (OnFinished) and releases its KV.
//
// KV and prefix cache: the KV cache is `kv_capacity_tokens / block_tokens`
// blocks. A sequence with context c holds ceil(c / block_tokens) blocks; the
// context is prompt + tokens generated so far (the token being decoded is
// written in its iteration). Prompt blocks with a known hash
// (Request::prefix_blocks; one hash per block, the last block may be
// partial, as in the Mooncake traces) are cacheable: a block joins the
// cache when its prefill chunk completes, and a later request whose leading
// hashes are cached reuses those blocks (a hit) and does not prefill those
// tokens (the last prompt token is always computed, to sample from). Blocks
// referenced by running sequences are pinned; unreferenced cached blocks are
// evictable, LRU first (a request's tail blocks before its head). Free
// blocks = capacity - pinned - evictable. Blocks past the hashed prompt
// blocks (decode growth, recomputed output) are private, never cached; a
// cached partial last prompt block is shared as is (the traces count it as
// reusable). A request whose prompt + output_tokens cannot fit in
// the whole cache is finished at once with `rejected_too_long` (OnFinished
// at the time it was enqueued; it never gets a first token).
//
// Cost: an iteration is O(1) plus O(log n) per event, never O(running):
// decode context is one running sum that grows by #decodes per iteration;
// each sequence's context is computed from (first decode iteration, context
// then); the iterations at which a sequence finishes or needs its next block
// are precomputed into two min-heaps; the prefix cache is a hash map from
// block hash to node plus an intrusive LRU list, O(1) per block (admission
// looks up the prompt's leading hashes, registration offers each prompt
// block once). The Mooncake conversation trace (12,031 requests, ~2.8M
// iterations) runs on 16 replicas in about half a second
// (bench/replica_sim_timing.cc).
#ifndef GPUSCHED_SIM_REPLICA_SIM_H_
#define GPUSCHED_SIM_REPLICA_SIM_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "serving/batcher.h"
#include "serving/latency_model.h"
#include "serving/request.h"
#include "serving/router.h"

namespace gpusched::sim {

struct SimRequest;

namespace internal {

// LlmReplicaSim's per-request bookkeeping, kept inside the request so the
// hot path needs no lookups. Reset by Enqueue; nobody else touches it.
struct LlmSeqState {
  enum class Phase : uint8_t { kNone, kWaiting, kPrefilling, kDecoding, kDone };
  Phase phase = Phase::kNone;
  // Bumped on preemption; heap entries of an older epoch are stale.
  uint32_t epoch = 0;
  int64_t prompt = 0;             // prompt tokens (>= 1)
  int32_t target = 0;             // output tokens to generate (>= 1)
  int32_t generated = 0;          // tokens emitted (valid outside kDecoding)
  int32_t hashed_blocks = 0;      // usable prefix hashes (<= prompt blocks)
  int32_t next_register = 0;      // next hashed block to offer to the cache
  int64_t prefill_len = 0;        // tokens to prefill in this admission
  int64_t prefilled = 0;          // of those, cached or computed so far
  int64_t chunk = 0;              // prefill tokens in the in-flight iteration
  int64_t decode_start_iter = 0;  // first decode iteration
  int64_t decode_start_ctx = 0;   // context tokens in that iteration
  int64_t finish_iter = 0;        // the iteration that emits the last token
  int64_t blocks = 0;             // KV blocks held (shared + private)
  int64_t private_blocks = 0;
  uint64_t admit_seq = 0;
  std::vector<int32_t> shared;  // cache nodes referenced, in block order
  SimRequest* prev = nullptr;   // running list, admission order
  SimRequest* next = nullptr;
};

}  // namespace internal

// A request inside a simulated replica: the core's Request, the true output
// length the trace knows, and what happened to it.
struct SimRequest {
  serving::Request req;  // input_tokens and prefix_blocks are read
  // True output length; < 1 counts as 1 (prefill always samples a token).
  int32_t output_tokens = 1;

  // Results, reset by Enqueue.
  Micros dispatched = kNever;  // Enqueue time
  // When the engine first took it up: first admission into the running
  // batch (LLM) or the start of its batch (tensor).
  Micros started = kNever;
  Micros first_token = kNever;  // end of the iteration that emitted token 1
  Micros finished = kNever;
  // Prompt tokens served from the prefix cache (at the admission that
  // produced the first token).
  int64_t cached_prompt_tokens = 0;
  int preemptions = 0;
  // Finished without running: prompt + output cannot fit in the KV cache.
  bool rejected_too_long = false;

  internal::LlmSeqState llm;  // LlmReplicaSim's bookkeeping
};

// Receives a replica's request events, from inside Advance, after the
// replica's state is consistent. A listener may call Enqueue and Load on the
// same replica (an enqueued request joins the next iteration or batch) and
// may release the request in OnFinished.
class ReplicaSimListener {
 public:
  virtual ~ReplicaSimListener() = default;
  virtual void OnFirstToken(SimRequest* request, Micros t) = 0;
  virtual void OnFinished(SimRequest* request, Micros t) = 0;
};

struct LlmReplicaConfig {
  serving::LatencyModel latency;
  // KV-cache capacity in tokens; 0 = latency.kv_capacity_tokens. At least
  // one block.
  int64_t kv_capacity_tokens = 0;
  // vLLM --max-num-seqs: most sequences in the running batch.
  int max_num_seqs = 256;
  // vLLM --max-num-batched-tokens: token budget of one iteration (decodes
  // count one each); must be >= max_num_seqs so decodes always fit.
  int64_t max_num_batched_tokens = 8192;
  // KV block size in tokens, also the prefix-hash block size (512 for the
  // Mooncake traces; vLLM's own is 16).
  int block_tokens = 512;
  // vLLM --enable-prefix-caching.
  bool prefix_caching = true;
};

absl::Status ValidateLlmReplicaConfig(const LlmReplicaConfig& config);

struct LlmReplicaCounters {
  int64_t iterations = 0;
  // Prompt tokens computed by prefill, recomputation included.
  int64_t prompt_tokens = 0;
  // Prompt tokens served from the prefix cache, all admissions.
  int64_t cached_tokens = 0;
  int64_t generated_tokens = 0;
  Micros busy_time = 0;  // sum of iteration durations
  int64_t preemptions = 0;
  int64_t finished = 0;  // completed normally
  int64_t rejected_too_long = 0;
  int64_t evicted_blocks = 0;  // cached blocks evicted for space
};

class LlmReplicaSim {
 public:
  static absl::StatusOr<std::unique_ptr<LlmReplicaSim>> Create(
      const LlmReplicaConfig& config);

  LlmReplicaSim(const LlmReplicaSim&) = delete;
  LlmReplicaSim& operator=(const LlmReplicaSim&) = delete;

  // `request` joins the FCFS waiting queue at `now`; an idle engine starts
  // an iteration at once.
  void Enqueue(SimRequest* request, Micros now);
  // End of the in-flight iteration (or `now` of a pending too-long
  // rejection); kNever when idle.
  Micros NextEventTime() const;
  // Must be called at exactly NextEventTime(): completes the iteration,
  // reports events, and starts the next iteration if there is work.
  void Advance(Micros now, ReplicaSimListener& listener);

  // waiting, running, kv_tokens (context held by running sequences) and
  // kv_used_fraction (pinned blocks / capacity, as vLLM's cache usage,
  // evictable cached blocks counting as free). id, outstanding and
  // max_outstanding are the dispatcher's business and stay 0.
  serving::ReplicaLoad Load() const;
  const LlmReplicaCounters& counters() const { return counters_; }
  const LlmReplicaConfig& config() const { return config_; }
  bool idle() const { return NextEventTime() == kNever; }

  // Block accounting (tests, reports).
  int64_t capacity_blocks() const { return capacity_blocks_; }
  int64_t free_blocks() const { return free_blocks_; }
  int64_t cached_evictable_blocks() const { return evictable_blocks_; }
  int64_t pinned_blocks() const {
    return capacity_blocks_ - free_blocks_ - evictable_blocks_;
  }
  // Whether the prefix cache holds a block with this hash.
  bool IsCached(uint64_t block_hash) const {
    return cache_index_.contains(block_hash);
  }

 private:
  struct HeapEntry {
    int64_t iter;
    uint64_t order;  // admission order: older sequences first
    SimRequest* request;
    uint32_t epoch;
    bool operator>(const HeapEntry& o) const {
      return iter != o.iter ? iter > o.iter : order > o.order;
    }
  };
  struct CacheNode {
    uint64_t hash = 0;
    int32_t refs = 0;
    int32_t prev = -1;  // LRU list (refs == 0 only)
    int32_t next = -1;
  };

  explicit LlmReplicaSim(const LlmReplicaConfig& config);

  void StartIteration(Micros start);
  void CompleteIteration(Micros end);
  // Admits `r` (the waiting head) if its prompt's blocks fit.
  bool Admit(SimRequest* r, Micros now);
  void Preempt(SimRequest* r);
  void Finish(SimRequest* r, Micros t);
  void BeginDecode(SimRequest* r);
  // Context tokens of a decoding sequence in the current iteration.
  int64_t DecodeContext(const SimRequest* r) const {
    return r->llm.decode_start_ctx + (iter_ - r->llm.decode_start_iter);
  }
  // Makes `n` blocks free, evicting LRU cached blocks; false if impossible.
  bool ReserveFree(int64_t n);
  void ReleaseBlocks(SimRequest* r);
  void RegisterCompletedBlocks(SimRequest* r);
  void LruPushBack(int32_t node);
  void LruUnlink(int32_t node);
  void RunningAppend(SimRequest* r);
  void RunningUnlink(SimRequest* r);
  static void HeapPush(std::vector<HeapEntry>& heap, const HeapEntry& e);
  static HeapEntry HeapPop(std::vector<HeapEntry>& heap);

  LlmReplicaConfig config_;
  int64_t block_tokens_;
  int64_t capacity_blocks_;

  // Prefix cache.
  std::vector<CacheNode> nodes_;
  std::vector<int32_t> free_nodes_;
  absl::flat_hash_map<uint64_t, int32_t> cache_index_;
  int32_t lru_head_ = -1;  // least recently used, evicted first
  int32_t lru_tail_ = -1;
  int64_t free_blocks_;
  int64_t evictable_blocks_ = 0;

  // Queues.
  std::deque<SimRequest*> waiting_;
  SimRequest* running_head_ = nullptr;  // oldest admitted
  SimRequest* running_tail_ = nullptr;  // most recently admitted
  int running_ = 0;
  std::vector<SimRequest*> prefilling_;  // admission order
  int64_t prefill_ctx_ = 0;              // tokens held by prefilling seqs
  int64_t decoding_ = 0;
  int64_t decode_ctx_ = 0;  // context sum for iteration iter_
  std::vector<HeapEntry> finish_heap_;
  std::vector<HeapEntry> block_heap_;

  // The current (in-flight or last) iteration.
  int64_t iter_ = 0;
  bool in_flight_ = false;
  Micros iter_end_ = kNever;
  int64_t iter_decodes_ = 0;
  std::vector<SimRequest*> scheduled_;  // prefill chunks in iter_

  std::vector<SimRequest*> rejects_;
  Micros reject_due_ = kNever;
  bool in_advance_ = false;
  uint64_t admit_seq_ = 0;
  std::vector<int32_t> hit_scratch_;
  std::vector<std::pair<bool, SimRequest*>> events_;  // (finished?, r)

  LlmReplicaCounters counters_;
};

struct TensorReplicaConfig {
  serving::BatcherConfig batcher;
  // Model instances (Triton instance_group count), each running one batch.
  int instances = 1;
  // Batch latency = base_s + per_item_s * batch size.
  double base_s = 0;
  double per_item_s = 0;
};

absl::Status ValidateTensorReplicaConfig(const TensorReplicaConfig& config);

struct TensorReplicaCounters {
  int64_t batches = 0;
  int64_t items = 0;
  int max_batch = 0;
  Micros busy_time = 0;  // summed over instances
};

class TensorReplicaSim {
 public:
  static absl::StatusOr<std::unique_ptr<TensorReplicaSim>> Create(
      const TensorReplicaConfig& config);

  TensorReplicaSim(const TensorReplicaSim&) = delete;
  TensorReplicaSim& operator=(const TensorReplicaSim&) = delete;

  // Queues `request` in the batcher at `now` (ids unique among queued
  // requests). False, with the request untouched, when the batcher queue is
  // full (max_queue_size): the caller rejects it, as Triton does.
  bool Enqueue(SimRequest* request, Micros now);
  // Drops a request still in the batcher queue (timeout, cancellation).
  bool Remove(SimRequest* request);
  // The earliest batch end, or the batcher's deadline while an instance is
  // free; kNever when idle.
  Micros NextEventTime() const;
  // Must be called at exactly NextEventTime(): completes batches (a request
  // gets OnFirstToken then OnFinished at its batch end) and starts batches
  // on free instances.
  void Advance(Micros now, ReplicaSimListener& listener);

  // waiting = batcher queue, running = requests in running batches.
  serving::ReplicaLoad Load() const;
  const TensorReplicaCounters& counters() const { return counters_; }
  int free_instances() const;

 private:
  struct Instance {
    Micros busy_until = kNever;  // kNever: free
    std::vector<SimRequest*> batch;
  };

  TensorReplicaSim(const TensorReplicaConfig& config, serving::Batcher batcher);
  void Dispatch(Micros now);

  TensorReplicaConfig config_;
  serving::Batcher batcher_;
  absl::flat_hash_map<serving::RequestId, SimRequest*> queued_;
  std::vector<Instance> instances_;
  int running_ = 0;
  bool in_advance_ = false;
  std::vector<SimRequest*> done_;
  TensorReplicaCounters counters_;
};

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_REPLICA_SIM_H_
