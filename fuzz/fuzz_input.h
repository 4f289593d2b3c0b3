// Helpers the fuzz targets share (fuzz/README.md: how they are built and
// run). Header-only; the targets link only the modules they parse for.
#ifndef GPUSCHED_FUZZ_FUZZ_INPUT_H_
#define GPUSCHED_FUZZ_FUZZ_INPUT_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"

namespace gpusched::fuzz {

inline absl::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Fails the run (libFuzzer reports the input as a crash) when `ok` is
// false: the property checks of a target, beside the sanitizers'.
inline void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

// An in-memory file whose path readers that take a path can open
// (/proc/self/fd/N of a memfd): the trace and inventory readers read the
// fuzzer's bytes through the same code as a file on disk.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("gpusched-fuzz", 0)) {
    Require(fd_ >= 0, "memfd_create");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Replaces the contents; returns the path to open.
  const std::string& Write(absl::string_view text) {
    Require(ftruncate(fd_, 0) == 0, "ftruncate");
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n =
          pwrite(fd_, text.data() + done, text.size() - done, done);
      Require(n > 0, "pwrite");
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace gpusched::fuzz

#endif  // GPUSCHED_FUZZ_FUZZ_INPUT_H_
