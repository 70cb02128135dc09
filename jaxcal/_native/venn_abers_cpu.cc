// The Venn-Abers tables (jaxcal/calibrators/_venn_abers_core.py, va_tables) for XLA's CPU
// backend, as an XLA FFI handler.
//
// The tables are p0 and p1 at every point of a flat layout of problems (each problem's P_0,
// then its runs): the cumulative sum diagram (CSD) of each problem, then, for label 1 and
// for the mirror image of every problem (label 0), two sequential sweeps: the successor
// pointers of the lower convex hull of each suffix (a stack, from the right) and the bridge
// sweep with its tangent pointer walking right along them (from the left). In pure JAX these
// are lax.fori_loops with data-dependent inner while loops, which pay XLA's loop runtime
// about 25-35 ns per point and pass; here they are plain loops. Every comparison and every
// arithmetic operation is the JAX code's, in the input's precision (T = float or double),
// evaluated in the same order, so both give the same tables.
//
// Inputs are [..., N]: every leading index is a separate flat layout (how vmap reaches the
// handler); first and last are bool, and every layout starts with a first and ends with a
// last point (the Python caller guarantees it; checked here).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "ffi_checks.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using jaxcal_native::Batch, jaxcal_native::BatchOf, jaxcal_native::CheckLike, jaxcal_native::Data,
    jaxcal_native::ForFloatType;

namespace {

// next[k]: the successor of P_k on the lower convex hull of P_k .. P_end of its problem (k
// itself at the end), as _hull_next.
template <typename T>
void HullNext(const T* W, const T* Y, const bool* last, int64_t n, std::vector<int32_t>& stack,
              int32_t* next) {
  int64_t top = 0;
  for (int64_t k = n - 1; k >= 0; --k) {
    if (last[k]) top = 0;
    const T wk = W[k], yk = Y[k];
    int32_t succ = static_cast<int32_t>(k);
    while (true) {
      const int32_t a = stack[std::max<int64_t>(top - 1, 0)];
      const int32_t b = stack[std::max<int64_t>(top - 2, 0)];
      const bool pop = top >= 2 && (Y[a] - yk) * (W[b] - W[a]) >= (Y[b] - Y[a]) * (W[a] - wk);
      succ = top >= 1 ? a : static_cast<int32_t>(k);
      if (!pop) break;
      --top;
    }
    stack[top] = static_cast<int32_t>(k);
    ++top;
    next[k] = succ;
  }
}

// p1 at every point: the bridge resets with the tangent pointer, as _sweep.
template <typename T>
void Sweep(const T* W, const T* Y, const T* omega, const bool* first, const bool* last,
           const int32_t* next, int64_t n, T* out) {
  T aw = 0, ay = 0, slope = 0;
  int64_t b = 0;
  for (int64_t k = 0; k < n; ++k) {
    const T wk = W[k], yk = Y[k];
    const bool reset = first[k] || (yk - ay < slope * (wk - aw));
    const T xw = wk - omega[k], xy = yk - omega[k];
    if (reset) {
      int64_t b_new = std::min(std::max(first[k] ? k + 1 : b, k + 1), n - 1);
      if (!last[k]) {
        while (!last[b_new]) {
          const int32_t m = next[b_new];
          const bool lower =
              (Y[m] - Y[b_new]) * (W[b_new] - xw) <= (Y[b_new] - xy) * (W[m] - W[b_new]);
          if (!lower) break;
          b_new = m;
        }
      }
      if (!last[k]) slope = (Y[b_new] - xy) / (W[b_new] - xw);
      b = b_new;
      aw = wk;
      ay = yk;
    }
    if (last[k]) slope = T(1);
    out[k] = slope;
  }
}

template <typename T>
struct Scratch {
  std::vector<T> W, Y, rem_w, rem_y, mw, my, momega, mout;
  std::vector<int32_t> stack, next;
  std::unique_ptr<bool[]> mfirst, mlast;
  explicit Scratch(int64_t n)
      : W(n), Y(n), rem_w(n), rem_y(n), mw(n), my(n), momega(n), mout(n), stack(n), next(n),
        mfirst(new bool[n]), mlast(new bool[n]) {}
};

// Label 1 of the points (W, Y): the hull pointers, then the sweep.
template <typename T>
void LabelOne(const T* W, const T* Y, const T* omega, const bool* first, const bool* last,
              int64_t n, Scratch<T>& s, T* out) {
  HullNext<T>(W, Y, last, n, s.stack, s.next.data());
  Sweep<T>(W, Y, omega, first, last, s.next.data(), n, out);
}

template <typename T>
void Tables(const T* inc_w, const T* inc_y, const T* omega, const bool* first, const bool* last,
            int64_t n, Scratch<T>& s, T* p0, T* p1) {
  // the CSD within each problem (forward), and what remains of it to the problem's end
  T cw = 0, cy = 0;
  for (int64_t i = 0; i < n; ++i) {
    cw = (first[i] ? T(0) : cw) + inc_w[i];
    cy = (first[i] ? T(0) : cy) + inc_y[i];
    s.W[i] = cw;
    s.Y[i] = cy;
  }
  T tw = 0, ty = 0;
  for (int64_t i = n - 1; i >= 0; --i) {
    if (last[i]) {
      tw = s.W[i];
      ty = s.Y[i];
    }
    s.rem_w[i] = tw - s.W[i];
    s.rem_y[i] = ty - s.Y[i];
  }
  LabelOne<T>(s.W.data(), s.Y.data(), omega, first, last, n, s, p1);
  // label 0: label 1 of the mirror image (runs reversed, labels 1 - y)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = n - 1 - i;
    s.mw[i] = s.rem_w[r];
    s.my[i] = s.rem_w[r] - s.rem_y[r];
    s.momega[i] = omega[r];
    s.mfirst[i] = last[r];
    s.mlast[i] = first[r];
  }
  LabelOne<T>(s.mw.data(), s.my.data(), s.momega.data(), s.mfirst.get(), s.mlast.get(), n, s,
              s.mout.data());
  for (int64_t i = 0; i < n; ++i) p0[i] = T(1) - s.mout[n - 1 - i];
}

