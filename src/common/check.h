// CHECK: guards invariants whose breach would mislead the cluster (for
// example, one GPU share handed out twice). A failed CHECK prints the
// condition, location and message to stderr and aborts; it is never used for
// bad input, which gets an absl::Status instead. Thread-safe.
#ifndef GPUSCHED_COMMON_CHECK_H_
#define GPUSCHED_COMMON_CHECK_H_

#include <sstream>
#include <string>

namespace gpusched::internal {

// Collects the streamed message and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `CHECK(x) << ...` compile to a void expression in both branches.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace gpusched::internal

#define CHECK(condition)                                                       \
  (condition)                                                                  \
      ? (void)0                                                                \
      : ::gpusched::internal::Voidify() &                                      \
            ::gpusched::internal::CheckFailure(__FILE__, __LINE__, #condition) \
                .stream()

#endif  // GPUSCHED_COMMON_CHECK_H_
