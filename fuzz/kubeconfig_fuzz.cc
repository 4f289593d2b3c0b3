// A kubeconfig's text (backends/kubernetes/kube_client.h, ParseKubeconfig) and
// what the API server answers (KubeStatusError over any body, ParseKubeServer
// over any URL): any input parses or is refused with an error, never a crash.
// Relative paths in the kubeconfig point into a folder that does not exist.
#include <cstdint>
#include <string>

#include "backends/kubernetes/kube_client.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace rt = gpusched::backends;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = rt::ParseKubeconfig(text, "/nonexistent/kubeconfig", "");
  if (c.ok()) {
    gpusched::fuzz::Require(!c->host.empty(), "credentials without a host");
    gpusched::fuzz::Require(c->port > 0, "credentials without a port");
  }
  rt::KubeResponse r;
  r.status = size > 0 ? 400 + data[0] % 200 : 500;
  r.body = text;
  gpusched::fuzz::Require(!rt::KubeStatusError(r, "GET x").ok(),
                          "an error status read as OK");
  rt::KubeCredentials s;
  (void)rt::ParseKubeServer(text.substr(0, 256), &s);
  (void)rt::KubeQueryEscape(text);
  return 0;
}
