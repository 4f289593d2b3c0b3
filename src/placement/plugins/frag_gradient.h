// FragGradientPolicy: the common shape of fragmentation-descent policies
// (fgd, fillfrag). For each way to put the pod on the node — each fitting
// GPU for a fraction; the idle GPUs for whole GPUs (which ones does not
// change a per-node measure); no GPU for CPU-only pods — it measures the
// node's fragmentation before and after with Frag() and scores the
// placement with Gain(before, after). The node scores its best placement,
// and SelectGpus takes that placement's GPU (the lowest index on a tie), so
// node and GPU are chosen jointly.
#ifndef GPUSCHED_PLACEMENT_PLUGINS_FRAG_GRADIENT_H_
#define GPUSCHED_PLACEMENT_PLUGINS_FRAG_GRADIENT_H_

#include <vector>

#include "placement/fragmentation.h"
#include "placement/framework.h"

namespace gpusched::placement {

class FragGradientPolicy : public ScorePlugin {
 public:
  double Score(const PodRequest& pod, const ClusterState& cs,
               int node) override;
  std::vector<GpuShare> SelectGpus(const PodRequest& pod,
                                   const ClusterState& cs, int node,
                                   Rng& rng) override;

 protected:
  // The node's fragmentation (GPU milli); lower is better.
  virtual double Frag(const FragNode& n) = 0;
  // Score of going from `before` to `after`; higher is better.
  virtual double Gain(double before, double after) const = 0;

 private:
  // Best score over placements of `pod` on `node`; `*gpu` = the chosen GPU
  // for a fraction, else -1.
  double Best(const PodRequest& pod, const ClusterState& cs, int node,
              int* gpu);
};

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_PLUGINS_FRAG_GRADIENT_H_
