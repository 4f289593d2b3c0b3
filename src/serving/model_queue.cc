#include "serving/model_queue.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace gpusched::serving {
namespace {

// Min-heap order on (key, seq).
bool Before(Micros ak, uint64_t as, Micros bk, uint64_t bs) {
  return ak != bk ? ak < bk : as < bs;
}

template <typename E>
void HeapPush(std::vector<E>& h, E e) {
  h.push_back(e);
  size_t i = h.size() - 1;
  while (i > 0) {
    const size_t p = (i - 1) / 2;
    if (!Before(h[i].key, h[i].seq, h[p].key, h[p].seq)) break;
    std::swap(h[i], h[p]);
    i = p;
  }
}

template <typename E>
void HeapPop(std::vector<E>& h) {
  h.front() = h.back();
  h.pop_back();
  const size_t n = h.size();
  size_t i = 0;
  for (;;) {
    const size_t l = 2 * i + 1;
    if (l >= n) break;
    size_t m = l;
    if (l + 1 < n && Before(h[l + 1].key, h[l + 1].seq, h[l].key, h[l].seq)) {
      m = l + 1;
    }
    if (!Before(h[m].key, h[m].seq, h[i].key, h[i].seq)) break;
    std::swap(h[i], h[m]);
    i = m;
  }
}

}  // namespace

absl::Status ParseQueueOrder(const std::string& name, QueueOrder* out) {
  if (name == "fair") {
    *out = QueueOrder::kFair;
  } else if (name == "edf") {
    *out = QueueOrder::kEdf;
  } else if (name == "fcfs") {
    *out = QueueOrder::kFcfs;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown queue order \"", name, "\" (expected fair, edf or fcfs)"));
  }
  return absl::OkStatus();
}

const char* QueueOrderName(QueueOrder order) {
  switch (order) {
    case QueueOrder::kFair:
      return "fair";
    case QueueOrder::kEdf:
      return "edf";
    case QueueOrder::kFcfs:
      return "fcfs";
  }
  return "?";
}

absl::Status ValidateModelQueueConfig(const ModelQueueConfig& c) {
  if (c.classes.empty() || c.classes.size() > 255) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a queue needs 1 to 255 priority classes, got ", c.classes.size()));
  }
  for (const QueueClassConfig& k : c.classes) {
    if (k.timeout <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("class \"", k.name, "\": timeout must be positive"));
    }
  }
  if (c.aging <= 0) {
    return absl::InvalidArgumentError("aging must be positive");
  }
  if (!(c.input_weight >= 0) || !(c.output_weight >= 0) ||
      c.input_weight + c.output_weight <= 0) {
    return absl::InvalidArgumentError(
        "input_weight and output_weight must be >= 0 and not both 0");
  }
  if (c.late_margin < 0) {
    return absl::InvalidArgumentError("late_margin must be >= 0");
  }
  return absl::OkStatus();
}

ModelQueue::ModelQueue(ModelQueueConfig config) : config_(std::move(config)) {
  CHECK(ValidateModelQueueConfig(config_).ok());
  // Constructed in place: ClassQueue is movable only.
  classes_ = std::vector<ClassQueue>(config_.classes.size());
  for (size_t c = 0; c < classes_.size(); ++c) {
    classes_[c].track_arrivals =
        config_.classes[c].timeout != kNever || config_.aging != kNever;
  }
}

void ModelQueue::SetTenantWeight(TenantId tenant, double weight) {
  CHECK(weight > 0);
  if (inv_weights_.size() <= tenant) inv_weights_.resize(tenant + 1, 1.0);
  inv_weights_[tenant] = 1 / weight;
}

uint32_t ModelQueue::AllocSlot(const Request& r, Micros now) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[slot];
  s.request = r;
  s.seq = next_seq_++;
  s.enqueued = now;
  s.live = true;
  return slot;
}

void ModelQueue::FreeSlot(uint32_t slot) {
  slots_[slot].live = false;
  free_slots_.push_back(slot);
}

bool ModelQueue::SlotIsLive(const Entry& e) const {
  const Slot& s = slots_[e.slot];
  return s.live && s.seq == e.seq;
}

ModelQueue::TenantQueue& ModelQueue::Tenant(ClassQueue& q, TenantId t) {
  if (q.by_tenant.size() <= t) {
    q.by_tenant.resize(std::max<size_t>(t + 1, inv_weights_.size()));
  }
  return q.by_tenant[t];
}

double ModelQueue::InvWeight(TenantId t) const {
  return t < inv_weights_.size() ? inv_weights_[t] : 1.0;
}

namespace {
// std heap functions build max-heaps; this order makes the smallest
// (counter, tenant) the top.
struct TenantItemAfter {
  template <typename T>
  bool operator()(const T& a, const T& b) const {
    return a.counter != b.counter ? a.counter > b.counter : a.tenant > b.tenant;
  }
};
}  // namespace

