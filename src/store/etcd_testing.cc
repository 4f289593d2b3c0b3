#include "store/etcd_testing.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpusched::store {
namespace {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

bool OnPath(const char* name) {
  const char* path = getenv("PATH");
  if (path == nullptr) return false;
  std::string p(path);
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = p.find(':', start);
    const std::string dir = p.substr(
        start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) {
      return true;
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return false;
}

}  // namespace

EtcdTestServer* EtcdTestServer::Shared() {
  static EtcdTestServer* server = [] {
    auto* s = new EtcdTestServer();
    std::atexit([] { delete Shared(); });
    return s;
  }();
  return server;
}

EtcdTestServer::EtcdTestServer() {
  if (!OnPath("etcd")) {
    unavailable_ =
        "etcd is not installed (scripts/install-deps.sh installs etcd-server)";
    return;
  }
  Start();
}

void EtcdTestServer::Start() {
  dir_ = (std::filesystem::temp_directory_path() /
          absl::StrCat("gpusched-etcd-test-", getpid()))
             .string();
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  for (int attempt = 0; attempt < 5; ++attempt) {
    client_port_ = FreePort();
    peer_port_ = FreePort();
    const std::string client = absl::StrCat("http://127.0.0.1:", client_port_);
    const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port_);
    std::vector<std::string> args = {"etcd",
                                     "--name",
                                     "test",
                                     "--data-dir",
                                     dir_ + "/data",
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     "test=" + peer,
                                     "--initial-cluster-state",
                                     "new",
                                     "--logger",
                                     "zap",
                                     "--log-outputs",
                                     dir_ + "/etcd.log"};
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      setpgid(0, 0);
      const int devnull = open("/dev/null", O_RDWR);
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(devnull, 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("etcd", argv.data());
      _exit(127);
    }
    pid_ = pid;
    // Ready once it answers a status call (within 20 s).
    EtcdOptions o = Options("/probe/");
    o.request_timeout = 500 * kMicrosPerMilli;
    auto client_or = EtcdClient::Create(o);
    for (int i = 0; i < 200 && client_or.ok(); ++i) {
      if ((*client_or)
              ->Call("maintenance/status", nlohmann::json::object())
              .ok()) {
        return;
      }
      int wstatus = 0;
      if (waitpid(pid_, &wstatus, WNOHANG) == pid_) break;  // it died
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
    std::filesystem::remove_all(dir_ + "/data");
  }
  start_error_ = absl::StrCat("etcd did not start (see ", dir_, "/etcd.log)");
  keep_dir_ = true;
}

EtcdTestServer::~EtcdTestServer() {
  if (pid_ > 0) {
    kill(-pid_, SIGCONT);
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!dir_.empty() && !keep_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string EtcdTestServer::endpoint() const {
  return absl::StrCat("http://127.0.0.1:", client_port_);
}

std::string EtcdTestServer::UniquePrefix() {
  static std::atomic<int> n{0};
  return absl::StrCat("/gpusched-test-", getpid(), "-", n.fetch_add(1), "/");
}

EtcdOptions EtcdTestServer::Options(const std::string& prefix) const {
  EtcdOptions o;
  o.endpoints = {endpoint()};
  o.prefix = prefix;
  return o;
}

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdTestServer::OpenStore(
    const std::string& prefix, const std::string& instance) const {
  EtcdStoreOptions o;
  o.etcd = Options(prefix);
  o.instance = instance;
  return EtcdStore::Open(std::move(o));
}

void EtcdTestServer::Pause() {
  if (pid_ > 0) kill(-pid_, SIGSTOP);
}
void EtcdTestServer::Resume() {
  if (pid_ > 0) kill(-pid_, SIGCONT);
}

}  // namespace gpusched::store
