// fgd: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23), as the
// authors' simulator does it: s = int(100 * sigmoid((F_before - F_after) /
// 1000)) with F the FGD measure (fragmentation.h), the node's best s over
// its GPUs, the GPU the lowest index reaching it. Memory is ignored by the
// measure, as in the paper.
#include <cmath>

#include "placement/plugins/frag_gradient.h"
#include "placement/plugins/plugins.h"

namespace gpusched::placement {
namespace {

class FgdPolicy : public FragGradientPolicy {
 public:
  explicit FgdPolicy(TargetWorkload workload) : frag_(std::move(workload)) {}
  absl::string_view name() const override { return "fgd"; }

 protected:
  double Frag(const FragNode& n) override { return frag_.Of(n); }
  double Gain(double before, double after) const override {
    return std::trunc(100.0 / (1.0 + std::exp(-(before - after) / 1000.0)));
  }

 private:
  Fragmentation frag_;
};

}  // namespace

std::unique_ptr<ScorePlugin> NewFgdPolicy(const PolicyOptions& options) {
  return std::make_unique<FgdPolicy>(options.workload);
}

}  // namespace gpusched::placement