bool ModelQueue::Current(const ClassQueue& q, const TenantItem& item) const {
  const TenantQueue& tq = q.by_tenant[item.tenant];
  return tq.in_heap && tq.version == item.version;
}

void ModelQueue::DropStaleTop(ClassQueue& q) {
  while (!q.tenants.empty() && !Current(q, q.tenants.front())) {
    std::pop_heap(q.tenants.begin(), q.tenants.end(), TenantItemAfter());
    q.tenants.pop_back();
  }
}

void ModelQueue::PushTenant(ClassQueue& q, TenantId t) {
  TenantQueue& tq = q.by_tenant[t];
  ++tq.version;
  q.tenants.push_back(TenantItem{tq.counter, t, tq.version});
  std::push_heap(q.tenants.begin(), q.tenants.end(), TenantItemAfter());
  // Stale items are dropped lazily from the top; rebuild when they pile up.
  if (q.tenants.size() > 2 * static_cast<size_t>(q.backlogged) + 64) {
    size_t keep = 0;
    for (const TenantItem& item : q.tenants) {
      if (Current(q, item)) q.tenants[keep++] = item;
    }
    q.tenants.resize(keep);
    std::make_heap(q.tenants.begin(), q.tenants.end(), TenantItemAfter());
  }
}

void ModelQueue::Push(const Request& r, Micros now) {
  CHECK(r.priority < classes_.size());
  const uint32_t slot = AllocSlot(r, now);
  const Slot& s = slots_[slot];
  ClassQueue& q = classes_[r.priority];
  const QueueClassConfig& k = config_.classes[r.priority];
  if (q.track_arrivals) q.arrivals.push_back(Entry{now, s.seq, slot});
  ++q.live;
  ++size_;
  switch (k.order) {
    case QueueOrder::kFair: {
      TenantQueue& tq = Tenant(q, r.tenant);
      const Entry e{r.deadline, s.seq, slot};
      if (tq.live == 0) {
        tq.first_slot = slot;
        tq.has_first = true;
      } else {
        if (!tq.heap) tq.heap = std::make_unique<std::vector<Entry>>();
        if (tq.has_first) {
          const Slot& f = slots_[tq.first_slot];
          tq.heap->push_back(Entry{f.request.deadline, f.seq, tq.first_slot});
          tq.has_first = false;
        }
        HeapPush(*tq.heap, e);
      }
      if (tq.live++ == 0) {
        // VTC lift: a tenant returning from idle starts at the smallest
        // backlogged counter (or the last served one when nobody waits),
        // never below its own.
        DropStaleTop(q);
        const double floor = q.tenants.empty() ? q.last_served_counter
                                               : q.tenants.front().counter;
        // Lifted to just below the floor: among equals, the tenant back
        // from idle goes first (one ulp of credit, no banked service).
        if (tq.counter < floor) tq.counter = std::nextafter(floor, -1e300);
        tq.in_heap = true;
        ++q.backlogged;
        PushTenant(q, r.tenant);
      }
      break;
    }
    case QueueOrder::kEdf:
      // Latest start time: a longer prompt must start earlier for the same
      // deadline, and is late (demote_late) as soon as it cannot make it.
      HeapPush(
          q.heap,
          Entry{r.deadline == kNever ? kNever : r.deadline - r.prefill_estimate,
                s.seq, slot});
      break;
    case QueueOrder::kFcfs:
      HeapPush(q.heap, Entry{0, s.seq, slot});
      break;
  }
}

void ModelQueue::Charge(ClassQueue& q, TenantId t, double weighted_tokens) {
  TenantQueue& tq = Tenant(q, t);
  tq.counter += weighted_tokens * InvWeight(t);
  if (tq.in_heap) PushTenant(q, t);
}

void ModelQueue::CorrectOutput(TenantId tenant, ClassId cls,
                               int64_t output_tokens_delta) {
  CHECK(cls < classes_.size());
  if (config_.classes[cls].order != QueueOrder::kFair) return;
  Charge(classes_[cls], tenant,
         config_.output_weight * static_cast<double>(output_tokens_delta));
}

// Removes live `slot` of class `cls` from the bookkeeping and returns it.
void ModelQueue::Take(ClassId cls, uint32_t slot, bool served, Request* out) {
  ClassQueue& q = classes_[cls];
  Slot& s = slots_[slot];
  *out = s.request;
  const TenantId t = s.request.tenant;
  --q.live;
  --size_;
  if (config_.classes[cls].order == QueueOrder::kFair) {
    TenantQueue& tq = q.by_tenant[t];
    --tq.live;
    if (served) {
      const double cost = config_.input_weight * s.request.input_tokens +
                          config_.output_weight *
                              std::max<int32_t>(0, s.request.max_output_tokens);
      tq.counter += cost * InvWeight(t);
      q.last_served_counter = tq.counter;
    }
    if (tq.live == 0) {
      // Idle: its item goes stale; dead entries are dropped with it.
      tq.in_heap = false;
      ++tq.version;
      --q.backlogged;
      if (tq.heap) tq.heap->clear();
      tq.has_first = false;
    } else if (served) {
      PushTenant(q, t);
    }
  }
  FreeSlot(slot);
}

