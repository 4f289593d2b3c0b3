#include "backends/kubernetes/kube_client.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "backends/kubernetes/kube_launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpusched::backends {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kube_client_test.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(KubeServerTest, ParsesSchemesHostsAndPorts) {
  KubeCredentials c;
  ASSERT_TRUE(ParseKubeServer("https://10.0.0.1:6443", &c).ok());
  EXPECT_EQ(c.host, "10.0.0.1");
  EXPECT_EQ(c.port, 6443);
  EXPECT_TRUE(c.tls);
  ASSERT_TRUE(ParseKubeServer("http://api.example.com", &c).ok());
  EXPECT_EQ(c.host, "api.example.com");
  EXPECT_EQ(c.port, 80);
  EXPECT_FALSE(c.tls);
  ASSERT_TRUE(ParseKubeServer("https://[fd00::1]:443/", &c).ok());
  EXPECT_EQ(c.host, "fd00::1");
  EXPECT_EQ(c.port, 443);
  EXPECT_THAT(ParseKubeServer("ftp://x", &c).message(),
              HasSubstr("expected https://"));
  EXPECT_THAT(ParseKubeServer("https://x:99999", &c).message(),
              HasSubstr("bad port"));
  EXPECT_THAT(ParseKubeServer("https://:443", &c).message(),
              HasSubstr("no host"));
}

TEST(KubeconfigTest, ReadsTheCurrentContextWithTokenAndCaData) {
  TempDir dir;
  const std::string ca =
      "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  const std::string path = dir.Write("config", R"(apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: dev
  cluster: {server: "https://dev:6443"}
- name: prod
  cluster:
    server: https://10.1.2.3:6443
    certificate-authority-data: )" + absl::Base64Escape(ca) +
                                                   R"(
contexts:
- name: prod
  context: {cluster: prod, user: admin, namespace: serving}
users:
- name: admin
  user: {token: abc123}
)");
  absl::StatusOr<KubeCredentials> c = KubeconfigCredentials(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "10.1.2.3");
  EXPECT_EQ(c->port, 6443);
  EXPECT_EQ(c->ca_pem, ca);
  EXPECT_EQ(c->token, "abc123");
  EXPECT_EQ(c->namespace_name, "serving");
  EXPECT_THAT(c->source, HasSubstr("context prod"));
}

TEST(KubeconfigTest, ReadsFilesRelativeToTheKubeconfig) {
  TempDir dir;
  dir.Write("ca.crt", "CA");
  dir.Write("client.crt", "CERT");
  dir.Write("client.key", "KEY");
  const std::string path = dir.Write("config", R"(current-context: c
clusters: [{name: k, cluster: {server: "https://h", certificate-authority: ca.crt}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {client-certificate: client.crt, client-key: client.key, tokenFile: tok}}]
)");
  absl::StatusOr<KubeCredentials> c = KubeconfigCredentials(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ca_pem, "CA");
  EXPECT_EQ(c->client_cert_pem, "CERT");
  EXPECT_EQ(c->client_key_pem, "KEY");
  EXPECT_EQ(c->token_file, dir.path() + "/tok");
}

TEST(KubeconfigTest, NamesWhatIsWrong) {
  TempDir dir;
  auto error = [&](const std::string& text) {
    return std::string(
        KubeconfigCredentials(dir.Write("config", text)).status().message());
  };
  EXPECT_THAT(error("clusters: []\n"), HasSubstr("current-context is not set"));
  EXPECT_THAT(error("current-context: x\ncontexts: []\n"),
              HasSubstr("contexts: no entry named \"x\""));
  EXPECT_THAT(
      error("current-context: c\ncontexts: [{name: c, context: {cluster: k, "
            "user: u}}]\nclusters: [{name: k, cluster: {server: "
            "\"https://h\"}}]\nusers: [{name: u, user: {exec: {command: "
            "aws}}}]\n"),
      HasSubstr("exec and auth-provider credential plugins are not supported"));
  EXPECT_THAT(
      error("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
            "clusters: [{name: k, cluster: {server: \"tcp://h\"}}]\n"),
      HasSubstr("expected https://"));
  EXPECT_THAT(
      std::string(
          KubeconfigCredentials(dir.path() + "/missing").status().message()),
      HasSubstr("cannot read kubeconfig"));
}

