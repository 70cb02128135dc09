// Weighted pool-adjacent-violators (PAV) for XLA's CPU backend, as an XLA FFI handler.
//
// jaxcal's portable PAV (jaxcal/fitting/pav.py) is a vectorised merge tree in pure
// JAX: it runs inside jit and vmap on CPU, GPU and TPU. On a CPU the same problem is
// better served by the classic sequential algorithm: XLA's CPU sort is a comparator-based
// std::sort (about 70 ms for 1e6 int64 keys) and the merge tree's many small while-loop
// steps each pay the runtime's per-op cost. This handler does what scikit-learn's Cython
// code does, plus groups and a sort built for scores:
//
//   1. order the points of each problem by (group, score). Groups that arrive contiguous
//      (ids non-decreasing: per user, per rank) need no group sort, and each group is
//      loaded, sorted and pooled while it is in cache; otherwise the points are first
//      sorted by group id (radix passes on the key range). Scores are sorted by their
//      order-preserving integer keys (SortInto in pav_sort.h: value buckets, then radix
//      passes);
//   2. pool tied (group, score) points into runs (summed weight and weighted target);
//   3. stack-based PAV within each group: push a run, then pool the two top blocks while
//      they violate (mean(left) >= mean(right), or either has zero weight: the same rule as
//      the merge tree and as scikit-learn);
//   4. write each block's mean back to its points, clipped to the points' bounds. The
//      points of a run of zero total weight get the fitted map's value at their score
//      instead: the linear interpolation between the clipped values of the nearest runs
//      with weight in the group, or the nearest one's value beyond them (0 in a group
//      without weight), as IsotonicCalibration's predict and scikit-learn's transform.
//
// The result is the exact weighted isotonic regression, the same as the pure-JAX merge
// tree up to the rounding of sums. Inputs are [..., n]: every leading index is one
// independent problem (this is how vmap reaches the handler). The weights arrive
// normalised (largest in [1, 2)) and the decreasing direction is applied by the JAX
// caller.
//
// Two handlers: JaxcalPavCpu returns the fitted value of every point (with groups);
// JaxcalPavRunsCpu returns the runs (distinct scores, weights, fitted values, block
// starts) of one problem, which is what a fitted calibrator's knots are made of.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "ffi_checks.h"
#include "pav_sort.h"
#include "workspace_lease.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using jaxcal_native::Batch, jaxcal_native::BatchOf, jaxcal_native::CheckBatch,
    jaxcal_native::CheckLike, jaxcal_native::Data, jaxcal_native::DimsAre,
    jaxcal_native::ForFloatType, jaxcal_native::Mismatch;

