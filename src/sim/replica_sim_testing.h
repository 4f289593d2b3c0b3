// Test helpers shared by the replica simulator tests.
#ifndef GPUSCHED_SIM_REPLICA_SIM_TESTING_H_
#define GPUSCHED_SIM_REPLICA_SIM_TESTING_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sim/replica_sim.h"

namespace gpusched::sim::simtest {

// A request of `prompt` tokens that will generate `output` tokens.
inline SimRequest MakeRequest(serving::RequestId id, int32_t prompt,
                              int32_t output, Micros arrival = 0) {
  SimRequest r;
  r.req.id = id;
  r.req.input_tokens = prompt;
  r.req.arrival = arrival;
  r.output_tokens = output;
  return r;
}

// Records every event and checks that each request gets at most one of each.
class Recorder : public ReplicaSimListener {
 public:
  void OnFirstToken(SimRequest* r, Micros t) override {
    EXPECT_EQ(first_[r]++, 0) << "second first token for " << r->req.id;
    EXPECT_EQ(r->first_token, t);
    EXPECT_EQ(finished_.count(r), 0u) << "first token after finish";
  }
  void OnFinished(SimRequest* r, Micros t) override {
    EXPECT_EQ(finished_[r]++, 0) << "finished twice: " << r->req.id;
    EXPECT_EQ(r->finished, t);
    if (!r->rejected_too_long) {
      EXPECT_EQ(first_[r], 1) << "finished without a first token";
      EXPECT_LE(r->first_token, t);
    }
    order_.push_back(r->req.id);
  }
  int finished(const SimRequest* r) const {
    auto it = finished_.find(r);
    return it == finished_.end() ? 0 : it->second;
  }
  int total_finished() const { return static_cast<int>(order_.size()); }
  const std::vector<serving::RequestId>& order() const { return order_; }

 private:
  std::map<const SimRequest*, int> first_;
  std::map<const SimRequest*, int> finished_;
  std::vector<serving::RequestId> order_;
};

}  // namespace gpusched::sim::simtest

#endif  // GPUSCHED_SIM_REPLICA_SIM_TESTING_H_