TEST(KubeInClusterTest, ReadsTheServiceAccount) {
  TempDir dir;
  dir.Write("token", "tok\n");
  dir.Write("ca.crt", "CA");
  dir.Write("namespace", "gpusched\n");
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  absl::StatusOr<KubeCredentials> c = InClusterKubeCredentials(dir.path());
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "10.96.0.1");
  EXPECT_EQ(c->port, 443);
  EXPECT_EQ(c->token, "tok");
  EXPECT_EQ(c->token_file, dir.path() + "/token");
  EXPECT_EQ(c->namespace_name, "gpusched");
  EXPECT_TRUE(absl::IsFailedPrecondition(
      InClusterKubeCredentials(dir.path()).status()));
}

TEST(KubeStatusTest, MapsStatusObjectsOntoCodes) {
  auto status = [](unsigned code, const std::string& reason) {
    KubeResponse r;
    r.status = code;
    r.body = nlohmann::json{
        {"kind", "Status"},
        {"apiVersion", "v1"},
        {"status", "Failure"},
        {"reason", reason},
        {"message", "pods \"x\" " + reason},
        {"code",
         code}}.dump();
    return KubeStatusError(r, "POST pods");
  };
  EXPECT_TRUE(status(201, "").ok());
  EXPECT_TRUE(absl::IsAlreadyExists(status(409, "AlreadyExists")));
  EXPECT_TRUE(absl::IsAborted(status(409, "Conflict")));
  EXPECT_TRUE(absl::IsNotFound(status(404, "NotFound")));
  EXPECT_TRUE(absl::IsPermissionDenied(status(403, "Forbidden")));
  EXPECT_TRUE(absl::IsInvalidArgument(status(422, "Invalid")));
  EXPECT_TRUE(absl::IsResourceExhausted(status(429, "TooManyRequests")));
  EXPECT_TRUE(absl::IsUnavailable(status(500, "InternalError")));
  EXPECT_TRUE(absl::IsOutOfRange(status(410, "Expired")));
  EXPECT_EQ(status(409, "AlreadyExists").message(),
            "POST pods: 409 AlreadyExists: pods \"x\" AlreadyExists");
  KubeResponse plain{
      .status = 429, .body = "slow down", .retry_after = 3 * kMicrosPerSecond};
  EXPECT_EQ(KubeStatusError(plain, "GET nodes").message(),
            "GET nodes: 429: slow down (retry after 3 s)");
}

TEST(KubeStatusTest, AStatusOfOddTypesIsStillAnError) {
  // fuzz_kubeconfig found this: a numeric "kind" threw out of the parser.
  KubeResponse r{.status = 409,
                 .body = R"({"kind":103,"reason":5,"message":["x"]})",
                 .retry_after = 0};
  EXPECT_TRUE(absl::IsAborted(KubeStatusError(r, "POST pods")));
  EXPECT_EQ(KubeInt(nlohmann::json::parse(R"({"code":"410"})"), "code"), 0);
  EXPECT_EQ(KubeStr(nlohmann::json::array(), "x"), "");
}

TEST(KubeQueryTest, EscapesSelectors) {
  EXPECT_EQ(KubeQueryEscape("app.kubernetes.io/managed-by=gpusched,a!=b"),
            "app.kubernetes.io%2Fmanaged-by%3Dgpusched%2Ca%21%3Db");
}

// A client that points nowhere: launchers built for PodObject make no
// request, and their watchers back off quietly until destroyed.
std::unique_ptr<KubeClient> Nowhere() {
  KubeCredentials c;
  c.host = "127.0.0.1";
  c.port = 9;  // discard: nothing listens
  c.tls = false;
  return *KubeClient::Create(c, {.timeout = 200 * kMicrosPerMilli});
}

TEST(KubeLauncherPodTest, PinsGpusBindsThePodIpAndLabelsWhatServesWhat) {
  ProcessSpec spec;
  spec.name = "chat-0";
  spec.engine = "reference";
  spec.argv = {"/usr/local/bin/gpusched", "engine", "--host", "$(POD_IP)"};
  spec.env = {{"CUDA_VISIBLE_DEVICES", "2,3"}, {"GPUSCHED_X", "1"}};
  spec.tag = "8000.0.abc";
  spec.placement.node = "gpu-1";
  spec.placement.deployment = "Chat_Bot";
  spec.placement.gpus = {2, 3};
  spec.placement.cpu_milli = 2000;
  spec.placement.memory_mib = 4096;
  spec.port = 8123;
  spec.readiness_path = "/health";
  KubeLauncherOptions o;
  o.image = "img:1";
  o.tolerations = {"nvidia.com/gpu"};
  o.namespace_name = "serving";
  const nlohmann::json pod = [&] {
    KubeLauncher l(o, Nowhere(), Nowhere(), Nowhere(), {});
    return l.PodObject(spec, "gpusched-chat-0-1");
  }();
  EXPECT_EQ(pod["spec"]["schedulerName"], "gpusched");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["metadata"]["namespace"], "serving");
  EXPECT_EQ(pod["metadata"]["labels"]["gpusched.io/deployment"], "Chat_Bot");
  EXPECT_EQ(pod["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "gpusched");
  EXPECT_EQ(pod["metadata"]["annotations"]["gpusched.io/gpus"], "2,3");
  const nlohmann::json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["image"], "img:1");
  EXPECT_EQ(c["command"][3], "$(POD_IP)");
  EXPECT_EQ(c["resources"]["requests"]["cpu"], "2000m");
  EXPECT_EQ(c["resources"]["requests"]["memory"], "4096Mi");
  std::vector<std::string> names;
  for (const auto& e : c["env"]) names.push_back(e["name"]);
  EXPECT_THAT(names,
              ElementsAre("GPUSCHED_X", "NVIDIA_VISIBLE_DEVICES", "POD_IP"));
  EXPECT_EQ(c["env"][1]["value"], "2,3");
  EXPECT_EQ(c["env"][2]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
  EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "nvidia.com/gpu");
  // The kubelet probes the engine as gpusched does.
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"], "/health");
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["port"], 8123);
}