namespace {

constexpr const char* kPav = "pav_cpu";
constexpr const char* kLikeX = "of x's dtype and shape [..., n]";

// Stack PAV over the sorted points [off, off + len) of one group: tied scores form runs,
// a run is pushed once complete, and the two top blocks pool while they violate
// (mean(left) >= mean(right), or either has zero weight). `on_run(first position, key,
// weight)` is called once per run and returns the run's tag; a block keeps the tag of its
// first run. Returns the number of blocks; block b is (tag, weighted sum, weight) in
// `stack` (.key, .y, .w) at index b.
template <typename OnRun>
int64_t StackPav(const Arrays& s, const Arrays& stack, int64_t off, int64_t len, OnRun on_run) {
  uint64_t* tag = stack.key;
  double* by = stack.y;
  double* bw = stack.w;
  int64_t top = -1;
  const int64_t end = off + len;
  for (int64_t p = off; p < end;) {
    const int64_t first = p;
    double ry = 0.0, rw = 0.0;
    const uint64_t k = s.key[p];
    for (; p < end && s.key[p] == k; ++p) {
      ry += s.w[p] * s.y[p];
      rw += s.w[p];
    }
    ++top;
    tag[top] = static_cast<uint64_t>(on_run(first, k, rw));
    by[top] = ry;
    bw[top] = rw;
    while (top > 0) {
      const double ly = by[top - 1], lw = bw[top - 1];
      const double uy = by[top], uw = bw[top];
      if (!(lw == 0.0 || uw == 0.0 || ly * uw >= uy * lw)) break;
      by[top - 1] = ly + uy;
      bw[top - 1] = lw + uw;
      --top;
    }
  }
  return top + 1;
}

inline double BlockMean(double sum, double weight) { return weight > 0.0 ? sum / weight : 0.0; }

// Lower and upper bounds of the fitted values of one problem: one per point (stride 1,
// indexed by input position) or one for all points (stride 0).
template <typename T>
struct Bounds {
  const T* lo;
  const T* hi;
  int64_t lo_stride;
  int64_t hi_stride;
  double Clip(double v, int64_t at) const {
    return std::min(std::max(v, static_cast<double>(lo[at * lo_stride])),
                    static_cast<double>(hi[at * hi_stride]));
  }
};

// The sorted points [from, to) of zero-weight runs: the map's value at their scores, from
// the nearest runs with weight on the left (x0, value v0) and on the right (x1, v1), where
// they exist. The formula is that of jaxcal's `interpolate` (and of the merge tree).
template <typename T>
void FillZeroRuns(const Arrays& s, int64_t from, int64_t to, bool has_left, double x0,
                  double v0, bool has_right, double x1, double v1, const Bounds<T>& bounds,
                  T* out) {
  const double dx = x1 - x0;
  for (int64_t q = from; q < to; ++q) {
    const int64_t at = s.pos[q];
    double f;
    if (has_left && has_right) {
      const double c0 = bounds.Clip(v0, at), c1 = bounds.Clip(v1, at);
      f = dx > 0.0 ? c0 + ((KeyValue(s.key[q]) - x0) / dx) * (c1 - c0) : c0;
    } else if (has_left || has_right) {
      f = bounds.Clip(has_left ? v0 : v1, at);
    } else {
      f = bounds.Clip(0.0, at);
    }
    out[at] = static_cast<T>(f);
  }
}

// Each block's mean, clipped, written to the input positions of its points (blocks
// 0 .. n_blocks - 1 of StackPav in `stack`, over the sorted points up to `end`): the
// whole result of a group whose runs all have weight.
template <typename T>
void WriteBlocks(const Arrays& s, const Arrays& stack, int64_t n_blocks, int64_t end,
                 const Bounds<T>& bounds, T* out) {
  const bool per_point = bounds.lo_stride != 0 || bounds.hi_stride != 0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const double value = BlockMean(stack.y[b], stack.w[b]);
    const int64_t first = static_cast<int64_t>(stack.key[b]);
    const int64_t last = b + 1 == n_blocks ? end : static_cast<int64_t>(stack.key[b + 1]);
    if (per_point) {
      for (int64_t q = first; q < last; ++q) {
        out[s.pos[q]] = static_cast<T>(bounds.Clip(value, s.pos[q]));
      }
    } else {
      const T clipped = static_cast<T>(bounds.Clip(value, 0));
      for (int64_t q = first; q < last; ++q) out[s.pos[q]] = clipped;
    }
  }
}