void ModelQueue::CleanArrivals(ClassQueue& q) {
  while (!q.arrivals.empty() && !SlotIsLive(q.arrivals.front())) {
    q.arrivals.pop_front();
  }
}

bool ModelQueue::PopOldest(ClassId cls, Micros now, Request* out) {
  ClassQueue& q = classes_[cls];
  CleanArrivals(q);
  if (q.arrivals.empty()) return false;
  const uint32_t slot = q.arrivals.front().slot;
  q.arrivals.pop_front();
  Take(cls, slot, /*served=*/true, out);
  return true;
}

uint32_t ModelQueue::SettleHead(ClassId cls, Micros now) {
  ClassQueue& q = classes_[cls];
  switch (config_.classes[cls].order) {
    case QueueOrder::kFair: {
      DropStaleTop(q);
      CHECK(!q.tenants.empty());
      TenantQueue& tq = q.by_tenant[q.tenants.front().tenant];
      // Inline mode: the one entry since the tenant last went idle, so live.
      if (tq.has_first) return tq.first_slot;
      while (!SlotIsLive(tq.heap->front())) HeapPop(*tq.heap);
      return tq.heap->front().slot;
    }
    case QueueOrder::kEdf:
      if (config_.demote_late) {
        // Move requests that can no longer make their deadline behind the
        // ones that still can.
        while (!q.heap.empty()) {
          const Entry& e = q.heap.front();
          if (!SlotIsLive(e)) {
            HeapPop(q.heap);
            continue;
          }
          if (e.key == kNever || e.key - config_.late_margin >= now) break;
          q.late.push_back(Entry{0, e.seq, e.slot});
          HeapPop(q.heap);
        }
        if (q.heap.empty()) {
          while (!SlotIsLive(q.late.front())) q.late.pop_front();
          return q.late.front().slot;
        }
      }
      [[fallthrough]];
    case QueueOrder::kFcfs:
      while (!SlotIsLive(q.heap.front())) HeapPop(q.heap);
      return q.heap.front().slot;
  }
  return 0;
}

bool ModelQueue::PopFromClass(ClassId cls, Micros now, Request* out) {
  ClassQueue& q = classes_[cls];
  if (q.live == 0) return false;
  const uint32_t slot = SettleHead(cls, now);
  switch (config_.classes[cls].order) {
    case QueueOrder::kFair: {
      // The top item is consumed here; Take publishes the new counter.
      const TenantId t = q.tenants.front().tenant;
      std::pop_heap(q.tenants.begin(), q.tenants.end(), TenantItemAfter());
      q.tenants.pop_back();
      TenantQueue& tq = q.by_tenant[t];
      ++tq.version;
      if (tq.has_first) {
        tq.has_first = false;
      } else {
        HeapPop(*tq.heap);
      }
      break;
    }
    case QueueOrder::kEdf:
    case QueueOrder::kFcfs:
      if (!q.heap.empty() && q.heap.front().slot == slot &&
          SlotIsLive(q.heap.front())) {
        HeapPop(q.heap);
      } else {
        q.late.pop_front();
      }
      break;
  }
  Take(cls, slot, /*served=*/true, out);
  return true;
}

bool ModelQueue::Select(Micros now, ClassId* cls, bool* oldest) {
  if (size_ == 0) return false;
  const int n = static_cast<int>(classes_.size());
  *oldest = false;
  if (config_.aging == kNever) {
    for (int c = 0; c < n; ++c) {
      if (classes_[c].live > 0) {
        *cls = static_cast<ClassId>(c);
        return true;
      }
    }
    return false;
  }
  // Aging: a class's oldest request counts as one class more important per
  // `aging` waited, never above class 0; among equals the older goes first.
  // A class that wins by aging serves its oldest request, so the starved
  // request is the one promoted.
  int best = -1;
  Micros best_eff = 0;
  Micros best_oldest = 0;
  for (int c = 0; c < n; ++c) {
    ClassQueue& q = classes_[c];
    if (q.live == 0) continue;
    CleanArrivals(q);
    const Micros first = q.arrivals.front().key;
    const Micros eff = std::max<Micros>(0, c - (now - first) / config_.aging);
    if (best < 0 || eff < best_eff ||
        (eff == best_eff && first < best_oldest)) {
      best = c;
      best_eff = eff;
      best_oldest = first;
    }
  }
  *cls = static_cast<ClassId>(best);
  *oldest = best_eff < best;
  return true;
}