TEST(KubeLauncherPodTest, MigSlicesAskTheDevicePluginForTheirProfile) {
  // A mixed-strategy node (nvidia.com/mig-1g.10gb) and a single-strategy one
  // (its nvidia.com/gpu are 1g.5gb devices).
  auto nodes = backends::ParseKubeNodeList(nlohmann::json::parse(R"({
    "kind": "NodeList", "items": [
      {"metadata": {"name": "mixed", "labels": {
         "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
         "nvidia.com/mig.strategy": "mixed"}},
       "status": {"allocatable": {"cpu": "8", "memory": "64Gi",
                                  "nvidia.com/gpu": "1",
                                  "nvidia.com/mig-1g.10gb": "7"}}},
      {"metadata": {"name": "single", "labels": {
         "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
         "nvidia.com/mig.strategy": "single"}},
       "status": {"allocatable": {"cpu": "8", "memory": "64Gi",
                                  "nvidia.com/gpu": "7"}}}]})"));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  auto specs = backends::KubeNodeSpecs(*nodes, {});
  ASSERT_TRUE(specs.ok()) << specs.status();
  KubeLauncherOptions o;
  o.image = "img:1";
  KubeLauncher l(o, Nowhere(), Nowhere(), Nowhere(), *nodes, *specs);
  ProcessSpec spec;
  spec.name = "slim-0";
  spec.argv = {"gpusched", "engine"};
  spec.env = {{"CUDA_VISIBLE_DEVICES", "1"}};
  spec.placement.node = "mixed";
  spec.placement.deployment = "slim";
  spec.placement.gpus = {1};
  spec.placement.fraction = true;
  spec.placement.mig_profile = "1g.10gb";
  spec.placement.mig_start = 3;
  nlohmann::json pod = l.PodObject(spec, "p");
  const nlohmann::json* ctr = &pod["spec"]["containers"][0];
  EXPECT_EQ((*ctr)["resources"]["limits"]["nvidia.com/mig-1g.10gb"], "1");
  EXPECT_EQ((*ctr)["resources"]["requests"]["nvidia.com/mig-1g.10gb"], "1");
  // The device plugin sets NVIDIA_VISIBLE_DEVICES to the instance it gives.
  for (const auto& e : (*ctr)["env"]) {
    EXPECT_NE(e["name"], "NVIDIA_VISIBLE_DEVICES");
    EXPECT_NE(e["name"], "CUDA_VISIBLE_DEVICES");
  }
  EXPECT_EQ(pod["metadata"]["annotations"]["gpusched.io/mig"], "1g.10gb@3");
  spec.placement.node = "single";
  spec.placement.gpus = {0};
  spec.placement.mig_profile = "1g.5gb";
  pod = l.PodObject(spec, "p");
  ctr = &pod["spec"]["containers"][0];
  EXPECT_EQ((*ctr)["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_FALSE((*ctr)["resources"]["limits"].contains("nvidia.com/mig-1g.5gb"));
}

TEST(KubeLauncherPodTest, DnsLabels) {
  EXPECT_EQ(KubeLauncher::DnsLabel("Chat_Bot.v2", 63), "chat-bot-v2");
  EXPECT_EQ(KubeLauncher::DnsLabel("--x--", 63), "x");
  EXPECT_EQ(KubeLauncher::DnsLabel("abcdef", 3), "abc");
  EXPECT_EQ(KubeLauncher::DnsLabel("___", 63), "x");
}

}  // namespace
}  // namespace gpusched::backends
