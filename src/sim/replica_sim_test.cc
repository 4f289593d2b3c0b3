#include "sim/replica_sim.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <iostream>
#include <list>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/random.h"
#include "gtest/gtest.h"
#include "sim/replica_sim_testing.h"

namespace gpusched::sim {
namespace {

using simtest::MakeRequest;
using simtest::Recorder;

// Hand-checkable costs in microseconds:
//   prefill(T)     = 10000 + 10*T
//   decode(B, KV)  = 5000 + 100*B + KV
serving::LatencyModel SimpleModel() {
  serving::LatencyModel m;
  m.p0 = 0.01;
  m.p1 = 1e-5;
  m.d0 = 0.005;
  m.d1 = 1e-4;
  m.d2 = 1e-6;
  return m;
}

LlmReplicaConfig SimpleConfig(int64_t kv_capacity_tokens, int block_tokens) {
  LlmReplicaConfig c;
  c.latency = SimpleModel();
  c.kv_capacity_tokens = kv_capacity_tokens;
  c.block_tokens = block_tokens;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 8192;
  c.prefix_caching = true;
  return c;
}

std::unique_ptr<LlmReplicaSim> MakeLlm(const LlmReplicaConfig& config) {
  absl::StatusOr<std::unique_ptr<LlmReplicaSim>> sim =
      LlmReplicaSim::Create(config);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return *std::move(sim);
}

// Drives `engine` with requests arriving at their req.arrival (sorted),
// advancing it at every event until everything has finished.
template <typename Engine>
void Drive(Engine& engine, std::vector<SimRequest*> requests,
           ReplicaSimListener& listener) {
  size_t next = 0;
  while (true) {
    const Micros arrival =
        next < requests.size() ? requests[next]->req.arrival : kNever;
    const Micros event = engine.NextEventTime();
    if (arrival == kNever && event == kNever) break;
    if (event <= arrival) {
      engine.Advance(event, listener);
    } else {
      engine.Enqueue(requests[next++], arrival);
    }
  }
}

// Advances through the next event, which must be at `expected`.
void Step(LlmReplicaSim& sim, Micros expected, ReplicaSimListener& l) {
  ASSERT_EQ(sim.NextEventTime(), expected);
  sim.Advance(expected, l);
}

TEST(LlmReplicaSimTest, ConfigValidationNamesTheKnob) {
  LlmReplicaConfig c = SimpleConfig(1000, 16);
  EXPECT_TRUE(ValidateLlmReplicaConfig(c).ok());
  c.block_tokens = 0;
  EXPECT_NE(ValidateLlmReplicaConfig(c).message().find("block_tokens"),
            std::string::npos);
  c = SimpleConfig(8, 16);
  EXPECT_NE(ValidateLlmReplicaConfig(c).message().find("kv_capacity_tokens"),
            std::string::npos);
  c = SimpleConfig(0, 16);
  c.latency.kv_capacity_tokens = 160;  // 0 falls back to the model's
  EXPECT_TRUE(ValidateLlmReplicaConfig(c).ok());
  EXPECT_EQ(MakeLlm(c)->capacity_blocks(), 10);
  c = SimpleConfig(1000, 16);
  c.max_num_seqs = 0;
  EXPECT_NE(ValidateLlmReplicaConfig(c).message().find("max_num_seqs"),
            std::string::npos);
  c = SimpleConfig(1000, 16);
  c.max_num_batched_tokens = 4;
  EXPECT_NE(
      ValidateLlmReplicaConfig(c).message().find("max_num_batched_tokens"),
      std::string::npos);
  EXPECT_FALSE(LlmReplicaSim::Create(c).ok());
}

TEST(LlmReplicaSimTest, SingleRequestTimeline) {
  auto sim = MakeLlm(SimpleConfig(10000, 16));
  Recorder rec;
  SimRequest a = MakeRequest(1, 1000, 4);
  EXPECT_TRUE(sim->idle());
  sim->Enqueue(&a, 0);
  EXPECT_EQ(a.dispatched, 0);
  EXPECT_EQ(a.started, 0);
  // Prefill 1000 tokens: 10000 + 10000.
  Step(*sim, 20000, rec);
  EXPECT_EQ(a.first_token, 20000);
  // Decodes with context 1001, 1002, 1003: 5000 + 100 + ctx each.
  Step(*sim, 26101, rec);
  Step(*sim, 32203, rec);
  Step(*sim, 38306, rec);
  EXPECT_EQ(a.finished, 38306);
  EXPECT_EQ(rec.finished(&a), 1);
  EXPECT_TRUE(sim->idle());
  const LlmReplicaCounters& c = sim->counters();
  EXPECT_EQ(c.iterations, 4);
  EXPECT_EQ(c.prompt_tokens, 1000);
  EXPECT_EQ(c.generated_tokens, 4);
  EXPECT_EQ(c.busy_time, 38306);
  EXPECT_EQ(c.finished, 1);
  EXPECT_EQ(sim->pinned_blocks(), 0);
}

TEST(LlmReplicaSimTest, TwoRequestsBatchTogether) {
  auto sim = MakeLlm(SimpleConfig(10000, 16));
  Recorder rec;
  SimRequest a = MakeRequest(1, 1000, 3);
  SimRequest b = MakeRequest(2, 500, 3);
  sim->Enqueue(&a, 0);
  sim->Enqueue(&b, 5000);  // joins the next iteration
  serving::ReplicaLoad load = sim->Load();
  EXPECT_EQ(load.running, 1);
  EXPECT_EQ(load.waiting, 1);
  Step(*sim, 20000, rec);
  EXPECT_EQ(a.first_token, 20000);
  EXPECT_EQ(b.started, 20000);
  // Mixed: decode A (ctx 1001) 6101 + prefill B (500) 15000.
  Step(*sim, 41101, rec);
  EXPECT_EQ(b.first_token, 41101);
  // Decode both: 5000 + 200 + (1002 + 501).
  load = sim->Load();
  EXPECT_EQ(load.running, 2);
  EXPECT_EQ(load.kv_tokens, 1002 + 501);
  Step(*sim, 47804, rec);
  EXPECT_EQ(a.finished, 47804);
  // B alone: 5000 + 100 + 502.
  Step(*sim, 53406, rec);
  EXPECT_EQ(b.finished, 53406);
  EXPECT_EQ(sim->counters().generated_tokens, 6);
  EXPECT_EQ(sim->counters().iterations, 4);
  EXPECT_TRUE(sim->idle());
}

TEST(LlmReplicaSimTest, ChunkedPrefillSpansIterations) {
  LlmReplicaConfig config = SimpleConfig(10000, 16);
  config.max_num_batched_tokens = 512;
  auto sim = MakeLlm(config);
  Recorder rec;
  SimRequest a = MakeRequest(1, 1200, 2);
  SimRequest c = MakeRequest(2, 100, 1);
  sim->Enqueue(&a, 0);
  sim->Enqueue(&c, 1);
  Step(*sim, 15120, rec);  // chunk 512
  EXPECT_EQ(a.first_token, kNever);
  EXPECT_EQ(sim->Load().kv_tokens, 512);
  // Iteration 2 (now in flight): another 512 of A; no budget left for C.
  EXPECT_EQ(c.started, kNever);
  EXPECT_EQ(sim->Load().waiting, 1);
  Step(*sim, 30240, rec);
  // Last chunk of A (176) and all of C (100): 10000 + 10*276.
  Step(*sim, 43000, rec);
  EXPECT_EQ(c.started, 30240);
  EXPECT_EQ(a.first_token, 43000);
  EXPECT_EQ(c.first_token, 43000);
  EXPECT_EQ(c.finished, 43000);
  Step(*sim, 49301, rec);  // decode A at context 1201
  EXPECT_EQ(a.finished, 49301);
  EXPECT_EQ(sim->counters().prompt_tokens, 1300);
  EXPECT_EQ(rec.total_finished(), 2);
}

TEST(LlmReplicaSimTest, PrefixCacheHitThenMissAfterEviction) {
  // 8 blocks of 16 tokens.
  auto sim = MakeLlm(SimpleConfig(128, 16));
  Recorder rec;
  const std::vector<uint64_t> shared = {1, 2, 3, 4};
  const std::vector<uint64_t> other = {20, 21, 22, 23, 24, 25};
  SimRequest a = MakeRequest(1, 64, 1);
  a.req.prefix_blocks = shared;
  sim->Enqueue(&a, 0);
  Step(*sim, 10640, rec);
  EXPECT_EQ(a.cached_prompt_tokens, 0);
  EXPECT_EQ(sim->cached_evictable_blocks(), 4);
  EXPECT_EQ(sim->free_blocks(), 4);

  // Same prompt: all 4 blocks hit; only the last token is computed.
  SimRequest b = MakeRequest(2, 64, 1);
  b.req.prefix_blocks = shared;
  sim->Enqueue(&b, 20000);
  Step(*sim, 30010, rec);
  EXPECT_EQ(b.cached_prompt_tokens, 63);

  // A 6-block prompt needs 2 cached blocks back: A's tail blocks go first.
  SimRequest d = MakeRequest(3, 96, 1);
  d.req.prefix_blocks = other;
  sim->Enqueue(&d, 40000);
  Step(*sim, 50960, rec);
  EXPECT_EQ(d.cached_prompt_tokens, 0);
  EXPECT_FALSE(sim->IsCached(4));
  EXPECT_FALSE(sim->IsCached(3));
  EXPECT_TRUE(sim->IsCached(2));
  EXPECT_TRUE(sim->IsCached(1));
  EXPECT_EQ(sim->free_blocks(), 0);
  EXPECT_EQ(sim->cached_evictable_blocks(), 8);

  // The same prompt again: blocks 1-2 hit, 3-4 are recomputed.
  SimRequest e = MakeRequest(4, 64, 1);
  e.req.prefix_blocks = shared;
  sim->Enqueue(&e, 60000);
  EXPECT_EQ(sim->pinned_blocks(), 4);
  EXPECT_DOUBLE_EQ(sim->Load().kv_used_fraction, 0.5);
  Step(*sim, 70320, rec);  // prefill 32 tokens
  EXPECT_EQ(e.cached_prompt_tokens, 32);
  const LlmReplicaCounters& c = sim->counters();
  EXPECT_EQ(c.cached_tokens, 63 + 32);
  EXPECT_EQ(c.prompt_tokens, 64 + 1 + 96 + 32);
  EXPECT_EQ(c.evicted_blocks, 4);
  EXPECT_TRUE(sim->IsCached(3));  // recomputed and cached again
}

TEST(LlmReplicaSimTest, NoPrefixCachingMeansNoHits) {
  LlmReplicaConfig config = SimpleConfig(128, 16);
  config.prefix_caching = false;
  auto sim = MakeLlm(config);
  Recorder rec;
  const std::vector<uint64_t> shared = {1, 2, 3, 4};
  SimRequest a = MakeRequest(1, 64, 1, 0);
  SimRequest b = MakeRequest(2, 64, 1, 20000);
  a.req.prefix_blocks = shared;
  b.req.prefix_blocks = shared;
  Drive(*sim, {&a, &b}, rec);
  EXPECT_EQ(b.cached_prompt_tokens, 0);
  EXPECT_EQ(b.finished - b.started, 10640);
  EXPECT_FALSE(sim->IsCached(1));
  EXPECT_EQ(sim->free_blocks(), 8);
}

TEST(LlmReplicaSimTest, KvExhaustionPreemptsTheNewestAndRecomputes) {
  // 6 blocks of 16 tokens; each request needs up to 5 (32 + 39 tokens).
  LlmReplicaConfig config = SimpleConfig(96, 16);
  config.prefix_caching = false;
  auto sim = MakeLlm(config);
  Recorder rec;
  SimRequest a = MakeRequest(1, 32, 40);
  SimRequest b = MakeRequest(2, 32, 40);
  sim->Enqueue(&a, 0);
  sim->Enqueue(&b, 0);
  Drive(*sim, {}, rec);
  // Iteration 2 admits B; at iteration 18 A's context reaches 49 and needs a
  // 4th block while all 6 are pinned: B (16 tokens generated) is preempted,
  // waits for A to finish (iteration 40), re-prefills 48 tokens in 41 and
  // finishes in 41 + 23 = 64.
  EXPECT_EQ(a.preemptions, 0);
  EXPECT_EQ(b.preemptions, 1);
  EXPECT_EQ(rec.finished(&a), 1);
  EXPECT_EQ(rec.finished(&b), 1);
  EXPECT_LT(b.first_token, a.finished);
  EXPECT_GT(b.finished, a.finished);
  const LlmReplicaCounters& c = sim->counters();
  EXPECT_EQ(c.preemptions, 1);
  EXPECT_EQ(c.iterations, 64);
  EXPECT_EQ(c.prompt_tokens, 32 + 32 + 48);
  EXPECT_EQ(c.generated_tokens, 80);
  EXPECT_EQ(sim->free_blocks(), 6);
}

TEST(LlmReplicaSimTest, TooLongIsRejectedAtOnce) {
  auto sim = MakeLlm(SimpleConfig(96, 16));
  Recorder rec;
  SimRequest ok = MakeRequest(1, 32, 4);
  SimRequest big = MakeRequest(2, 90, 10);  // 7 blocks > 6
  sim->Enqueue(&ok, 0);
  sim->Enqueue(&big, 100);
  EXPECT_EQ(sim->NextEventTime(), 100);
  sim->Advance(100, rec);
  EXPECT_TRUE(big.rejected_too_long);
  EXPECT_EQ(big.finished, 100);
  EXPECT_EQ(big.first_token, kNever);
  EXPECT_EQ(rec.finished(&big), 1);
  EXPECT_EQ(sim->NextEventTime(), 10320);  // ok's prefill goes on
  Drive(*sim, {}, rec);
  EXPECT_EQ(rec.finished(&ok), 1);
  EXPECT_EQ(sim->counters().rejected_too_long, 1);
  EXPECT_EQ(sim->counters().generated_tokens, 4);
}

TEST(LlmReplicaSimTest, ListenerMayEnqueueDuringAdvance) {
  auto sim = MakeLlm(SimpleConfig(10000, 16));
  SimRequest a = MakeRequest(1, 100, 1);
  SimRequest b = MakeRequest(2, 100, 1);
  struct Chain : Recorder {
    LlmReplicaSim* sim;
    SimRequest* next;
    void OnFinished(SimRequest* r, Micros t) override {
      Recorder::OnFinished(r, t);
      if (next != nullptr) sim->Enqueue(std::exchange(next, nullptr), t);
    }
  } chain;
  chain.sim = sim.get();
  chain.next = &b;
  sim->Enqueue(&a, 0);
  Drive(*sim, {}, chain);
  EXPECT_EQ(a.finished, 11000);
  EXPECT_EQ(b.started, 11000);
  EXPECT_EQ(b.finished, 22000);
}

// ---------------------------------------------------------------------------
// A trivial reference engine: the same iteration model written the obvious
// way (every iteration walks every sequence; block use recounted from
// scratch). The real one must agree with it exactly.

class ReferenceLlm {
 public:
  explicit ReferenceLlm(const LlmReplicaConfig& c)
      : c_(c), b_(c.block_tokens), cap_(c.kv_capacity_tokens / b_) {}

