#include "serving/model_catalog.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace gpusched::serving {
namespace {

ModelShape Shape(const char* name, double params_b, int layers, int hidden,
                 int heads, int kv_heads, const char* repo) {
  ModelShape m;
  m.name = name;
  m.params_b = params_b;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = hidden / heads;
  m.config_repo = repo;
  return m;
}

std::vector<ModelShape> MakeShapes() {
  // name, params (B), num_hidden_layers, hidden_size, num_attention_heads,
  // num_key_value_heads: from config.json of the Hugging Face repository
  // named last (parameter counts from the model cards / safetensors index).
  // Chat and instruct fine-tunes share their base model's shape.
  return {
      Shape("baichuan-7b", 7.00, 32, 4096, 32, 32, "baichuan-inc/Baichuan-7B"),
      Shape("baichuan2-7b", 7.51, 32, 4096, 32, 32,
            "baichuan-inc/Baichuan2-7B-Chat"),
      Shape("baichuan2-13b", 13.90, 40, 5120, 40, 40,
            "baichuan-inc/Baichuan2-13B-Chat"),
      Shape("bloom-176b", 176.25, 70, 14336, 112, 112, "bigscience/bloom"),
      Shape("internlm2.5-7b", 7.74, 32, 4096, 32, 8,
            "internlm/internlm2_5-7b-chat"),
      Shape("llama-7b", 6.74, 32, 4096, 32, 32, "huggyllama/llama-7b"),
      Shape("llama-2-7b", 6.74, 32, 4096, 32, 32, "meta-llama/Llama-2-7b-hf"),
      Shape("llama-2-13b", 13.02, 40, 5120, 40, 40,
            "meta-llama/Llama-2-13b-hf"),
      Shape("llama-2-70b", 68.98, 80, 8192, 64, 8, "meta-llama/Llama-2-70b-hf"),
      Shape("llama-3-8b", 8.03, 32, 4096, 32, 8, "meta-llama/Meta-Llama-3-8B"),
      Shape("llama-3-70b", 70.55, 80, 8192, 64, 8,
            "meta-llama/Meta-Llama-3-70B"),
      // The language model of LLaVA-1.5-13B is Vicuna-13B (Llama-2 shape);
      // the CLIP ViT-L/14 tower adds 0.3B parameters.
      Shape("llava-1.5-13b", 13.35, 40, 5120, 40, 40,
            "llava-hf/llava-1.5-13b-hf"),
      Shape("opt-13b", 12.85, 40, 5120, 40, 40, "facebook/opt-13b"),
      Shape("opt-66b", 65.70, 64, 9216, 72, 72, "facebook/opt-66b"),
      Shape("qwen-1.8b", 1.84, 24, 2048, 16, 16, "Qwen/Qwen-1_8B"),
      Shape("qwen-7b", 7.72, 32, 4096, 32, 32, "Qwen/Qwen-7B"),
      Shape("qwen-14b", 14.17, 40, 5120, 40, 40, "Qwen/Qwen-14B"),
      Shape("qwen1.5-4b", 3.95, 40, 2560, 20, 20, "Qwen/Qwen1.5-4B"),
      Shape("qwen1.5-7b", 7.72, 32, 4096, 32, 32, "Qwen/Qwen1.5-7B"),
      Shape("qwen1.5-14b", 14.17, 40, 5120, 40, 40, "Qwen/Qwen1.5-14B"),
      // 60 routed experts + 4 shared; all are resident, so weights count
      // every expert.
      Shape("qwen1.5-moe-a2.7b", 14.32, 24, 2048, 16, 16,
            "Qwen/Qwen1.5-MoE-A2.7B"),
      Shape("qwen2.5-7b", 7.62, 28, 3584, 28, 4, "Qwen/Qwen2.5-7B"),
      Shape("yi-6b", 6.06, 32, 4096, 32, 4, "01-ai/Yi-6B"),
      Shape("yi-9b", 8.83, 48, 4096, 32, 4, "01-ai/Yi-9B"),
      Shape("yi-1.5-6b", 6.06, 32, 4096, 32, 4, "01-ai/Yi-1.5-6B-Chat"),
      Shape("yi-1.5-9b", 8.83, 48, 4096, 32, 4, "01-ai/Yi-1.5-9B-Chat"),
  };
}

ServingGpu Gpu(const char* name, bool in_catalog, int64_t memory_mib,
               int bandwidth_gbps, double tflops) {
  ServingGpu g;
  g.name = name;
  g.in_catalog = in_catalog;
  g.memory_mib = memory_mib;
  g.memory_bandwidth_gbps = bandwidth_gbps;
  g.fp16_dense_tflops = tflops;
  return g;
}

std::vector<ServingGpu> MakeGpus() {
  // Memory and bandwidth of catalog GPUs are inventory/gpu_catalog.cc's
  // (model_catalog_test checks). Dense FP16 tensor-core peaks are NVIDIA's
  // datasheet figures without sparsity: A10 125, A100 312, H100 SXM 989.
  return {
      Gpu("A10-24GB", true, 23028, 600, 125),
      Gpu("A100-80GB", true, 81920, 2039, 312),
      Gpu("H100-SXM-80GB", true, 81559, 3350, 989),
      // Not in gpusched's catalog (export variants sold in China); the names
      // are the profiles'. H800 SXM5: the H100 SXM die and memory with
      // NVLink cut to 400 GB/s. H20: 96 GB HBM3, 4.0 TB/s, 148 TFLOPS FP16;
      // 97871 MiB is the nvidia-smi figure commonly reported (UNCONFIRMED
      // here).
      Gpu("H800", false, 81559, 3350, 989),
      Gpu("H20", false, 97871, 4000, 148),
  };
}

}  // namespace

