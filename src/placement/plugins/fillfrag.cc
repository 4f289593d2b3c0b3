// fillfrag: gpusched's own placement policy.
//
// FGD (fgd.cc) scores a node by how much its fragmentation F grows: free GPU
// milli that a typical pod shape could not use. Four things it leaves on
// the table, which fillfrag takes:
//  1. Capacity, not just feasibility. FGD asks "can the node host one more
//     pod of shape m?"; a node with 8 idle GPUs and CPU for one more pod
//     counts as unfragmented. fillfrag adds a fill term: for each shape m,
//     the GPU milli left over after packing as many copies of m as the
//     node's GPUs, CPU and host memory allow. CPU- or memory-starved GPUs
//     show up as fragmentation before they are stranded.
//     And a combination term: on each GPU, the free milli that no
//     combination of the typical one-GPU sizes can fill (190 free when the
//     smallest share is 230 is lost whatever arrives; 300 free is not when
//     shares of 160 and 140 exist).
//  2. Resolution. FGD's integer sigmoid score lumps together placements
//     ~40 milli apart and breaks the tie by node order. fillfrag quantises
//     the combined gradient at a finer step (kQuantum) and keeps the
//     node-order tie-break, which packs equally good placements together.
//  3. Scarce node types. In a heterogeneous cluster FGD's measure counts a
//     node's free milli as fragmentation for every shape that cannot use
//     the node's GPU model, so it fills the small pools (T4, P100, V100)
//     first and the pods constrained to them fail early. fillfrag adds a
//     reserve term: per node type (same spec), the workload's demand
//     constrained to its GPU model, still to come, over the type's free
//     milli (its pressure); free milli on a pressed type is worth keeping,
//     so pods that may use several types go to the least pressed.
//  4. Adaptivity. Given no target workload (the live case), it learns the
//     typical shapes online from every pod offered to it (placed or not;
//     counted by shape, so memory stays bounded) and re-derives them as the
//     mix changes (epoch() moves, so cached scores are dropped).
// The GPU within the node is chosen jointly with the node: the node's score
// is its best GPU's score, and that GPU is the one used. Pressures are
// re-derived after placements (Observe) when one moved by kPressureStep,
// which moves epoch() and drops cached scores; a release is seen at the
// next placement.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <vector>

#include "placement/plugins/frag_gradient.h"
#include "placement/plugins/plugins.h"

namespace gpusched::placement {
namespace {

// Weight of the fill term against FGD's F: kFillWeight normally, rising to
// kScarceCpuFillWeight as the workload's CPU per GPU approaches the
// cluster's (CPU pressure from kPressureLow to kPressureHigh), because then
// GPUs stranded for lack of CPU dominate what is lost. The score quantum is
// in GPU milli of combined F. Chosen on the Alibaba trace family, seeds
// 42-51 (docs/placement.md has the figures and the command that reruns it).
constexpr double kFillWeight = 0.1;
constexpr double kScarceCpuFillWeight = 0.5;
constexpr double kPressureLow = 0.95;
constexpr double kPressureHigh = 1.0;
constexpr double kQuantum = 20;
// Weight of the combination term (GPU milli no mix of typical sizes fills).
constexpr double kComboWeight = 1.0;
// Model scarcity: weight of the reserve term, and the change in a model's
// pressure that re-derives the pressures (and moves epoch(), dropping
// cached scores), so that small drifts do not.
constexpr double kReserveWeight = 2.0;
constexpr double kPressureStep = 0.05;
// Online learning: re-derive the target workload after this many offered
// pods, then at doubling intervals up to kMaxRelearnInterval.
constexpr double kFirstRelearn = 16;
constexpr double kMaxRelearnInterval = 4096;

class FillFragPolicy : public FragGradientPolicy {
 public:
  explicit FillFragPolicy(TargetWorkload workload)
      : learn_(workload.empty()),
        workload_(workload),
        fgd_(std::move(workload)) {
    DeriveComboFill();
  }

  absl::string_view name() const override { return "fillfrag"; }
  uint64_t epoch() const override { return epoch_; }