bool ModelQueue::Pop(Micros now, Request* out) {
  ClassId cls;
  bool oldest;
  if (!Select(now, &cls, &oldest)) return false;
  return oldest ? PopOldest(cls, now, out) : PopFromClass(cls, now, out);
}

bool ModelQueue::PopEligible(Micros now,
                             absl::FunctionRef<bool(const Request&)> eligible,
                             Request* out) {
  ClassId cls;
  bool oldest;
  if (!Select(now, &cls, &oldest)) return false;
  if (eligible(*Peek(now))) return Pop(now, out);
  if (oldest || config_.classes[cls].order != QueueOrder::kFair) return false;
  ClassQueue& q = classes_[cls];
  // Each backlogged tenant's next request, best (counter, tenant) first.
  const TenantItem* best = nullptr;
  uint32_t best_slot = 0;
  for (const TenantItem& item : q.tenants) {
    if (!Current(q, item)) continue;
    if (best != nullptr && !TenantItemAfter()(*best, item)) continue;
    TenantQueue& tq = q.by_tenant[item.tenant];
    uint32_t slot;
    if (tq.has_first) {
      slot = tq.first_slot;
    } else {
      while (!SlotIsLive(tq.heap->front())) HeapPop(*tq.heap);
      slot = tq.heap->front().slot;
    }
    if (!eligible(slots_[slot].request)) continue;
    best = &item;
    best_slot = slot;
  }
  if (best == nullptr) return false;
  TenantQueue& tq = q.by_tenant[best->tenant];
  ++tq.version;  // its item is consumed (left stale in the heap)
  if (tq.has_first) {
    tq.has_first = false;
  } else {
    HeapPop(*tq.heap);
  }
  Take(cls, best_slot, /*served=*/true, out);
  return true;
}

const Request* ModelQueue::Peek(Micros now) {
  ClassId cls;
  bool oldest;
  if (!Select(now, &cls, &oldest)) return nullptr;
  uint32_t slot;
  if (oldest) {
    CleanArrivals(classes_[cls]);
    slot = classes_[cls].arrivals.front().slot;
  } else {
    slot = SettleHead(cls, now);
  }
  return &slots_[slot].request;
}

void ModelQueue::ExpireTimedOut(Micros now, std::vector<Request>* expired) {
  for (size_t c = 0; c < classes_.size(); ++c) {
    const Micros timeout = config_.classes[c].timeout;
    if (timeout == kNever) continue;
    ClassQueue& q = classes_[c];
    for (;;) {
      CleanArrivals(q);
      if (q.arrivals.empty() || q.arrivals.front().key > now - timeout) break;
      const uint32_t slot = q.arrivals.front().slot;
      q.arrivals.pop_front();
      Request r;
      Take(static_cast<ClassId>(c), slot, /*served=*/false, &r);
      expired->push_back(r);
    }
  }
}

Micros ModelQueue::NextTimeout() const {
  Micros next = kNever;
  for (size_t c = 0; c < classes_.size(); ++c) {
    const Micros timeout = config_.classes[c].timeout;
    if (timeout == kNever) continue;
    for (const Entry& e : classes_[c].arrivals) {
      if (SlotIsLive(e)) {
        next = std::min(next, e.key + timeout);
        break;
      }
    }
  }
  return next;
}

int64_t ModelQueue::tenant_size(TenantId tenant) const {
  int64_t n = 0;
  for (const Slot& s : slots_) n += s.live && s.request.tenant == tenant;
  return n;
}

int64_t ModelQueue::tenant_class_size(ClassId cls, TenantId tenant) const {
  if (cls >= classes_.size()) return 0;
  const ClassQueue& q = classes_[cls];
  return tenant < q.by_tenant.size() ? q.by_tenant[tenant].live : 0;
}

int64_t ModelQueue::class_size(ClassId cls) const {
  return cls < classes_.size() ? classes_[cls].live : 0;
}

int64_t ModelQueue::AheadOf(ClassId cls, int64_t own_queued) const {
  int64_t n = 0;
  for (size_t c = 0; c < cls && c < classes_.size(); ++c) {
    n += classes_[c].live;
  }
  if (cls >= classes_.size()) return n;
  const ClassQueue& q = classes_[cls];
  if (config_.classes[cls].order != QueueOrder::kFair) return n + q.live;
  const int64_t own = own_queued;
  const int64_t others = q.backlogged - (own > 0 ? 1 : 0);
  return n + std::min(q.live, own + (own + 1) * others);
}

double ModelQueue::counter(ClassId cls, TenantId tenant) const {
  if (cls >= classes_.size()) return 0;
  const ClassQueue& q = classes_[cls];
  return tenant < q.by_tenant.size() ? q.by_tenant[tenant].counter : 0;
}

}  // namespace gpusched::serving
