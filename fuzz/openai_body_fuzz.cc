// The gateway's OpenAI request scanner (ScanOpenAi), the usage reader of
// engine answers (UsageTokens), and the SSE relay of streamed answers with
// the continuation body of a migrated stream (StreamResume): a request body
// from a client and the bytes an engine streams back, cut into chunks
// where the fuzzer chooses.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>

#include "fuzz/fuzz_input.h"
#include "gateway/protocol.h"
#include "gateway/stream_resume.h"

using gpusched::fuzz::Require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool chat = in.ConsumeBool();
  const std::string body = in.ConsumeRandomLengthString(1 << 16);

  gpusched::gateway::OpenAiFields f;
  if (gpusched::gateway::ScanOpenAi(body, &f)) {
    Require(!f.model || f.object, "a model field outside an object");
  }
  const int32_t usage =
      gpusched::gateway::UsageTokens(body, "\"completion_tokens\":");
  Require(usage >= -1, "UsageTokens below -1");

  gpusched::gateway::StreamResume resume(chat);
  std::string sent;
  while (in.remaining_bytes() > 0) {
    const std::string chunk = in.ConsumeRandomLengthString(4096);
    sent += resume.Relay(chunk);
    if (in.ConsumeBool()) {
      auto next = resume.ContinuationBody(body);
      if (next.ok()) {
        Require(!next->empty(), "an empty continuation body");
        resume.BeginContinuation();
      }
    }
  }
  Require(resume.tokens_sent() >= 0, "negative tokens sent");
  return 0;
}
