// EngineServer: `gpusched engine`, the built-in reference engine process.
//
// Serves EngineCore over HTTP with the endpoints gpusched routes to:
// OpenAI-compatible /v1/completions and /v1/chat/completions (SSE streaming
// chunk by chunk as tokens are produced, or one JSON answer), /v1/embeddings,
// /v1/models; KServe v2 /v2/health/{live,ready}, /v2/models/{name}[/ready]
// metadata and POST /v2/models/{name}/infer (text in, embedding out);
// /health; and /metrics with vLLM's metric names (vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:gpu_cache_usage_perc, prefix-cache hits
// and queries, token counters), so gpusched reads it as it reads vLLM.
//
// Threads: HTTP I/O threads parse and answer; one engine thread owns the
// EngineCore and runs iterations while there is work (in profile mode it
// waits each iteration's modeled time). Both are owned and joined.
#ifndef GPUSCHED_ENGINE_ENGINE_SERVER_H_
#define GPUSCHED_ENGINE_ENGINE_SERVER_H_

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/engine_core.h"
#include "net/http_server.h"

namespace gpusched::engine {

namespace http = boost::beast::http;

class EngineServer {
 public:
  static absl::StatusOr<std::unique_ptr<EngineServer>> Start(
      const EngineOptions& engine, const net::HttpServerOptions& http);
  ~EngineServer();

  uint16_t port() const;
  // Stops accepting, lets in-flight requests finish (up to `drain`), stops
  // the engine thread.
  void Shutdown(std::chrono::milliseconds drain);

  struct State;

 private:
  EngineServer() = default;
  std::shared_ptr<State> state_;
  std::unique_ptr<net::HttpServer> http_;
};

}  // namespace gpusched::engine

#endif  // GPUSCHED_ENGINE_ENGINE_SERVER_H_