  double Score(const PodRequest& pod, const ClusterState& cs,
               int node) override {
    if (weighted_for_ != std::make_pair(epoch_, cs.cluster_epoch())) {
      fill_weight_ = FillWeight(cs);
      weighted_for_ = {epoch_, cs.cluster_epoch()};
    }
    return FragGradientPolicy::Score(pod, cs, node);
  }

  void Observe(const PodRequest& pod, const Allocation& alloc,
               const ClusterState& cs) override {
    UpdatePressure(cs);
  }

  void Offered(const PodRequest& pod) override {
    if (!learn_) return;
    seen_.Add(pod);
    if (seen_.total() < next_relearn_) return;
    next_relearn_ += std::min(next_relearn_, kMaxRelearnInterval);
    workload_ = seen_.Typical();
    fgd_ = Fragmentation(workload_);
    DeriveComboFill();
    shares_for_ = UINT64_MAX;
    ++epoch_;
  }

 protected:
  // See kFillWeight. Pressure = the workload's CPU per GPU milli over the
  // cluster's.
  double FillWeight(const ClusterState& cs) const {
    double cpu = 0, gpu = 0;
    for (const WorkloadShape& s : workload_) {
      cpu += s.weight * static_cast<double>(s.pod.cpu_milli);
      gpu += s.weight * static_cast<double>(s.pod.TotalGpuMilli());
    }
    if (gpu <= 0 || cs.total_gpu_milli() <= 0) return kFillWeight;
    const double pressure =
        (cpu / gpu) / (static_cast<double>(cs.total_cpu_milli()) /
                       static_cast<double>(cs.total_gpu_milli()));
    const double t = std::clamp(
        (pressure - kPressureLow) / (kPressureHigh - kPressureLow), 0.0, 1.0);
    return kFillWeight + t * (kScarceCpuFillWeight - kFillWeight);
  }

  // GPU milli the node could not give to copies of each typical shape,
  // packing as many copies as GPUs, CPU and memory allow.
  double Fill(const FragNode& n) const {
    const int idle = n.IdleGpus();
    return SumOverShapes(workload_, n, [&](const PodRequest& m, double r) {
      int64_t copies = 0;
      if (m.gpu_milli >= inventory::kMilliPerGpu) {
        copies = idle / m.gpus;
      } else {
        for (int i = 0; i < n.num_gpus; ++i) copies += n.free[i] / m.gpu_milli;
      }
      if (m.cpu_milli > 0) copies = std::min(copies, n.cpu_free / m.cpu_milli);
      if (m.memory_mib > 0) {
        copies = std::min(copies, n.memory_free_mib / m.memory_mib);
      }
      return r - static_cast<double>(copies) * m.TotalGpuMilli();
    });
  }

  // combo_fill_[c]: the most of c free milli that one-GPU shapes of the
  // workload can fill together (unbounded knapsack over their sizes).
  void DeriveComboFill() {
    std::vector<int> sizes;
    for (const WorkloadShape& s : workload_) {
      if (s.pod.gpus == 1 && s.pod.gpu_milli > 0)
        sizes.push_back(s.pod.gpu_milli);
    }
    combo_fill_[0] = 0;
    for (int c = 1; c <= inventory::kMilliPerGpu; ++c) {
      int best = 0;
      for (int z : sizes) {
        if (z <= c) best = std::max(best, z + combo_fill_[c - z]);
      }
      combo_fill_[c] = best;
    }
  }

  double Combo(const FragNode& n) const {
    int64_t unfillable = 0;
    for (int i = 0; i < n.num_gpus; ++i) {
      unfillable += n.free[i] - combo_fill_[n.free[i]];
    }
    return static_cast<double>(unfillable);
  }

  double Frag(const FragNode& n) override {
    return fgd_.Of(n) + fill_weight_ * Fill(n) + kComboWeight * Combo(n) -
           Reserve(n);
  }

