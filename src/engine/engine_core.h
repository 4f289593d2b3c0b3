// EngineCore: the reference engine's scheduler and model, as plain logic.
//
// Continuous batching of sequences, iteration by iteration: each Step admits
// waiting sequences while KV blocks and max_num_seqs allow (whole prompt,
// minus the blocks found in the prefix cache), prefills the admitted
// prompts, then decodes one token for every running sequence. The KV cache
// is bounded in blocks; finished sequences leave their full prompt blocks in
// an LRU prefix cache keyed by chained block hashes.
//
// The model is real compute on the CPU: a small stack of dense layers with
// deterministic synthetic weights (sizes from EngineOptions), so output
// tokens are a deterministic function of the seed and the prompt. In profile
// mode the same tokens come out, and Step also reports how long the
// iteration would take on the profiled GPU (the caller waits that long).
//
// Clock-free and single-threaded: the engine server calls it from its loop.
#ifndef GPUSCHED_ENGINE_ENGINE_CORE_H_
#define GPUSCHED_ENGINE_ENGINE_CORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "serving/latency_model.h"

namespace gpusched::engine {

struct EngineOptions {
  std::string model = "reference";
  int hidden = 64;  // width of the dense stack (also the embedding size)
  int layers = 2;
  int vocab = 512;
  uint64_t seed = 1;  // weights
  int64_t kv_blocks = 2048;
  int block_tokens = 16;
  int max_num_seqs = 64;
  int64_t max_model_len = 8192;  // prompt + output tokens
  // Profile mode: iteration times from this latency model.
  std::optional<serving::LatencyModel> profile;
};

absl::Status ValidateEngineOptions(const EngineOptions& o);

enum class FinishReason { kLength, kStop, kCancelled };
const char* FinishReasonName(FinishReason r);

struct SequenceRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  // Called on the engine's thread for each generated token, then once at
  // the end.
  std::function<void(int32_t token)> on_token;
  std::function<void(FinishReason, int64_t cached_tokens)> on_finish;
};

struct StepResult {
  int64_t prefill_tokens = 0;  // computed (not cached) prompt tokens
  int64_t decoded = 0;         // sequences that produced a token
  double seconds = 0;          // profile mode: modeled iteration time
  bool idle() const { return prefill_tokens == 0 && decoded == 0; }
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  double kv_usage = 0;         // 0..1
  int64_t prefix_hits = 0;     // cached prompt tokens
  int64_t prefix_queries = 0;  // prompt tokens looked up
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
};

class EngineCore {
 public:
  // `options` must be valid.
  explicit EngineCore(EngineOptions options);

  const EngineOptions& options() const { return options_; }

  // Queues a sequence; InvalidArgument when it can never fit.
  absl::StatusOr<uint64_t> Add(SequenceRequest request);
  // Finishes a sequence early (on_finish with kCancelled); no-op if gone.
  void Cancel(uint64_t id);
  // Cancels every sequence (shutdown).
  void CancelAll();
  StepResult Step();
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  EngineStats stats() const;

  // The deterministic model, also used for embeddings.
  std::vector<int32_t> Tokenize(const std::string& text) const;
  std::string Detokenize(int32_t token) const;
  // Mean of the final hidden states over the tokens, L2-normalised.
  std::vector<float> Embed(const std::vector<int32_t>& tokens) const;

 private:
  struct Seq {
    uint64_t id;
    SequenceRequest req;
    std::vector<int32_t> output;
    std::vector<float> state;            // running hidden state
    std::vector<uint64_t> block_hashes;  // full prompt blocks
    int64_t blocks = 0;                  // KV blocks held
    int64_t cached_tokens = 0;
    bool prefilled = false;
  };
  // One token through the stack; updates `state`, returns the next token.
  int32_t Forward(int32_t token, std::vector<float>& state) const;
  int64_t BlocksFor(int64_t tokens) const;
  bool TakeBlocks(int64_t n);
  void Finish(std::unique_ptr<Seq> seq, FinishReason reason);
  void CacheInsert(uint64_t hash);

  EngineOptions options_;
  std::vector<float> embed_;                 // vocab x hidden
  std::vector<std::vector<float>> weights_;  // layers x (hidden x hidden)
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  uint64_t next_id_ = 1;
  int64_t free_blocks_;
  // Prefix cache: block hash -> LRU position; cached blocks count as free
  // capacity that is evicted on demand.
  std::list<uint64_t> lru_;
  absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> cache_;
  EngineStats counters_;
};

}  // namespace gpusched::engine

#endif  // GPUSCHED_ENGINE_ENGINE_CORE_H_
