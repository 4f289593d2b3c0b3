#include "main/serve_state.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "store/etcd_election.h"
#include "store/sqlite_store.h"

namespace gpusched {
namespace {

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') {
    return "localhost";
  }
  return buf;
}

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const std::string& field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": cannot read ", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1 << 20)) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": ", path, " is larger than 1 MiB"));
  }
  return ss.str();
}

}  // namespace

std::string InstanceId(const config::ServeConfig& cfg) {
  if (!cfg.ha.instance_id.empty()) return cfg.ha.instance_id;
  std::string id = absl::StrCat(
      Hostname(), "-",
      cfg.listen.port != 0 ? cfg.listen.port : static_cast<int>(getpid()));
  for (char& c : id) {
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                    c == '.' || c == '_' || c == '-' || c == ':';
    if (!ok) c = '-';
  }
  return id.substr(0, 128);
}

std::string AdvertiseUrl(const config::ServeConfig& cfg, uint16_t port) {
  if (!cfg.ha.advertise.empty()) return cfg.ha.advertise;
  std::string host = cfg.listen.host;
  if (host == "0.0.0.0" || host == "::" || host.empty()) host = Hostname();
  if (host.find(':') != std::string::npos) host = absl::StrCat("[", host, "]");
  return absl::StrCat(cfg.tls.cert.empty() ? "http" : "https", "://", host, ":",
                      port);
}

absl::StatusOr<ServeState> OpenServeState(const config::ServeConfig& cfg,
                                          const std::string& instance) {
  ServeState out;
  if (!cfg.etcd.enabled) {
    // As for key_dir and log_dir: the state file's folder is made here
    // (`state: out/state.db` in a fresh clone).
    if (const std::filesystem::path dir =
            std::filesystem::path(cfg.state).parent_path();
        !dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) {
        return absl::PermissionDeniedError(
            absl::StrCat("state: cannot create the folder ", dir.string(),
                         " of ", cfg.state, ": ", ec.message()));
      }
    }
    absl::StatusOr<std::unique_ptr<store::SqliteStore>> s =
        store::SqliteStore::Open(cfg.state);
    if (!s.ok()) return s.status();
    out.store = *std::move(s);
    return out;
  }
  const config::EtcdConfig& e = cfg.etcd;
  store::EtcdStoreOptions o;
  o.instance = instance;
  o.etcd.endpoints = e.endpoints;
  o.etcd.prefix = e.prefix;
  o.etcd.username = e.username;
  o.etcd.request_timeout = e.request_timeout_ms * kMicrosPerMilli;
  o.connect_timeout = e.connect_timeout_ms * kMicrosPerMilli;
  if (!e.password_file.empty()) {
    absl::StatusOr<std::string> p =
        ReadFile(e.password_file, "store.etcd.password_file");
    if (!p.ok()) return p.status();
    o.etcd.password = std::string(absl::StripTrailingAsciiWhitespace(*p));
  }
  for (auto [path, out_pem, field] :
       {std::tuple{&e.ca, &o.etcd.ca_pem, "store.etcd.ca"},
        std::tuple{&e.cert, &o.etcd.cert_pem, "store.etcd.cert"},
        std::tuple{&e.key, &o.etcd.key_pem, "store.etcd.key"}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> pem = ReadFile(*path, field);
    if (!pem.ok()) return pem.status();
    *out_pem = *std::move(pem);
  }
  absl::StatusOr<std::unique_ptr<store::EtcdStore>> s =
      store::EtcdStore::Open(std::move(o));
  if (!s.ok()) return s.status();
  out.etcd = s->get();
  out.store = *std::move(s);
  return out;
}

absl::StatusOr<std::unique_ptr<store::Election>> MakeElection(
    const config::ServeConfig& cfg, const ServeState& state,
    store::InstanceInfo self) {
  if (state.etcd == nullptr) {
    return std::unique_ptr<store::Election>(
        std::make_unique<store::LocalElection>(std::move(self)));
  }
  store::ElectionOptions o;
  o.self = std::move(self);
  o.lease_ttl = cfg.ha.lease_ttl_s * kMicrosPerSecond;
  o.renew_interval = cfg.ha.renew_interval_ms * kMicrosPerMilli;
  if (absl::Status st = store::ValidateElectionOptions(o); !st.ok()) return st;
  return std::unique_ptr<store::Election>(
      std::make_unique<store::EtcdElection>(state.etcd, std::move(o)));
}

}  // namespace gpusched