// PAV of one group's sorted points [off, off + len), each block's mean (clipped) written
// to its points' input positions; zero-weight runs get the interpolated map
// (FillZeroRuns). `stack` is scratch.
template <typename T>
void PoolSegment(const Arrays& s, const Arrays& stack, int64_t off, int64_t len,
                 const Bounds<T>& bounds, T* out) {
  bool zero_run = false;  // a run of zero total weight (zero weights, or padding)
  const int64_t n_blocks = StackPav(s, stack, off, len, [&](int64_t first, uint64_t, double w) {
    zero_run |= !(w > 0.0);
    return first;
  });
  const int64_t end = off + len;
  if (!zero_run) return WriteBlocks(s, stack, n_blocks, end, bounds, out);
  bool has_left = false;
  double left_x = 0.0, left_v = 0.0;
  int64_t pending = -1;  // first position of zero-weight runs that wait for a right side
  int64_t b = 0;
  double value = n_blocks > 0 ? BlockMean(stack.y[0], stack.w[0]) : 0.0;
  int64_t next_block = n_blocks > 1 ? static_cast<int64_t>(stack.key[1]) : end;
  for (int64_t p = off; p < end;) {
    while (p >= next_block) {  // blocks start at runs: the run at p is in block b
      ++b;
      value = BlockMean(stack.y[b], stack.w[b]);
      next_block = b + 1 < n_blocks ? static_cast<int64_t>(stack.key[b + 1]) : end;
    }
    const uint64_t k = s.key[p];
    int64_t q = p;
    double rw = 0.0;
    for (; q < end && s.key[q] == k; ++q) rw += s.w[q];
    if (rw > 0.0) {
      const double x = KeyValue(k);
      if (pending >= 0) {
        FillZeroRuns(s, pending, p, has_left, left_x, left_v, true, x, value, bounds, out);
        pending = -1;
      }
      for (int64_t r = p; r < q; ++r) {
        out[s.pos[r]] = static_cast<T>(bounds.Clip(value, s.pos[r]));
      }
      has_left = true;
      left_x = x;
      left_v = value;
    } else if (pending < 0) {
      pending = p;
    }
    p = q;
  }
  if (pending >= 0) {
    FillZeroRuns(s, pending, end, has_left, left_x, left_v, false, 0.0, 0.0, bounds, out);
  }
}

// The run-level result of one problem (no groups) from its sorted points `s`: run scores,
// weights and fitted values, and which runs start a PAV block, for runs 0 .. n_runs - 1
// (entries beyond are 0, with block_start 1). `stack` is scratch.
template <typename T>
int64_t PoolRuns(const Arrays& s, const Arrays& stack, int64_t len, T* run_x, T* run_w,
                 T* run_value, int32_t* block_start) {
  int64_t n_runs = 0;
  const int64_t n_blocks = StackPav(s, stack, 0, len, [&](int64_t, uint64_t key, double w) {
    run_x[n_runs] = static_cast<T>(KeyValue(key));  // exact: keys of T's values
    run_w[n_runs] = static_cast<T>(w);
    return n_runs++;
  });
  for (int64_t b = 0; b < n_blocks; ++b) {
    const T value = static_cast<T>(BlockMean(stack.y[b], stack.w[b]));
    const int64_t first = static_cast<int64_t>(stack.key[b]);
    const int64_t last = b + 1 == n_blocks ? n_runs : static_cast<int64_t>(stack.key[b + 1]);
    for (int64_t r = first; r < last; ++r) {
      run_value[r] = value;
      block_start[r] = r == first;
    }
  }
  for (int64_t r = n_runs; r < len; ++r) {
    run_x[r] = run_w[r] = run_value[r] = T(0);
    block_start[r] = 1;
  }
  return n_runs;
}

// Loads points [0, len) of the inputs into `a` at [0, len), with input positions from `pos0`.
// Weights below T's smallest normal number count as zero, as normalize_weights makes them
// (weights normalised on the host arrive as they are).
template <typename T>
void Fill(const Arrays& a, int64_t len, const T* x, const T* y, const T* w, int64_t pos0) {
  constexpr T kTiny = std::numeric_limits<T>::min();
  for (int64_t i = 0; i < len; ++i) {
    a.key[i] = FloatKey(x[i]);
    a.pos[i] = static_cast<uint32_t>(pos0 + i);
    a.y[i] = static_cast<double>(y[i]);
    a.w[i] = w[i] >= kTiny ? static_cast<double>(w[i]) : 0.0;
  }
}

