// A workspace shared by all calls of an XLA FFI handler (pav_cpu.cc, enir_cpu.cc).

#ifndef JAXCAL_NATIVE_WORKSPACE_LEASE_H_
#define JAXCAL_NATIVE_WORKSPACE_LEASE_H_

#include <cstdint>
#include <memory>
#include <mutex>

namespace jaxcal_native {

// One `Workspace` shared by all calls (XLA may run a handler on any of its threads); a call
// that finds it busy, or whose problem is larger than `kKeepMax` (in the handler's units), uses
// a workspace of its own that is freed on return. Kept buffers spare later calls the page
// faults of fresh memory. Each handler has its own `Workspace` type, hence its own lease.
template <typename Workspace, int64_t kKeepMax>
class WorkspaceLease {
 public:
  explicit WorkspaceLease(int64_t n) : lock_(mutex_, std::defer_lock) {
    if (n <= kKeepMax) lock_.try_lock();
    if (!lock_.owns_lock()) own_ = std::make_unique<Workspace>();
  }
  Workspace& get() { return lock_.owns_lock() ? shared_ : *own_; }

 private:
  static inline std::mutex mutex_;
  static inline Workspace shared_;
  std::unique_lock<std::mutex> lock_;
  std::unique_ptr<Workspace> own_;
};

}  // namespace jaxcal_native

#endif  // JAXCAL_NATIVE_WORKSPACE_LEASE_H_
