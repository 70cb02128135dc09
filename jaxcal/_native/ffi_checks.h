// Shape and dtype checks shared by jaxcal's XLA FFI handlers.
//
// A handler reads and writes its buffers through raw pointers, so every operand and result
// is checked against the shapes and dtypes the handler assumes before any is touched: a
// caller that declares a result of the wrong shape or dtype gets an InvalidArgument error
// naming the buffer, not a write past its end.

#ifndef JAXCAL_NATIVE_FFI_CHECKS_H_
#define JAXCAL_NATIVE_FFI_CHECKS_H_

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace jaxcal_native {

namespace ffi = xla::ffi;

// Whether the dimensions `dims` are `prefix` (all of `prefix_dims`, or all but its last
// `drop`) followed by `tail`.
template <typename Dims, typename Prefix>
bool DimsAre(const Dims& dims, const Prefix& prefix_dims, int64_t drop,
             std::initializer_list<int64_t> tail = {}) {
  const int64_t q = static_cast<int64_t>(std::size(prefix_dims)) - drop;
  if (q < 0 || static_cast<int64_t>(std::size(dims)) != q + static_cast<int64_t>(tail.size())) {
    return false;
  }
  for (int64_t i = 0; i < q; ++i) {
    if (dims[i] != prefix_dims[i]) return false;
  }
  int64_t i = q;
  for (int64_t d : tail) {
    if (dims[i++] != d) return false;
  }
  return true;
}

// "<kernel>: <name> must be <dtype> [<shape>]" as an InvalidArgument error.
inline ffi::Error Mismatch(const char* kernel, const char* name, const char* expected) {
  return ffi::Error::InvalidArgument(std::string(kernel) + ": " + name + " must be " + expected);
}

// `buffer` (an operand or a result) must have dtype `type` and the dimensions of `like`.
template <typename Buffer>
ffi::Error CheckLike(const char* kernel, const char* name, const Buffer& buffer,
                     ffi::DataType type, const ffi::AnyBuffer& like, const char* expected) {
  if (buffer.element_type() != type || !DimsAre(buffer.dimensions(), like.dimensions(), 0)) {
    return Mismatch(kernel, name, expected);
  }
  return ffi::Error::Success();
}

// `buffer` must have dtype `type` and the leading (batch) dimensions of `like`, without its
// last one, followed by `tail`.
template <typename Buffer>
ffi::Error CheckBatch(const char* kernel, const char* name, const Buffer& buffer,
                      ffi::DataType type, const ffi::AnyBuffer& like,
                      std::initializer_list<int64_t> tail, const char* expected) {
  if (buffer.element_type() != type || !DimsAre(buffer.dimensions(), like.dimensions(), 1, tail)) {
    return Mismatch(kernel, name, expected);
  }
  return ffi::Error::Success();
}

}  // namespace jaxcal_native

#endif  // JAXCAL_NATIVE_FFI_CHECKS_H_
