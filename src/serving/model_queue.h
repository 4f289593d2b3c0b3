// ModelQueue: the requests of one deployment that wait for a replica.
//
// Order: priority class first (0 is most important; optional aging lifts a
// request one class per `aging` waited), then within a class one of
//  - fair (default): weighted fair queuing across tenants in tokens with
//    virtual token counters (VTC, Sheng et al., OSDI'24): the backlogged
//    tenant with the smallest counter goes next; its counter grows by
//    (input_weight*input + output_weight*output) / tenant weight. Within a
//    tenant, earliest deadline first, then arrival order. Work-conserving: a
//    tenant that returns from idle is lifted to the smallest backlogged counter
//    (or the last served one), so idle time banks no credit and an idle
//    tenant's share goes to whoever is backlogged.
//  - edf: earliest latest-start-time first (deadline - prefill_estimate)
//    across tenants, then arrival; with `demote_late`, requests that can no
//    longer meet their deadline even if started now wait behind those that
//    still can (they are served when nothing feasible waits).
//  - fcfs: arrival order.
// Output tokens are charged at dispatch from the estimate (max_output_tokens)
// and corrected by Charge() when the real count is known (VTC with length
// prediction). Per-class queue timeouts (Triton's default_timeout) are applied
// by ExpireTimedOut.
//
// Clock-driven: every call takes `now`; nothing here reads a clock, owns a
// thread or allocates per request once warm. Not thread-safe.
#ifndef GPUSCHED_SERVING_MODEL_QUEUE_H_
#define GPUSCHED_SERVING_MODEL_QUEUE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/clock.h"
#include "serving/request.h"

namespace gpusched::serving {

enum class QueueOrder { kFair, kEdf, kFcfs };
absl::Status ParseQueueOrder(const std::string& name, QueueOrder* out);
const char* QueueOrderName(QueueOrder order);

struct QueueClassConfig {
  std::string name;  // e.g. "critical"
  QueueOrder order = QueueOrder::kFair;
  // A request that waits longer than this is removed (reason "queue_timeout").
  Micros timeout = kNever;
};

struct ModelQueueConfig {
  // Index = ClassId. At most 255 classes; at least one.
  std::vector<QueueClassConfig> classes;
  // A waiting request counts as one class more important per `aging` waited
  // (kNever: no aging).
  Micros aging = kNever;
  // VTC weights of an input and an output token (the paper uses 1 and 2).
  double input_weight = 1.0;
  double output_weight = 2.0;
  // edf: requests whose deadline is closer than this margin from now are late.
  bool demote_late = false;
  // Default: about two engine iterations of slack; a request closer than
  // that to its latest start time rarely makes its deadline once queued
  // behind the engine's own work.
  Micros late_margin = 200 * kMicrosPerMilli;
};

absl::Status ValidateModelQueueConfig(const ModelQueueConfig& config);

class ModelQueue {
 public:
  // `config` must be valid (ValidateModelQueueConfig).
  explicit ModelQueue(ModelQueueConfig config);

  const ModelQueueConfig& config() const { return config_; }

  // Weight of a tenant in fair ordering (default 1, must be > 0).
  void SetTenantWeight(TenantId tenant, double weight);

  // Queues `r` (its class must exist). Bounds are Admission's business.
  void Push(const Request& r, Micros now);

  // Hints that `tenant`'s record in class `cls` is about to be used (a
  // cache prefetch; the tables are large and touched at random).
  void Prefetch(ClassId cls, TenantId tenant) const {
    if (cls < classes_.size() && tenant < classes_[cls].by_tenant.size()) {
      __builtin_prefetch(&classes_[cls].by_tenant[tenant]);
    }
  }

  // Removes and returns the next request to dispatch; false when empty.
  bool Pop(Micros now, Request* out);
  // Pops the first request, in queue order, for which `eligible` holds,
  // looking past others only within the first non-empty class when it is
  // fair-ordered: there each backlogged tenant's next request is a candidate
  // (the head of an edf or fcfs class is never bypassed). Used when the head
  // cannot take the free capacity (fair-share headroom). Costs O(backlogged
  // tenants).
  bool PopEligible(Micros now, absl::FunctionRef<bool(const Request&)> eligible,
                   Request* out);
  // The request Pop(now) would return, left in place (nullptr when empty).
  // Valid until the next non-const call.
  const Request* Peek(Micros now);

  // Removes every request whose class timeout has passed; appends them.
  void ExpireTimedOut(Micros now, std::vector<Request>* expired);
  // The earliest time ExpireTimedOut would remove something (kNever if none).
  Micros NextTimeout() const;

