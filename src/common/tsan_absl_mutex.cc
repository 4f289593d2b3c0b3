// ThreadSanitizer builds only (GPUSCHED_TSAN, linked into every test and
// binary of that build): tells TSan about absl::Mutex.
//
// Debian's libabsl is compiled without TSan, so TSan cannot see the
// happens-before edges its Mutex creates: every access guarded by one would
// be reported as a race. These definitions interpose the Mutex members
// gpusched calls (the executable's definition wins over the shared
// library's), call the library's own through dlsym(RTLD_NEXT), and mark the
// acquire after locking and the release before unlocking (and around
// Await, which lets go of the lock while it waits). Races between accesses
// that no Mutex orders are still reported; lock-order (deadlock) checks are
// not, absl's own debug checks cover those.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

#define GPUSCHED_STR2(x) #x
#define GPUSCHED_STR(x) GPUSCHED_STR2(x)

// The library's definition of member `mangled_tail` of absl::Mutex (its
// Itanium mangling after "Mutex"), e.g. "4LockEv".
void* Real(const char* mangled_tail) {
  const std::string ns = GPUSCHED_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name =
      "_ZN4absl" + std::to_string(ns.size()) + ns + "5Mutex" + mangled_tail;
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found\n", name.c_str());
    std::abort();
  }
  return f;
}

// A Condition absl evaluates with the lock held, in the waiter's thread or
// in the thread that unlocks: the evaluation acquires (and releases) the
// mutex for TSan, so what it reads is ordered after the last holder's
// writes.
struct Annotated {
  absl::Mutex* mu;
  const absl::Condition* cond;
};
bool EvalAnnotated(Annotated* a) {
  __tsan_acquire(a->mu);
  const bool met = a->cond->Eval();
  __tsan_release(a->mu);
  return met;
}

using Plain = void (*)(absl::Mutex*);
using Test = bool (*)(absl::Mutex*);
using Cond = void (*)(absl::Mutex*, const absl::Condition&);
using CondTimeout = bool (*)(absl::Mutex*, const absl::Condition&,
                             absl::Duration);

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const auto real = reinterpret_cast<Plain>(Real("4LockEv"));
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static const auto real = reinterpret_cast<Plain>(Real("6UnlockEv"));
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  static const auto real = reinterpret_cast<Test>(Real("7TryLockEv"));
  const bool got = real(this);
  if (got) __tsan_acquire(this);
  return got;
}

void Mutex::ReaderLock() {
  static const auto real = reinterpret_cast<Plain>(Real("10ReaderLockEv"));
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static const auto real = reinterpret_cast<Plain>(Real("12ReaderUnlockEv"));
  __tsan_release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real =
      reinterpret_cast<Cond>(Real("8LockWhenERKNS0_9ConditionE"));
  Annotated a{this, &cond};
  real(this, Condition(&EvalAnnotated, &a));
  __tsan_acquire(this);
}

void Mutex::Await(const Condition& cond) {
  static const auto real =
      reinterpret_cast<Cond>(Real("5AwaitERKNS0_9ConditionE"));
  Annotated a{this, &cond};
  __tsan_release(this);
  real(this, Condition(&EvalAnnotated, &a));
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = reinterpret_cast<CondTimeout>(
      Real("16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE"));
  Annotated a{this, &cond};
  __tsan_release(this);
  const bool met = real(this, Condition(&EvalAnnotated, &a), timeout);
  __tsan_acquire(this);
  return met;
}

ABSL_NAMESPACE_END
}  // namespace absl