  void Enqueue(SimRequest* r, Micros now) {
    r->dispatched = now;
    Seq& s = seqs_[r];
    s = Seq{};
    s.r = r;
    s.prompt = std::max(1, r->req.input_tokens);
    s.target = std::max(1, r->output_tokens);
    s.hashed =
        c_.prefix_caching
            ? std::min<int64_t>(r->req.prefix_blocks.size(), Ceil(s.prompt))
            : 0;
    if (Ceil(s.prompt + s.target) > cap_) {
      r->rejected_too_long = true;
      if (rejects_.empty()) now_of_reject_ = now;
      rejects_.push_back(r);
      return;
    }
    s.len = s.prompt;
    waiting_.push_back(&s);
    if (!in_flight_ && !in_advance_) Start(now);
  }

  Micros NextEventTime() const {
    const Micros t = in_flight_ ? end_ : kNever;
    return rejects_.empty() ? t : std::min(t, now_of_reject_);
  }

  void Advance(Micros now, ReplicaSimListener& l) {
    in_advance_ = true;
    std::vector<std::pair<bool, SimRequest*>> events;
    for (SimRequest* r : rejects_) {
      r->finished = now;
      events.emplace_back(true, r);
    }
    rejects_.clear();
    if (in_flight_ && now == end_) Complete(now, events);
    for (auto [fin, r] : events) {
      if (fin) {
        l.OnFinished(r, now);
      } else {
        l.OnFirstToken(r, now);
      }
    }
    in_advance_ = false;
    if (!in_flight_ && (!running_.empty() || !waiting_.empty())) Start(now);
  }