  // Free GPU milli on a node type (ClusterState::node_spec_id) that pods
  // constrained to its GPU model will need is worth keeping: the node's
  // free milli times its type's pressure (that demand still to come over
  // the type's free milli). Every node of a type has the same pressure, so
  // this only steers pods that may use several types to the least pressed.
  double Reserve(const FragNode& n) const {
    if (n.spec_id < 0 || n.spec_id >= static_cast<int>(pressure_.size())) {
      return 0;
    }
    return kReserveWeight * pressure_[n.spec_id] *
           static_cast<double>(n.TotalFree());
  }

  // share_[t]: the part of the workload's GPU demand that is constrained to
  // some GPU models, and of those type t's; a shape's demand is split over
  // the types of its models by their GPUs. Only model constraints count:
  // treating the shapes that fit few types by GPU count, CPU or memory the
  // same way (an 8-GPU pod fits only 8-GPU nodes) made the multi-GPU and
  // CPU-heavy mixes worse (docs/placement.md).
  void DeriveShares(const ClusterState& cs) {
    const int types = cs.num_node_specs();
    std::vector<double> capacity(types, 0);
    std::vector<int> model(types, -1);
    for (int node = 0; node < cs.num_nodes(); ++node) {
      const int t = cs.node_spec_id(node);
      capacity[t] += cs.spec(node).gpu_count;
      model[t] = cs.node_model_id(node);
    }
    auto fits = [&](const PodRequest& m, int t) {
      return capacity[t] > 0 && m.ModelAllowed(model[t]);
    };
    share_.assign(types, 0);
    double total = 0;
    for (const WorkloadShape& s : workload_) {
      const double demand =
          s.weight * static_cast<double>(s.pod.TotalGpuMilli());
      total += demand;
      if (demand <= 0 || s.pod.any_model) continue;
      double fit = 0;
      for (int t = 0; t < types; ++t) {
        if (fits(s.pod, t)) fit += capacity[t];
      }
      for (int t = 0; t < types; ++t) {
        if (fits(s.pod, t)) share_[t] += demand * capacity[t] / fit;
      }
    }
    for (double& x : share_) x = total > 0 ? x / total : 0;
    shares_for_ = cs.cluster_epoch();
  }

  void UpdatePressure(const ClusterState& cs) {
    if (shares_for_ != cs.cluster_epoch()) DeriveShares(cs);
    const double free = static_cast<double>(cs.free_gpu_milli());
    std::vector<double>& p = next_pressure_;  // reused: called per placement
    p.assign(share_.size(), 0);
    bool moved = false;
    for (size_t t = 0; t < p.size(); ++t) {
      const double own =
          static_cast<double>(cs.free_gpu_milli_of_spec(static_cast<int>(t)));
      p[t] = share_[t] <= 0 ? 0 : own > 0 ? share_[t] * free / own : 0;
      const double was = t < pressure_.size() ? pressure_[t] : 0;
      moved = moved || std::abs(p[t] - was) >= kPressureStep;
    }
    if (!moved) return;
    pressure_.swap(p);
    ++epoch_;
  }
  // Quantised decrease of the combined fragmentation.
  double Gain(double before, double after) const override {
    return std::floor((before - after) / kQuantum);
  }

 private:
  const bool learn_;
  TargetWorkload workload_;
  Fragmentation fgd_;
  ShapeCounter seen_;  // every pod offered, by shape
  std::array<int, inventory::kMilliPerGpu + 1> combo_fill_{};
  double next_relearn_ = kFirstRelearn;
  uint64_t epoch_ = 0;
  double fill_weight_ = kFillWeight;
  std::vector<double> share_;          // by node type (DeriveShares)
  std::vector<double> pressure_;       // by node type (UpdatePressure)
  std::vector<double> next_pressure_;  // UpdatePressure's scratch
  uint64_t shares_for_ = UINT64_MAX;   // cluster epoch share_ was derived for
  // (epoch_, cluster epoch) fill_weight_ was derived for.
  std::pair<uint64_t, uint64_t> weighted_for_{UINT64_MAX, UINT64_MAX};
};

}  // namespace

std::unique_ptr<ScorePlugin> NewFillFragPolicy(const PolicyOptions& options) {
  return std::make_unique<FillFragPolicy>(options.workload);
}

}  // namespace gpusched::placement