// Whether the ids of `group` never decrease (contiguous groups: per user, per rank, ...);
// if so, the start of every group after the first is appended to `segments`, then n.
// One pass, which stops at the first id that decreases.
template <typename G>
bool ContiguousSegments(const G* group, int64_t n, std::vector<int64_t>& segments) {
  for (int64_t i = 1; i < n; ++i) {
    if (group[i] == group[i - 1]) continue;
    if (group[i] < group[i - 1]) return false;
    segments.push_back(i);
  }
  segments.push_back(n);
  return true;
}

template <typename T, typename G>
void SolveProblem(Workspace& ws, int64_t n, const T* x, const T* y, const T* w, const G* group,
                  const Bounds<T>& bounds, T* out) {
  std::vector<int64_t> segments{0};  // group segments (input order, or sorted order), then n
  if (group == nullptr ? (segments.push_back(n), true) : ContiguousSegments(group, n, segments)) {
    // One problem, or groups already contiguous (per user, per rank, ...): no group sort,
    // and each group is loaded, sorted and pooled while its points are in cache.
    int64_t longest = 0;
    for (size_t g = 0; g + 1 < segments.size(); ++g) {
      longest = std::max(longest, segments[g + 1] - segments[g]);
    }
    ws.Reserve(longest);
    for (size_t g = 0; g + 1 < segments.size(); ++g) {
      const int64_t at = segments[g], len = segments[g + 1] - at;
      Fill(ws.a(), len, x + at, y + at, w + at, at);
      // Touch the group's output in order first: the PAV writes it in score order, and
      // lines that are already cached make those writes ~10% of the run time cheaper.
      std::fill(out + at, out + at + len, T(0));
      SortInto(ws, ws.a(), ws.b(), 0, len, /*float_keys=*/true, 0);
      PoolSegment<T>(ws.b(), ws.a(), 0, len, bounds, out);
    }
    return;
  }
  // Sort by group (a small id range takes one counting pass), then by score per group.
  segments.assign(1, 0);
  ws.Reserve(n);
  Arrays& a = ws.a();
  Arrays& b = ws.b();
  Fill(b, n, x, y, w, 0);
  uint64_t* score_key = ws.score_key();
  std::memcpy(score_key, b.key, n * sizeof(uint64_t));
  for (int64_t i = 0; i < n; ++i) b.key[i] = IntKey(static_cast<int64_t>(group[i]));
  SortInto(ws, b, a, 0, n, /*float_keys=*/false, 0);
  for (int64_t p = 1; p < n; ++p) {
    if (a.key[p] != a.key[p - 1]) segments.push_back(p);
  }
  segments.push_back(n);
  for (int64_t p = 0; p < n; ++p) a.key[p] = score_key[a.pos[p]];
  for (size_t g = 0; g + 1 < segments.size(); ++g) {
    SortInto(ws, a, b, segments[g], segments[g + 1] - segments[g], /*float_keys=*/true, 0);
  }
  for (size_t g = 0; g + 1 < segments.size(); ++g) {  // `a` is free now: the PAV stack
    PoolSegment<T>(b, a, segments[g], segments[g + 1] - segments[g], bounds, out);
  }
}

// The buffers of problems of up to kKeepMax points (~1 GiB) are kept between calls.
using WorkspaceLease = jaxcal_native::WorkspaceLease<Workspace, kKeepMax>;

