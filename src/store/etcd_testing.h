// EtcdTestServer: a real etcd (Debian's etcd-server) for the tests of the
// etcd store and the election: one member on free loopback ports with a data
// directory of its own, started on first use and stopped when the test
// binary exits (it also dies with the binary: PR_SET_PDEATHSIG). Tests
// share it and keep apart by their key prefix (UniquePrefix()).
// Thread-compatible: tests call it from their main thread.
#ifndef GPUSCHED_STORE_ETCD_TESTING_H_
#define GPUSCHED_STORE_ETCD_TESTING_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "store/etcd_store.h"

namespace gpusched::store {

class EtcdTestServer {
 public:
  // The binary's one server, started on the first call.
  static EtcdTestServer* Shared();
  ~EtcdTestServer();

  // Why etcd cannot run here ("etcd is not installed": tests skip), or ""
  // when it is installed.
  const std::string& Unavailable() const { return unavailable_; }
  // Why an installed etcd did not start (tests fail), or "".
  const std::string& StartError() const { return start_error_; }
  std::string endpoint() const;
  // A prefix no other test of this binary (or another binary) uses.
  static std::string UniquePrefix();
  EtcdOptions Options(const std::string& prefix) const;
  absl::StatusOr<std::unique_ptr<EtcdStore>> OpenStore(
      const std::string& prefix, const std::string& instance = "test") const;

  // SIGSTOPs etcd (it stops answering, connections stay open: a partition)
  // and SIGCONTs it.
  void Pause();
  void Resume();

 private:
  EtcdTestServer();
  void Start();

  std::string unavailable_;
  std::string start_error_;
  bool keep_dir_ = false;  // its log explains a failed start
  std::string dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = 0;
};

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_ETCD_TESTING_H_