  // Adds weighted tokens to a tenant's counter in a class: the correction
  // once the real output length is known (`output_tokens_delta` may be < 0).
  void CorrectOutput(TenantId tenant, ClassId cls, int64_t output_tokens_delta);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Requests of `tenant` waiting in all classes (scans edf and fcfs
  // classes: for tests and metrics, not the hot path).
  int64_t tenant_size(TenantId tenant) const;
  // Requests of `tenant` waiting in class `cls` (fair classes only; else 0).
  int64_t tenant_class_size(ClassId cls, TenantId tenant) const;
  int64_t class_size(ClassId cls) const;
  // About how many waiting requests would be dispatched before a new request
  // of a tenant that has `own_queued` requests waiting, in class `cls`: all
  // of the more important classes, and in its own class all (fcfs, edf) or,
  // for fair order, its own plus about as many turns for each other
  // backlogged tenant (VTC serves backlogged tenants in turn). Used for wait
  // predictions; the caller knows `own_queued`.
  int64_t AheadOf(ClassId cls, int64_t own_queued) const;
  // The tenant's virtual token counter in a class (for tests and metrics).
  double counter(ClassId cls, TenantId tenant) const;

 private:
  struct Entry {  // a heap entry referring to a slot
    Micros key;
    uint64_t seq;
    uint32_t slot;
  };
  static_assert(sizeof(Entry) == 24);
  struct Slot {
    Request request;
    uint64_t seq = 0;
    Micros enqueued = 0;
    bool live = false;
  };
  // One tenant's requests in one fair class, 32 bytes (two per cache
  // line; tables are tenants x classes x deployments, so size is speed).
  // Most tenants have one request waiting at a time: its slot is kept
  // inline; a second moves both into `heap`, allocated on first need.
  struct TenantQueue {
    double counter = 0;
    std::unique_ptr<std::vector<Entry>> heap;  // (deadline, seq) min-heap;
                                               // may hold dead slots
    uint32_t version = 0;  // bumped whenever the tenant's heap item changes
    int32_t live = 0;
    uint32_t first_slot = 0;  // valid when has_first (heap then empty)
    bool in_heap = false;     // backlogged: has a current item in `tenants`
    bool has_first = false;
  };
  static_assert(sizeof(TenantQueue) == 32);
  // An item of the lazy tenant heap; current iff its version matches.
  struct TenantItem {
    double counter;
    TenantId tenant;
    uint32_t version;
  };
  struct ClassQueue {
    std::vector<TenantQueue> by_tenant;  // fair: indexed by TenantId
    // fair: min-heap of backlogged tenants on (counter, id). Lazy: a changed
    // counter pushes a new item and leaves the old one stale, so sifting
    // touches only this array (the hot path's cache lines).
    std::vector<TenantItem> tenants;
    int64_t backlogged = 0;
    double last_served_counter = 0;
    std::vector<Entry> heap;  // edf/fcfs: (deadline or 0, seq) min-heap
    std::deque<Entry> late;   // edf + demote_late: arrival order
    // (enqueued, seq, slot) in push order, lazily cleaned; kept only when
    // the class has a timeout or the queue ages.
    std::deque<Entry> arrivals;
    bool track_arrivals = false;
    int64_t live = 0;
  };

  uint32_t AllocSlot(const Request& r, Micros now);
  void FreeSlot(uint32_t slot);
  bool SlotIsLive(const Entry& e) const;
  // `served`: dispatched (charged to the tenant) rather than expired.
  void Take(ClassId cls, uint32_t slot, bool served, Request* out);
  // The class (and whether its oldest request, by aging) Pop serves next.
  bool Select(Micros now, ClassId* cls, bool* oldest);
  // Brings the head of a non-empty class to a live entry; returns its slot.
  uint32_t SettleHead(ClassId cls, Micros now);
  bool PopFromClass(ClassId cls, Micros now, Request* out);
  bool PopOldest(ClassId cls, Micros now, Request* out);
  void CleanArrivals(ClassQueue& q);
  TenantQueue& Tenant(ClassQueue& q, TenantId t);
  double InvWeight(TenantId t) const;
  bool Current(const ClassQueue& q, const TenantItem& item) const;
  void DropStaleTop(ClassQueue& q);
  // (Re)publishes tenant t's counter in the lazy heap.
  void PushTenant(ClassQueue& q, TenantId t);
  void Charge(ClassQueue& q, TenantId t, double weighted_tokens);

  ModelQueueConfig config_;
  std::vector<ClassQueue> classes_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<double> inv_weights_;  // 1 / tenant weight
  uint64_t next_seq_ = 0;
  int64_t size_ = 0;
};

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_MODEL_QUEUE_H_
