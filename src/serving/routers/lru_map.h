// LruMap: a bounded map from a 64-bit key to a ReplicaId that forgets the
// least recently written key first. Used by prefix-affinity (block hash ->
// replica) and session-affinity (session -> replica).
//
// Nodes live in one vector linked into a recency list by index, so once the
// map is full a write recycles the evicted node and allocates nothing (the
// hash map keeps its buckets). Reads do not change recency: the routers call
// Get in Pick and Put in OnDispatched, so only dispatches keep a key alive.
// Not thread-safe.
#ifndef GPUSCHED_SERVING_ROUTERS_LRU_MAP_H_
#define GPUSCHED_SERVING_ROUTERS_LRU_MAP_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "serving/request.h"

namespace gpusched::serving::internal {

class LruMap {
 public:
  // `capacity` > 0 (MakeRouter validates it); at most 2^31 entries are kept.
  explicit LruMap(int64_t capacity)
      : capacity_(std::min<int64_t>(capacity, int64_t{1} << 31)) {}

  std::optional<ReplicaId> Get(uint64_t key) const {
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    return nodes_[it->second].value;
  }

  // Inserts or overwrites `key` and makes it the most recent; evicts the
  // least recent key when full.
  void Put(uint64_t key, ReplicaId value) {
    if (auto it = index_.find(key); it != index_.end()) {
      const uint32_t n = it->second;
      nodes_[n].value = value;
      Unlink(n);
      PushFront(n);
      return;
    }
    uint32_t n;
    if (static_cast<int64_t>(nodes_.size()) < capacity_) {
      n = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back({});
    } else {
      n = tail_;
      Unlink(n);
      index_.erase(nodes_[n].key);
    }
    index_.emplace(key, n);
    nodes_[n].key = key;
    nodes_[n].value = value;
    PushFront(n);
  }

  int64_t size() const { return static_cast<int64_t>(index_.size()); }
  int64_t capacity() const { return capacity_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint64_t key = 0;
    ReplicaId value = 0;
    uint32_t prev = kNone;
    uint32_t next = kNone;
  };

  void Unlink(uint32_t n) {
    Node& node = nodes_[n];
    if (node.prev != kNone) {
      nodes_[node.prev].next = node.next;
    } else {
      head_ = node.next;
    }
    if (node.next != kNone) {
      nodes_[node.next].prev = node.prev;
    } else {
      tail_ = node.prev;
    }
    node.prev = node.next = kNone;
  }

  void PushFront(uint32_t n) {
    nodes_[n].prev = kNone;
    nodes_[n].next = head_;
    if (head_ != kNone) nodes_[head_].prev = n;
    head_ = n;
    if (tail_ == kNone) tail_ = n;
  }

  int64_t capacity_;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  std::vector<Node> nodes_;
  uint32_t head_ = kNone;  // most recent
  uint32_t tail_ = kNone;  // least recent
};

}  // namespace gpusched::serving::internal

#endif  // GPUSCHED_SERVING_ROUTERS_LRU_MAP_H_