template <typename T>
ffi::Error Solve(ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::AnyBuffer w, ffi::AnyBuffer group,
                 ffi::AnyBuffer lo, ffi::AnyBuffer hi, bool has_group,
                 ffi::Result<ffi::AnyBuffer> out) {
  Batch batch;
  if (ffi::Error e = BatchOf(kPav, "x", x, 32, batch); e.failure()) return e;
  const auto dims = x.dimensions();
  const ffi::DataType t = x.element_type();
  for (ffi::Error e : {CheckLike(kPav, "y", y, t, x, kLikeX), CheckLike(kPav, "w", w, t, x, kLikeX),
                       CheckLike(kPav, "the fitted values (result)", *out, t, x, kLikeX)}) {
    if (e.failure()) return e;
  }
  const ffi::DataType gtype = group.element_type();
  if (has_group && ((gtype != ffi::DataType::S32 && gtype != ffi::DataType::S64) ||
                    !DimsAre(group.dimensions(), dims, 0))) {
    return ffi::Error::InvalidArgument("pav_cpu: group must be int32 or int64 of x's shape");
  }
  // bounds: [..., 1] (one per problem) or [..., n] (one per point)
  for (const ffi::AnyBuffer* bound : {&lo, &hi}) {
    if (bound->element_type() != t || !(DimsAre(bound->dimensions(), dims, 1, {1}) ||
                                        DimsAre(bound->dimensions(), dims, 0))) {
      return Mismatch(kPav, "bounds", "[..., 1] or [..., n] of x's dtype");
    }
  }
  const int64_t n = batch.n, n_problems = batch.problems();
  if (n_problems == 0) return ffi::Error::Success();
  const int64_t lo_width = static_cast<int64_t>(lo.element_count()) / n_problems;
  const int64_t hi_width = static_cast<int64_t>(hi.element_count()) / n_problems;
  const auto valid = [&](const ffi::AnyBuffer& bound, int64_t width) {
    return (width == 1 || width == n) &&
           static_cast<int64_t>(bound.element_count()) == width * n_problems;
  };
  if (!valid(lo, lo_width) || !valid(hi, hi_width)) {
    return ffi::Error::InvalidArgument("pav_cpu: bounds must be [..., 1] or [..., n]");
  }
  const T *xp = Data<T>(x), *yp = Data<T>(y), *wp = Data<T>(w);
  const T *lop = Data<T>(lo), *hip = Data<T>(hi);
  T* op = Data<T>(out);
  WorkspaceLease lease(n);
  Workspace& ws = lease.get();
  for (int64_t b = 0; b < n_problems; ++b) {
    const int64_t at = b * n;
    const Bounds<T> bd{lop + b * lo_width, hip + b * hi_width, lo_width == n ? 1 : 0,
                       hi_width == n ? 1 : 0};
    if (!has_group) {
      SolveProblem<T, int32_t>(ws, n, xp + at, yp + at, wp + at, nullptr, bd, op + at);
    } else if (gtype == ffi::DataType::S32) {
      const int32_t* g = Data<int32_t>(group, at);
      SolveProblem<T, int32_t>(ws, n, xp + at, yp + at, wp + at, g, bd, op + at);
    } else {
      const int64_t* g = Data<int64_t>(group, at);
      SolveProblem<T, int64_t>(ws, n, xp + at, yp + at, wp + at, g, bd, op + at);
    }
  }
  return ffi::Error::Success();
}

ffi::Error PavImpl(ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::AnyBuffer w, ffi::AnyBuffer group,
                   ffi::AnyBuffer lo, ffi::AnyBuffer hi, bool has_group,
                   ffi::Result<ffi::AnyBuffer> out) {
  return ForFloatType(kPav, x.element_type(), "x", [&](auto zero) {
    return Solve<decltype(zero)>(x, y, w, group, lo, hi, has_group, out);
  });
}