constexpr const char* kVa = "venn_abers_cpu";

template <typename T>
ffi::Error Solve(ffi::AnyBuffer inc_w, ffi::AnyBuffer inc_y, ffi::AnyBuffer omega,
                 ffi::AnyBuffer first, ffi::AnyBuffer last, ffi::Result<ffi::AnyBuffer> p0,
                 ffi::Result<ffi::AnyBuffer> p1) {
  Batch batch;
  if (ffi::Error e = BatchOf(kVa, "inc_w", inc_w, 31, batch); e.failure()) return e;
  constexpr const char* kLike = "of inc_w's dtype and shape [..., N]";
  constexpr const char* kBool = "bool of inc_w's shape [..., N]";
  const ffi::DataType t = inc_w.element_type();
  for (ffi::Error e : {CheckLike(kVa, "inc_y", inc_y, t, inc_w, kLike),
                       CheckLike(kVa, "omega", omega, t, inc_w, kLike),
                       CheckLike(kVa, "first", first, ffi::DataType::PRED, inc_w, kBool),
                       CheckLike(kVa, "last", last, ffi::DataType::PRED, inc_w, kBool),
                       CheckLike(kVa, "p0 (result)", *p0, t, inc_w, kLike),
                       CheckLike(kVa, "p1 (result)", *p1, t, inc_w, kLike)}) {
    if (e.failure()) return e;
  }
  const int64_t n = batch.n;
  if (batch.problems() == 0) return ffi::Error::Success();
  Scratch<T> scratch(n);
  for (int64_t at = 0; at < batch.total; at += n) {
    const bool *f = Data<bool>(first, at), *l = Data<bool>(last, at);
    if (!f[0] || !l[n - 1]) {
      return ffi::Error::InvalidArgument(
          "venn_abers_cpu: a layout must start with a first and end with a last point");
    }
    Tables<T>(Data<T>(inc_w, at), Data<T>(inc_y, at), Data<T>(omega, at), f, l, n, scratch,
              Data<T>(p0, at), Data<T>(p1, at));
  }
  return ffi::Error::Success();
}

ffi::Error VennAbersImpl(ffi::AnyBuffer inc_w, ffi::AnyBuffer inc_y, ffi::AnyBuffer omega,
                         ffi::AnyBuffer first, ffi::AnyBuffer last,
                         ffi::Result<ffi::AnyBuffer> p0, ffi::Result<ffi::AnyBuffer> p1) {
  return ForFloatType(kVa, inc_w.element_type(), "the inputs", [&](auto zero) {
    return Solve<decltype(zero)>(inc_w, inc_y, omega, first, last, p0, p1);
  });
}

}  // namespace

// p0 and p1 of the Venn-Abers tables at every point of each flat layout of problems.
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcalVennAbersCpu, VennAbersImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()     // CSD weight increments [..., N]
                                  .Arg<ffi::AnyBuffer>()     // CSD label increments [..., N]
                                  .Arg<ffi::AnyBuffer>()     // test point weights [..., N]
                                  .Arg<ffi::AnyBuffer>()     // first (bool) [..., N]
                                  .Arg<ffi::AnyBuffer>()     // last (bool) [..., N]
                                  .Ret<ffi::AnyBuffer>()     // p0 [..., N]
                                  .Ret<ffi::AnyBuffer>());  // p1 [..., N]