  int64_t iterations = 0, generated = 0, prompt_tokens = 0, cached = 0,
          preemptions = 0;

 private:
  struct Seq {
    SimRequest* r = nullptr;
    int64_t prompt = 0, target = 0, generated = 0, len = 0, done = 0, chunk = 0,
            priv = 0, hashed = 0, next_reg = 0;
    bool decoding = false;
    std::vector<uint64_t> shared;
  };

  int64_t Ceil(int64_t tokens) const { return (tokens + b_ - 1) / b_; }
  int64_t Free() const {
    int64_t used = static_cast<int64_t>(cache_.size());
    for (const Seq* s : running_) used += s->priv;
    return cap_ - used;
  }
  int64_t Evictable() const { return static_cast<int64_t>(lru_.size()); }
  bool Reserve(int64_t n) {
    if (n > Free() + Evictable()) return false;
    while (Free() < n) {
      cache_.erase(lru_.front());
      lru_.pop_front();
    }
    return true;
  }
  void Release(Seq& s) {
    for (auto it = s.shared.rbegin(); it != s.shared.rend(); ++it) {
      if (--cache_[*it] == 0) lru_.push_back(*it);
    }
    s.shared.clear();
    s.priv = 0;
  }
  void Preempt(Seq* s) {
    running_.erase(std::find(running_.begin(), running_.end(), s));
    Release(*s);
    s->len = s->prompt + s->generated;
    s->done = 0;
    s->decoding = false;
    ++s->r->preemptions;
    ++preemptions;
    waiting_.push_front(s);
  }
  bool Admit(Seq* s, Micros now) {
    const int64_t blocks = Ceil(s->len);
    std::vector<uint64_t> hits;
    int64_t evictable_hits = 0;
    for (int64_t i = 0; i < std::min(s->hashed, blocks); ++i) {
      auto it = cache_.find(s->r->req.prefix_blocks[i]);
      if (it == cache_.end()) break;
      hits.push_back(it->first);
      evictable_hits += it->second == 0;
    }
    const int64_t fresh = blocks - static_cast<int64_t>(hits.size());
    if (fresh > Free() + Evictable() - evictable_hits) return false;
    for (uint64_t h : hits) {
      if (cache_[h]++ == 0) lru_.remove(h);
    }
    EXPECT_TRUE(Reserve(fresh));
    s->shared = hits;
    s->next_reg = static_cast<int64_t>(hits.size());
    s->priv = fresh;
    s->done = std::min(
        {static_cast<int64_t>(hits.size()) * b_, s->prompt, s->len - 1});
    cached += s->done;
    if (s->r->first_token == kNever) s->r->cached_prompt_tokens = s->done;
    if (s->r->started == kNever) s->r->started = now;
    running_.push_back(s);
    return true;
  }
  void Start(Micros now) {
    bool preempted = false;
    for (size_t i = 0; i < running_.size(); ++i) {
      Seq* s = running_[i];
      if (!s->decoding) continue;
      const int64_t need = Ceil(s->prompt + s->generated);
      bool gone = false;
      while (static_cast<int64_t>(s->shared.size()) + s->priv < need) {
        if (Reserve(1)) {
          ++s->priv;
          continue;
        }
        Seq* victim = running_.back();
        Preempt(victim);
        preempted = true;
        if (victim == s) {
          gone = true;
          break;
        }
      }
      if (gone) break;  // s was the newest: nothing after it
    }
    int64_t decodes = 0, kv = 0;
    for (const Seq* s : running_) {
      if (s->decoding) {
        ++decodes;
        kv += s->prompt + s->generated;
      }
    }
    int64_t budget = c_.max_num_batched_tokens - decodes;
    int64_t prefill = 0;
    scheduled_.clear();
    for (Seq* s : running_) {
      if (s->decoding || budget == 0) continue;
      s->chunk = std::min(s->len - s->done, budget);
      budget -= s->chunk;
      prefill += s->chunk;
      scheduled_.push_back(s);
    }
    if (!preempted || running_.empty()) {
      while (budget > 0 && !waiting_.empty() &&
             static_cast<int>(running_.size()) < c_.max_num_seqs) {
        Seq* s = waiting_.front();
        if (!Admit(s, now)) break;
        waiting_.pop_front();
        s->chunk = std::min(s->len - s->done, budget);
        budget -= s->chunk;
        prefill += s->chunk;
        scheduled_.push_back(s);
      }
    }
    decodes_ = decodes;
    end_ = now + std::max<Micros>(
                     1, FromSeconds(c_.latency.DecodeSeconds(decodes, kv) +
                                    c_.latency.PrefillSeconds(prefill)));
    in_flight_ = true;
    ++iterations;
  }
  void Finish(Seq* s, Micros t,
              std::vector<std::pair<bool, SimRequest*>>& events) {
    running_.erase(std::find(running_.begin(), running_.end(), s));
    Release(*s);
    s->r->finished = t;
    events.emplace_back(true, s->r);
  }
  void Complete(Micros t, std::vector<std::pair<bool, SimRequest*>>& events) {
    in_flight_ = false;
    generated += decodes_;
    std::vector<Seq*> decoders;
    for (Seq* s : running_) {
      if (s->decoding) decoders.push_back(s);
    }
    for (Seq* s : decoders) {
      if (++s->generated == s->target) Finish(s, t, events);
    }
    for (Seq* s : scheduled_) {
      s->done += s->chunk;
      prompt_tokens += s->chunk;
      if (c_.prefix_caching) {
        while (s->next_reg < s->hashed) {
          const int64_t i = s->next_reg;
          if (std::min(s->done, s->prompt) < std::min((i + 1) * b_, s->prompt))
            break;
          ++s->next_reg;
          const uint64_t h = s->r->req.prefix_blocks[i];
          if (cache_.count(h) > 0) continue;
          cache_[h] = 1;
          s->shared.push_back(h);
          --s->priv;
        }
      }
      if (s->done < s->len) continue;
      ++s->generated;
      ++generated;
      if (s->r->first_token == kNever) {
        s->r->first_token = t;
        events.emplace_back(false, s->r);
      }
      if (s->generated >= s->target) {
        Finish(s, t, events);
      } else {
        s->decoding = true;
      }
    }
  }