int64_t ModelShape::KvBytesPerToken(int tensor_parallel) const {
  const int tp = std::max(tensor_parallel, 1);
  const int64_t stored_kv_heads = std::max(kv_heads, tp);
  return int64_t{2} * layers * stored_kv_heads * head_dim * dtype_bytes;
}

int64_t ModelShape::WeightBytes() const {
  return static_cast<int64_t>(params_b * 1e9) * dtype_bytes;
}

const std::vector<ModelShape>& BuiltinModelShapes() {
  static const auto* const kShapes = new std::vector<ModelShape>(MakeShapes());
  return *kShapes;
}

const std::vector<ServingGpu>& BuiltinServingGpus() {
  static const auto* const kGpus = new std::vector<ServingGpu>(MakeGpus());
  return *kGpus;
}

const ModelShape* FindModelShape(absl::string_view name) {
  for (const ModelShape& m : BuiltinModelShapes()) {
    if (absl::EqualsIgnoreCase(m.name, name)) return &m;
  }
  return nullptr;
}

const ServingGpu* FindServingGpu(absl::string_view name) {
  for (const ServingGpu& g : BuiltinServingGpus()) {
    if (absl::EqualsIgnoreCase(g.name, name)) return &g;
  }
  return nullptr;
}

int64_t KvCapacityTokens(const ModelShape& model, int64_t gpu_memory_mib,
                         int tensor_parallel, const KvBudget& budget) {
  const int tp = std::max(tensor_parallel, 1);
  const double usable = static_cast<double>(gpu_memory_mib) * 1024 * 1024 * tp *
                            budget.gpu_memory_utilization -
                        static_cast<double>(model.WeightBytes()) -
                        static_cast<double>(budget.reserve_bytes_per_gpu) * tp;
  const int64_t per_token = model.KvBytesPerToken(tp);
  if (usable <= 0 || per_token <= 0) return 0;
  return static_cast<int64_t>(usable / static_cast<double>(per_token));
}

}  // namespace gpusched::serving