template <typename T>
ffi::Error SolveRuns(ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::AnyBuffer w,
                     ffi::Result<ffi::AnyBuffer> run_x, ffi::Result<ffi::AnyBuffer> run_w,
                     ffi::Result<ffi::AnyBuffer> run_value,
                     ffi::Result<ffi::Buffer<ffi::S32>> block_start,
                     ffi::Result<ffi::Buffer<ffi::S32>> n_runs) {
  Batch batch;
  if (ffi::Error e = BatchOf(kPav, "x", x, 32, batch); e.failure()) return e;
  const ffi::DataType t = x.element_type();
  constexpr const char* kInt32LikeX = "int32 of x's shape [..., n]";
  for (ffi::Error e : {CheckLike(kPav, "y", y, t, x, kLikeX), CheckLike(kPav, "w", w, t, x, kLikeX),
                       CheckLike(kPav, "run_x (result)", *run_x, t, x, kLikeX),
                       CheckLike(kPav, "run_weight (result)", *run_w, t, x, kLikeX),
                       CheckLike(kPav, "run_value (result)", *run_value, t, x, kLikeX),
                       CheckLike(kPav, "block_start (result)", *block_start, ffi::DataType::S32, x,
                                 kInt32LikeX),
                       CheckBatch(kPav, "n_runs (result)", *n_runs, ffi::DataType::S32, x, {},
                                  "int32 of x's batch shape [...]")}) {
    if (e.failure()) return e;
  }
  const int64_t n = batch.n;
  if (batch.problems() == 0) return ffi::Error::Success();
  WorkspaceLease lease(n);
  Workspace& ws = lease.get();
  ws.Reserve(n);
  for (int64_t b = 0; b < batch.problems(); ++b) {
    const int64_t at = b * n;
    Fill(ws.a(), n, Data<T>(x, at), Data<T>(y, at), Data<T>(w, at), 0);
    SortInto(ws, ws.a(), ws.b(), 0, n, /*float_keys=*/true, 0);
    n_runs->typed_data()[b] = static_cast<int32_t>(
        PoolRuns<T>(ws.b(), ws.a(), n, Data<T>(run_x, at), Data<T>(run_w, at),
                    Data<T>(run_value, at), block_start->typed_data() + at));
  }
  return ffi::Error::Success();
}

ffi::Error PavRunsImpl(ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::AnyBuffer w,
                       ffi::Result<ffi::AnyBuffer> run_x, ffi::Result<ffi::AnyBuffer> run_w,
                       ffi::Result<ffi::AnyBuffer> run_value,
                       ffi::Result<ffi::Buffer<ffi::S32>> block_start,
                       ffi::Result<ffi::Buffer<ffi::S32>> n_runs) {
  if (static_cast<int64_t>(x.element_count()) > int64_t{0x7FFFFFFF}) {
    return ffi::Error::InvalidArgument("pav_cpu: run counts are int32");
  }
  return ForFloatType(kPav, x.element_type(), "x", [&](auto zero) {
    return SolveRuns<decltype(zero)>(x, y, w, run_x, run_w, run_value, block_start, n_runs);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcalPavCpu, PavImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x [..., n]
                                  .Arg<ffi::AnyBuffer>()  // y [..., n]
                                  .Arg<ffi::AnyBuffer>()  // w [..., n]
                                  .Arg<ffi::AnyBuffer>()  // group [..., n] or a dummy
                                  .Arg<ffi::AnyBuffer>()  // lower bound [..., 1] or [..., n]
                                  .Arg<ffi::AnyBuffer>()  // upper bound [..., 1] or [..., n]
                                  .Attr<bool>("has_group")
                                  .Ret<ffi::AnyBuffer>());  // fitted [..., n]

// The run-level result of each problem (no groups), for the knots of a fitted calibrator.
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcalPavRunsCpu, PavRunsImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()            // x [..., n]
                                  .Arg<ffi::AnyBuffer>()            // y [..., n]
                                  .Arg<ffi::AnyBuffer>()            // w [..., n]
                                  .Ret<ffi::AnyBuffer>()            // run_x [..., n]
                                  .Ret<ffi::AnyBuffer>()            // run_weight [..., n]
                                  .Ret<ffi::AnyBuffer>()            // run_value [..., n]
                                  .Ret<ffi::Buffer<ffi::S32>>()     // block_start [..., n]
                                  .Ret<ffi::Buffer<ffi::S32>>());  // n_runs [...]
