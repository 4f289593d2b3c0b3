// ModelShape and ServingGpu: the few facts about a model and a GPU that the
// latency fitter needs to turn profiles into a replica's KV-cache capacity
// and (for Vidur's per-operator profiles) a roofline attention estimate.
//
// Both tables are built-in, immutable and safe to read from any thread.
// Model shapes are copied from each model's public config.json (the Hugging
// Face repository is named beside each entry in model_catalog.cc). GPU figures
// for GPUs in gpusched's catalog (inventory/gpu_catalog.cc) are copied from
// there, and a unit test checks they agree; serving/ does not link
// inventory/ (DESIGN.md section 2: common <- serving).
#ifndef GPUSCHED_SERVING_MODEL_CATALOG_H_
#define GPUSCHED_SERVING_MODEL_CATALOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace gpusched::serving {

// A dense (or MoE, counted by total parameters) decoder-only transformer.
struct ModelShape {
  std::string name;         // gpusched's short name, e.g. "llama-2-7b"
  double params_b = 0;      // parameters, billions (all experts for MoE)
  int layers = 0;           // num_hidden_layers
  int hidden = 0;           // hidden_size
  int heads = 0;            // num_attention_heads
  int kv_heads = 0;         // num_key_value_heads (== heads without GQA)
  int head_dim = 0;         // hidden / heads for every model here
  int dtype_bytes = 2;      // fp16 / bf16 weights and KV cache
  std::string config_repo;  // where the shape comes from (Hugging Face repo)

  // K and V of one token in every layer, across all `tensor_parallel`
  // shards. When tensor_parallel exceeds kv_heads, vLLM replicates KV heads
  // so each shard holds one; the replicas are counted.
  int64_t KvBytesPerToken(int tensor_parallel = 1) const;
  int64_t WeightBytes() const;
};

// What the fitter needs of a GPU.
struct ServingGpu {
  std::string name;  // gpusched catalog name where the catalog has the GPU
  bool in_catalog = false;
  int64_t memory_mib = 0;         // as nvidia-smi reports it
  int memory_bandwidth_gbps = 0;  // GB/s; 0 = not needed, not recorded
  double fp16_dense_tflops = 0;   // tensor-core peak without sparsity;
                                  // 0 = not needed, not recorded
};

// The vLLM-like memory budget of one replica.
struct KvBudget {
  double gpu_memory_utilization = 0.9;               // vLLM's default
  int64_t reserve_bytes_per_gpu = int64_t{1} << 30;  // activations, CUDA
                                                     // graphs, NCCL buffers
};

const std::vector<ModelShape>& BuiltinModelShapes();
const std::vector<ServingGpu>& BuiltinServingGpus();

// Case-insensitive; nullptr if unknown.
const ModelShape* FindModelShape(absl::string_view name);
const ServingGpu* FindServingGpu(absl::string_view name);

// Tokens of KV cache one replica holds:
//   (memory * tp * utilization - weights - reserve * tp) / KvBytesPerToken(tp)
// rounded down; 0 when the weights do not fit.
int64_t KvCapacityTokens(const ModelShape& model, int64_t gpu_memory_mib,
                         int tensor_parallel, const KvBudget& budget = {});

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_MODEL_CATALOG_H_
