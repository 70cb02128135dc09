// What jaxcal's XLA FFI handlers share around their kernels: shape and dtype checks, the
// batch of problems an operand holds, typed buffer access and the dispatch on the dtype.
//
// A handler reads and writes its buffers through raw pointers, so every operand and result
// is checked against the shapes and dtypes the handler assumes before any is touched: a
// caller that declares a result of the wrong shape or dtype gets an InvalidArgument error
// naming the buffer, not a write past its end.

#ifndef JAXCAL_NATIVE_FFI_CHECKS_H_
#define JAXCAL_NATIVE_FFI_CHECKS_H_

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <new>
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

// `buffer` must have dtype `type` and exactly the dimensions `dims`.
template <typename Buffer>
ffi::Error CheckShape(const char* kernel, const char* name, const Buffer& buffer,
                      ffi::DataType type, std::initializer_list<int64_t> dims,
                      const char* expected) {
  const auto have = buffer.dimensions();
  if (buffer.element_type() != type ||
      !std::equal(have.begin(), have.end(), dims.begin(), dims.end())) {
    return Mismatch(kernel, name, expected);
  }
  return ffi::Error::Success();
}

// A batch of problems along the last dimension of an operand [..., n]: every leading index
// is one problem of n points (how vmap reaches a handler).
struct Batch {
  int64_t n = 0;      // points per problem
  int64_t total = 0;  // points of all problems
  int64_t problems() const { return n == 0 ? 0 : total / n; }
};

// The batch of `x` (`name`), which must have rank >= 1 and fewer than 2**`bits` points per
// problem (the kernel's indices are `bits`-bit integers).
inline ffi::Error BatchOf(const char* kernel, const char* name, const ffi::AnyBuffer& x, int bits,
                          Batch& batch) {
  const auto dims = x.dimensions();
  if (dims.size() == 0) return Mismatch(kernel, name, "of rank >= 1 ([..., n])");
  batch.n = dims.back();
  batch.total = static_cast<int64_t>(x.element_count());
  if (batch.n >= (int64_t{1} << bits)) {
    return ffi::Error::InvalidArgument(std::string(kernel) + ": " + name +
                                       " must have fewer than 2**" + std::to_string(bits) +
                                       " points a problem");
  }
  return ffi::Error::Success();
}

// The elements of a buffer of T from element `at` on.
template <typename T>
const T* Data(const ffi::AnyBuffer& buffer, int64_t at = 0) {
  return static_cast<const T*>(buffer.untyped_data()) + at;
}
template <typename T>
T* Data(ffi::Result<ffi::AnyBuffer>& result, int64_t at = 0) {
  return static_cast<T*>(result->untyped_data()) + at;
}

// A handler's dispatch on its float dtype `type`: `solve(T{})` with T = double for float64
// and float for float32 (the caller names T as decltype of the argument). Running out of
// memory returns a ResourceExhausted error, any other dtype "<kernel>: <what> must be float32
// or float64".
template <typename Solve>
ffi::Error ForFloatType(const char* kernel, ffi::DataType type, const char* what, Solve solve) {
  try {
    if (type == ffi::DataType::F64) return solve(double{});
    if (type == ffi::DataType::F32) return solve(float{});
  } catch (const std::bad_alloc&) {
    return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(kernel) + ": out of memory");
  }
  return Mismatch(kernel, what, "float32 or float64");
}

}  // namespace jaxcal_native

#endif  // JAXCAL_NATIVE_FFI_CHECKS_H_
