#include "main/engine_cmd.h"

#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "engine/engine_server.h"
#include "serving/latency_model.h"

namespace gpusched {
namespace {

struct EngineFlags {
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 1;
  std::string mode = "cpu";
  std::string profile_model;
  std::string gpu = "A100-80GB";
  int tensor_parallel = 1;
  engine::EngineOptions options;
  double drain_s = 30;
  double load_s = 0;
};

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gpusched engine: %s\n", msg.c_str());
  return 2;
}

int RunEngine(EngineFlags flags) {
  if (flags.mode == "profile") {
    const std::string model =
        flags.profile_model.empty() ? flags.options.model : flags.profile_model;
    auto lm = serving::FindLatencyModel(serving::BuiltinLatencyModels(), model,
                                        flags.gpu, flags.tensor_parallel);
    if (!lm.ok()) return Fail(std::string(lm.status().message()));
    flags.options.profile = *lm;
  } else if (flags.mode != "cpu") {
    return Fail("--mode must be cpu or profile, got '" + flags.mode + "'");
  }
  if (flags.port < 0 || flags.port > 65535) {
    return Fail("--port must be 0..65535");
  }
  // SIGTERM and SIGINT are taken synchronously below; block them before any
  // thread starts so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // The model load: nothing listens yet (readiness probes are refused),
  // and SIGTERM or SIGINT ends it.
  if (flags.load_s > 0) {
    const long long ns = static_cast<long long>(flags.load_s * 1e9);
    timespec ts{static_cast<time_t>(ns / 1000000000), ns % 1000000000};
    if (sigtimedwait(&signals, nullptr, &ts) > 0) return 0;
  }
  net::HttpServerOptions http;
  http.address = flags.host;
  http.port = static_cast<uint16_t>(flags.port);
  http.threads = flags.threads;
  auto server = engine::EngineServer::Start(flags.options, http);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  // The readiness line: launchers and tests read the port from it.
  std::printf("gpusched engine: model %s (%s) listening on http://%s:%d\n",
              flags.options.model.c_str(), flags.mode.c_str(),
              flags.host.c_str(), (*server)->port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "gpusched engine: signal %d, draining\n", sig);
  (*server)->Shutdown(
      std::chrono::milliseconds(static_cast<int64_t>(flags.drain_s * 1000)));
  return 0;
}

}  // namespace

void AddEngineCommand(CLI::App& app) {
  auto flags = std::make_shared<EngineFlags>();
  CLI::App* cmd = app.add_subcommand(
      "engine",
      "Run the built-in reference engine (OpenAI-compatible and KServe v2, "
      "continuous batching, KV and prefix caches, CPU compute or a GPU "
      "latency profile)");
  engine::EngineOptions& o = flags->options;
  cmd->add_option("--host", flags->host, "listen address")
      ->capture_default_str();
  cmd->add_option("--port", flags->port, "listen port (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--model", o.model, "the model name it serves")
      ->capture_default_str();
  cmd->add_option("--mode", flags->mode,
                  "cpu (real compute) or profile (latencies of --profile-model "
                  "on --gpu, from `gpusched profiles list`)")
      ->capture_default_str();
  cmd->add_option("--profile-model", flags->profile_model,
                  "latency profile model (default: --model)");
  cmd->add_option("--gpu", flags->gpu, "latency profile GPU")
      ->capture_default_str();
  cmd->add_option("--tensor-parallel", flags->tensor_parallel,
                  "latency profile TP degree")
      ->capture_default_str();
  cmd->add_option("--hidden", o.hidden, "model width")->capture_default_str();
  cmd->add_option("--layers", o.layers, "dense layers")->capture_default_str();
  cmd->add_option("--vocab", o.vocab, "vocabulary size")->capture_default_str();
  cmd->add_option("--seed", o.seed, "weights seed")->capture_default_str();
  cmd->add_option("--kv-blocks", o.kv_blocks, "KV-cache blocks")
      ->capture_default_str();
  cmd->add_option("--block-tokens", o.block_tokens, "tokens per KV block")
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", o.max_num_seqs, "running batch limit")
      ->capture_default_str();
  cmd->add_option("--max-model-len", o.max_model_len,
                  "prompt + output token limit")
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads, "HTTP I/O threads")
      ->capture_default_str();
  cmd->add_option("--load-seconds", flags->load_s,
                  "how long the engine loads before it listens (a model's "
                  "weight load; 0..3600)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--drain-seconds", flags->drain_s,
                  "on SIGTERM, how long in-flight requests may finish")
      ->capture_default_str();
  cmd->callback([flags] {
    const int rc = RunEngine(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gpusched