  LlmReplicaConfig c_;
  int64_t b_;
  int64_t cap_;
  std::map<SimRequest*, Seq> seqs_;
  std::deque<Seq*> waiting_;
  std::vector<Seq*> running_;  // admission order
  std::vector<Seq*> scheduled_;
  std::map<uint64_t, int> cache_;  // hash -> refs
  std::list<uint64_t> lru_;        // refs == 0, least recent first
  std::vector<SimRequest*> rejects_;
  Micros now_of_reject_ = 0;
  bool in_flight_ = false, in_advance_ = false;
  Micros end_ = kNever;
  int64_t decodes_ = 0;
};

struct Workload {
  std::vector<std::vector<uint64_t>> hashes;
  std::vector<SimRequest> requests;
  std::vector<SimRequest*> Pointers() {
    std::vector<SimRequest*> p;
    for (SimRequest& r : requests) p.push_back(&r);
    return p;
  }
};

// Conversations sharing prefixes, bursts and lulls, some prompts too long.
Workload RandomWorkload(Rng& rng, int n, int block_tokens, Micros mean_gap) {
  Workload w;
  w.hashes.resize(n);
  w.requests.resize(n);
  Micros t = 0;
  uint64_t unique = 1'000'000;
  for (int i = 0; i < n; ++i) {
    const int32_t prompt = 1 + static_cast<int32_t>(rng.Uniform(400));
    const int32_t output = 1 + static_cast<int32_t>(rng.Uniform(120));
    t += static_cast<Micros>(rng.Uniform(2 * mean_gap + 1));
    w.requests[i] = MakeRequest(i + 1, prompt, output, t);
    const int blocks = (prompt + block_tokens - 1) / block_tokens;
    const uint64_t conversation = rng.Uniform(6);
    const int shared = static_cast<int>(rng.Uniform(blocks + 1));
    if (rng.Uniform(8) != 0) {  // some requests carry no hashes
      for (int b = 0; b < blocks; ++b) {
        w.hashes[i].push_back(b < shared ? conversation * 1000 + b : unique++);
      }
    }
  }
  for (int i = 0; i < n; ++i) w.requests[i].req.prefix_blocks = w.hashes[i];
  return w;
}

LlmReplicaConfig RandomConfig(Rng& rng) {
  LlmReplicaConfig c = SimpleConfig(0, 16);
  c.latency.p2 = 1e-9;
  c.kv_capacity_tokens = 16 * (8 + static_cast<int64_t>(rng.Uniform(60)));
  c.max_num_seqs = 1 + static_cast<int>(rng.Uniform(12));
  c.max_num_batched_tokens =
      c.max_num_seqs + static_cast<int64_t>(rng.Uniform(500));
  c.prefix_caching = rng.Uniform(4) != 0;
  return c;
}

TEST(LlmReplicaSimTest, MatchesReferenceEngineExactly) {
  // The workloads must exercise every path the two engines could disagree
  // on.
  int64_t preemptions = 0, cached = 0, evicted = 0, rejected = 0, chunked = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    Rng rng(seed);
    const LlmReplicaConfig config = RandomConfig(rng);
    const Micros gap = 1 + static_cast<Micros>(rng.Uniform(40000));
    Workload fast = RandomWorkload(rng, 250, 16, gap);
    Workload slow = fast;
    for (size_t i = 0; i < slow.requests.size(); ++i) {
      slow.requests[i].req.prefix_blocks = slow.hashes[i];
    }
    auto sim = MakeLlm(config);
    ReferenceLlm ref(config);
    Recorder rec_fast, rec_slow;
    Drive(*sim, fast.Pointers(), rec_fast);
    Drive(ref, slow.Pointers(), rec_slow);
    ASSERT_EQ(rec_fast.order(), rec_slow.order());
    for (size_t i = 0; i < fast.requests.size(); ++i) {
      const SimRequest& f = fast.requests[i];
      const SimRequest& s = slow.requests[i];
      SCOPED_TRACE(testing::Message() << "request " << f.req.id);
      ASSERT_EQ(f.rejected_too_long, s.rejected_too_long);
      ASSERT_EQ(f.started, s.started);
      ASSERT_EQ(f.first_token, s.first_token);
      ASSERT_EQ(f.finished, s.finished);
      ASSERT_EQ(f.cached_prompt_tokens, s.cached_prompt_tokens);
      ASSERT_EQ(f.preemptions, s.preemptions);
    }
    const LlmReplicaCounters& c = sim->counters();
    EXPECT_EQ(c.iterations, ref.iterations);
    EXPECT_EQ(c.generated_tokens, ref.generated);
    EXPECT_EQ(c.prompt_tokens, ref.prompt_tokens);
    EXPECT_EQ(c.cached_tokens, ref.cached);
    EXPECT_EQ(c.preemptions, ref.preemptions);
    preemptions += c.preemptions;
    cached += c.cached_tokens;
    evicted += c.evicted_blocks;
    rejected += c.rejected_too_long;
    chunked += c.prompt_tokens > 0 && config.max_num_batched_tokens < 400;
  }
  EXPECT_GT(preemptions, 100);
  EXPECT_GT(cached, 10000);
  EXPECT_GT(evicted, 100);
  EXPECT_GT(rejected, 10);
  EXPECT_GT(chunked, 10);
  std::cout << "preemptions=" << preemptions << " cached=" << cached
            << " evicted=" << evicted << " rejected=" << rejected << "\n";
}

// Conservation on larger seeded workloads: every request finishes exactly
// once, tokens add up, and the engine ends empty.
TEST(LlmReplicaSimTest, RandomizedConservation) {
  for (uint64_t seed = 100; seed < 110; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    Rng rng(seed);
    const LlmReplicaConfig config = RandomConfig(rng);
    Workload w = RandomWorkload(rng, 3000, 16, 5000);
    auto sim = MakeLlm(config);
    Recorder rec;
    int64_t expected_tokens = 0, rejected = 0;
    Drive(*sim, w.Pointers(), rec);
    for (const SimRequest& r : w.requests) {
      ASSERT_EQ(rec.finished(&r), 1) << "request " << r.req.id;
      if (r.rejected_too_long) {
        ++rejected;
        continue;
      }
      expected_tokens += r.output_tokens;
      ASSERT_LE(r.dispatched, r.started);
      ASSERT_LT(r.started, r.first_token);
      ASSERT_LE(r.first_token, r.finished);
    }
    const LlmReplicaCounters& c = sim->counters();
    EXPECT_EQ(c.generated_tokens, expected_tokens);
    EXPECT_EQ(c.rejected_too_long, rejected);
    EXPECT_EQ(c.finished + c.rejected_too_long,
              static_cast<int64_t>(w.requests.size()));
    EXPECT_TRUE(sim->idle());
    EXPECT_EQ(sim->pinned_blocks(), 0);
    const serving::ReplicaLoad load = sim->Load();
    EXPECT_EQ(load.running, 0);
    EXPECT_EQ(load.waiting, 0);
    EXPECT_EQ(load.kv_tokens, 0);
    EXPECT_EQ(load.kv_used_fraction, 0);
  }
}

}  // namespace
}  // namespace gpusched::sim
