// Per-row ridge systems (the ALS half-step of CMTRF) for XLA's CPU backend, as an XLA FFI
// handler.
//
// jaxcal/recsys/_cmtrf_core.py solves, in every ALS half-step, one small ridge system per
// row n (a user or an item) over the row's pairs j (its ratings):
//
//   x_n = (sum_j c_j f_j f_j^T + l2 I)^{-1} (sum_j r_j f_j + e_n),   f_j = other[col_j],
//
// with k = rank unknowns (5-20 typically). In pure JAX the Gram matrices are a segment_sum
// of per-pair outer products: a scatter of k (k + 1) / 2 values per pair, which XLA's CPU
// backend runs element by element and which is most of a fit's time. This handler walks
// each row's pairs (the pairs are sorted by row: CSR offsets `row_start`), copies their
// feature rows a block at a time to a buffer of doubles, sums the Gram matrix and the
// right-hand side in double precision whatever the input dtype (in vector registers, two
// Gram rows at a time, for ranks up to 16 compiled for each rank; an AVX2 + FMA build of
// the same code is picked at run time where the CPU has it), adds l2 I and solves by
// Cholesky. A row without pairs gets e_n / l2; a system that is not positive definite
// (l2 <= 0, non-finite data) gets NaN.
//
// Operands (per problem): other [m, k], col [P] int32, row_start [n + 1] int32, c [P],
// r [P], extra [n, k], l2 [1]; result x [n, k]. The floating operands share one dtype
// (float32 or float64). Leading dimensions are batch dimensions; each operand's leading
// dimensions are either the result's or 1 (shared by every problem: this is what
// vmap_method="expand_dims" passes, so the index arrays shared by a vmapped grid of
// problems are not copied). The problems' rows are split into chunks that the calling
// thread and XLA's intra-op thread pool take in turn; no thread waits for a task that has
// not started, so a busy pool only means fewer helpers.
//
// A second handler, JaxcalPairScoresCpu, returns the scores a[row_j] . b[col_j] of pairs
// (the fit's level statistics, validation predictions and Newton steps need them every
// sweep; XLA's CPU gathers of factor rows cost several times more).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "ffi_checks.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using jaxcal_native::Data, jaxcal_native::ForFloatType;

namespace {

constexpr int64_t kRowsPerChunk = 64;
constexpr int64_t kPairsPerChunk = 16384;
// Problems with fewer multiply-adds than this are solved by the calling thread alone.
constexpr int64_t kParallelWork = int64_t{1} << 18;

// Where each problem of a batch starts in one operand (in elements): the operand's leading
// dimensions are the batch's or 1 (broadcast).
struct Operand {
  const void* data = nullptr;
  std::vector<int64_t> offset;  // per problem
};

// Fills `op.offset` for the batch `batch_dims` from the operand's dimensions (its last
// `core_rank` ones form one problem of `core_size` elements); false if they do not fit.
bool Broadcast(const ffi::AnyBuffer& buffer, const std::vector<int64_t>& batch_dims,
               int64_t core_rank, Operand& op) {
  const auto dims = buffer.dimensions();
  const int64_t q = static_cast<int64_t>(batch_dims.size());
  if (static_cast<int64_t>(dims.size()) != q + core_rank) return false;
  int64_t core_size = 1;
  for (int64_t i = q; i < q + core_rank; ++i) core_size *= dims[i];
  std::vector<int64_t> stride(q, 0);
  int64_t step = core_size, batch = 1;
  for (int64_t i = q - 1; i >= 0; --i) {
    if (dims[i] != 1 && dims[i] != batch_dims[i]) return false;
    stride[i] = dims[i] == 1 ? 0 : step;
    step *= dims[i];
    batch *= batch_dims[i];
  }
  op.data = buffer.untyped_data();
  op.offset.assign(batch, 0);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t rest = b, at = 0;
    for (int64_t i = q - 1; i >= 0; --i) {
      at += (rest % batch_dims[i]) * stride[i];
      rest /= batch_dims[i];
    }
    op.offset[b] = at;
  }
  return true;
}

template <typename T>
const T* At(const Operand& op, int64_t b) {
  return static_cast<const T*>(op.data) + op.offset[b];
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define JAXCAL_RIDGE_X86 1
#define JAXCAL_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define JAXCAL_ALWAYS_INLINE inline
#endif

// Solves G x = rhs in place (x overwrites rhs) for the symmetric G whose upper triangle is
// in `g` (row-major k x k; overwritten by its Cholesky factor U, G = U^T U). False if G is
// not positive definite. `K` > 0 fixes k at compile time (unrolled loops).
template <int K>
JAXCAL_ALWAYS_INLINE bool CholeskySolve(double* g, double* rhs, int64_t k_dynamic) {
  const int64_t k = K > 0 ? K : k_dynamic;
  for (int64_t j = 0; j < k; ++j) {
    double* gj = g + j * k;
    double d = gj[j];
    for (int64_t p = 0; p < j; ++p) d -= g[p * k + j] * g[p * k + j];
    if (!(d > 0.0)) return false;  // also NaN
    d = std::sqrt(d);
    gj[j] = d;
    const double inv = 1.0 / d;
    for (int64_t i = j + 1; i < k; ++i) {
      double s = gj[i];
      for (int64_t p = 0; p < j; ++p) s -= g[p * k + j] * g[p * k + i];
      gj[i] = s * inv;
    }
  }
  for (int64_t i = 0; i < k; ++i) {  // U^T y = rhs
    double s = rhs[i];
    for (int64_t p = 0; p < i; ++p) s -= g[p * k + i] * rhs[p];
    rhs[i] = s / g[i * k + i];
  }
  for (int64_t i = k - 1; i >= 0; --i) {  // U x = y
    double s = rhs[i];
    for (int64_t p = i + 1; p < k; ++p) s -= g[i * k + p] * rhs[p];
    rhs[i] = s / g[i * k + i];
  }
  return true;
}

// One problem's operands and the buffers of one thread.
template <typename T>
struct Problem {
  const T* other;
  const int32_t* col;
  const int32_t* row_start;
  const T* c;
  const T* r;
  const T* extra;
  double l2;
  T* x;
};

// Gram matrix (`g`, the upper triangle of k x k row-major) and right-hand side of row n, in
// double precision, for a rank known only at run time. `f`: k doubles of scratch.
template <typename T>
void AccumulateRow(const Problem<T>& p, int64_t n, int64_t k, double* __restrict g,
                   double* __restrict rhs, double* __restrict f) {
  std::fill(g, g + k * k, 0.0);
  std::fill(rhs, rhs + k, 0.0);
  for (int64_t j = p.row_start[n]; j < p.row_start[n + 1]; ++j) {
    const T* o = p.other + static_cast<int64_t>(p.col[j]) * k;
    const double cj = static_cast<double>(p.c[j]), rj = static_cast<double>(p.r[j]);
    for (int64_t a = 0; a < k; ++a) {
      f[a] = static_cast<double>(o[a]);
      rhs[a] += rj * f[a];
    }
    for (int64_t a = 0; a < k; ++a) {
      const double ca = cj * f[a];
      double* ga = g + a * k;
      for (int64_t b = a; b < k; ++b) ga[b] += ca * f[b];
    }
  }
}

constexpr int kBlock = 128;  // pairs per block of the fixed-rank accumulation

// W doubles (GCC / Clang vector extension), loaded unaligned: W = 4 (AVX registers) in the
// AVX2 build, W = 2 (SSE2) in the baseline one.
template <int W>
struct Vec {
  typedef double type __attribute__((vector_size(8 * W), aligned(8)));
};

// Rows A0 .. A0 + R - 1 of the Gram matrix of a block of `len` pairs (`buf`: the pairs'
// feature rows padded to KP doubles, `cbuf` their weights), summed in registers and added
// to `g` (k x k, row-major; only the vectors that hold a column >= A0), then the next R rows.
// Rows past K read the padding (zeros) and are not stored.
template <int K, int W, int R, int A0>
JAXCAL_ALWAYS_INLINE void GramRows(const double* __restrict buf, const double* __restrict cbuf,
                                   int64_t len, double* __restrict g) {
  if constexpr (A0 < K) {
    using V = typename Vec<W>::type;
    constexpr int KP = (K + 3) / 4 * 4, V0 = A0 / W, NV = KP / W;
    static_assert(A0 + R <= KP, "rows past the padding");
    V acc[R][NV] = {};
    for (int64_t t = 0; t < len; ++t) {
      const double* bt = buf + t * KP;
      double s[R];
      for (int r = 0; r < R; ++r) s[r] = cbuf[t] * bt[A0 + r];
      for (int v = V0; v < NV; ++v) {
        const V f = *reinterpret_cast<const V*>(bt + W * v);
        for (int r = 0; r < R; ++r) acc[r][v] += s[r] * f;
      }
    }
    for (int r = 0; r < R && A0 + r < K; ++r) {
      for (int v = V0; v < NV; ++v) {
        for (int i = 0; i < W && W * v + i < K; ++i) g[(A0 + r) * K + W * v + i] += acc[r][v][i];
      }
    }
    GramRows<K, W, R, A0 + R>(buf, cbuf, len, g);
  }
}

// The same for a rank `K` fixed at compile time: the row's pairs are copied, a block at a
// time, to a buffer of doubles (rows padded to `KP`, a multiple of 4, with zeros); then the
// Gram matrix is summed over the block two rows at a time in vector registers (GramRows:
// loads and stores of `g` once per block instead of once per pair). `buf`:
// kBlock * (KP + 1) doubles. The lower triangle is partly summed too (whole vectors).
template <typename T, int K, int W>
JAXCAL_ALWAYS_INLINE void AccumulateRowFixed(const Problem<T>& p, int64_t n,
                                             double* __restrict g, double* __restrict rhs,
                                             double* __restrict buf) {
  constexpr int KP = (K + 3) / 4 * 4;
  double* __restrict cbuf = buf + kBlock * KP;
  std::fill(g, g + K * K, 0.0);
  std::fill(rhs, rhs + K, 0.0);
  const int64_t end = p.row_start[n + 1];
  for (int64_t j0 = p.row_start[n]; j0 < end; j0 += kBlock) {
    const int64_t len = std::min<int64_t>(kBlock, end - j0);
    for (int64_t t = 0; t < len; ++t) {
      const T* o = p.other + static_cast<int64_t>(p.col[j0 + t]) * K;
      const double rj = static_cast<double>(p.r[j0 + t]);
      double* bt = buf + t * KP;
      for (int b = 0; b < K; ++b) {
        bt[b] = static_cast<double>(o[b]);
        rhs[b] += rj * bt[b];
      }
      for (int b = K; b < KP; ++b) bt[b] = 0.0;
      cbuf[t] = static_cast<double>(p.c[j0 + t]);
    }
    GramRows<K, W, 2, 0>(buf, cbuf, len, g);
  }
}

// Rows [lo, hi) of one problem: accumulate, add l2 I and `extra`, solve. `K` > 0 fixes the
// rank at compile time; `K` == 0 reads it from `k`. `work`: WorkSize(k) doubles.
template <typename T, int K, int W>
JAXCAL_ALWAYS_INLINE void SolveRowsBody(const Problem<T>& p, int64_t k_dynamic, int64_t lo,
                                        int64_t hi, double* work) {
  const int64_t k = K > 0 ? K : k_dynamic;
  double* g = work;
  double* rhs = g + k * k;
  double* scratch = rhs + k;
  for (int64_t n = lo; n < hi; ++n) {
    T* out = p.x + n * k;
    const T* e = p.extra + n * k;
    if (p.row_start[n] == p.row_start[n + 1]) {  // no pairs: extra / l2
      const double l2 = p.l2 > 0.0 ? p.l2 : std::numeric_limits<double>::quiet_NaN();
      for (int64_t a = 0; a < k; ++a) out[a] = static_cast<T>(static_cast<double>(e[a]) / l2);
      continue;
    }
    if constexpr (K > 0) {
      AccumulateRowFixed<T, K, W>(p, n, g, rhs, scratch);
    } else {
      AccumulateRow<T>(p, n, k, g, rhs, scratch);
    }
    for (int64_t a = 0; a < k; ++a) {
      g[a * k + a] += p.l2;
      rhs[a] += static_cast<double>(e[a]);
    }
    if (CholeskySolve<K>(g, rhs, k)) {
      for (int64_t a = 0; a < k; ++a) out[a] = static_cast<T>(rhs[a]);
    } else {
      std::fill(out, out + k, std::numeric_limits<T>::quiet_NaN());
    }
  }
}

// Doubles of work space a thread needs for rank k (either accumulation).
int64_t WorkSize(int64_t k) { return k * k + k + std::max<int64_t>(k, kBlock * (k + 4)); }

template <typename T>
using RowSolver = void (*)(const Problem<T>&, int64_t, int64_t, int64_t, double*);

template <typename T, int K>
void SolveRows(const Problem<T>& p, int64_t k, int64_t lo, int64_t hi, double* work) {
  SolveRowsBody<T, K, 2>(p, k, lo, hi, work);
}

#ifdef JAXCAL_RIDGE_X86
// The same, compiled for AVX2 + FMA (4 doubles a vector), picked at run time when the CPU
// has them (the library itself is built for the baseline instruction set).
template <typename T, int K>
__attribute__((target("avx2,fma"))) void SolveRowsAvx2(const Problem<T>& p, int64_t k,
                                                        int64_t lo, int64_t hi, double* work) {
  SolveRowsBody<T, K, 4>(p, k, lo, hi, work);
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

// Scores of pairs [lo, hi) (ids checked already). `K` > 0 fixes the rank at compile time
// (unrolled loops).
template <typename T, int K>
JAXCAL_ALWAYS_INLINE void ScorePairsBody(const T* a, const T* b, const int32_t* rows,
                                         const int32_t* cols, int64_t k_dynamic, int64_t lo,
                                         int64_t hi, T* score) {
  const int64_t k = K > 0 ? K : k_dynamic;
  for (int64_t j = lo; j < hi; ++j) {
    const T* x = a + static_cast<int64_t>(rows[j]) * k;
    const T* y = b + static_cast<int64_t>(cols[j]) * k;
    double s[4] = {0.0, 0.0, 0.0, 0.0};  // four chains of additions, not one
    int64_t d = 0;
    for (; d + 4 <= k; d += 4) {
      for (int i = 0; i < 4; ++i) s[i] += static_cast<double>(x[d + i]) * y[d + i];
    }
    for (; d < k; ++d) s[0] += static_cast<double>(x[d]) * y[d];
    score[j] = static_cast<T>((s[0] + s[1]) + (s[2] + s[3]));
  }
}

template <typename T, int K>
void ScorePairs(const T* a, const T* b, const int32_t* rows, const int32_t* cols, int64_t k,
                int64_t lo, int64_t hi, T* score) {
  ScorePairsBody<T, K>(a, b, rows, cols, k, lo, hi, score);
}

#ifdef JAXCAL_RIDGE_X86
template <typename T, int K>
__attribute__((target("avx2,fma"))) void ScorePairsAvx2(const T* a, const T* b,
                                                         const int32_t* rows,
                                                         const int32_t* cols, int64_t k,
                                                         int64_t lo, int64_t hi, T* score) {
  ScorePairsBody<T, K>(a, b, rows, cols, k, lo, hi, score);
}
#endif

template <typename T>
using PairScorer = void (*)(const T*, const T*, const int32_t*, const int32_t*, int64_t, int64_t,
                            int64_t, T*);

// pick(std::integral_constant<int, K>{}) for the rank k: K = k up to 16 (code compiled for
// that rank), K = 0 (the rank read at run time) above.
template <int K, typename Pick>
auto ForRank(int64_t k, Pick pick) {
  if constexpr (K > 16) {
    return pick(std::integral_constant<int, 0>{});
  } else {
    return k == K ? pick(std::integral_constant<int, K>{}) : ForRank<K + 1>(k, pick);
  }
}

// The row solver and the pair scorer of rank k (the AVX2 builds where the CPU has them).
template <typename T>
struct Kernels {
  RowSolver<T> solve_rows;
  PairScorer<T> score_pairs;
};

template <typename T>
Kernels<T> PickKernels(int64_t k) {
  return ForRank<1>(k, [](auto rank) -> Kernels<T> {
    constexpr int K = decltype(rank)::value;
#ifdef JAXCAL_RIDGE_X86
    if (HasAvx2()) return {&SolveRowsAvx2<T, K>, &ScorePairsAvx2<T, K>};
#endif
    return {&SolveRows<T, K>, &ScorePairs<T, K>};
  });
}

// The chunks of a call (problem b, rows [lo, hi)), taken in turn by the calling thread and
// the pool's helpers. Shared by pointer with the helpers: one that starts after the call
// returned finds no chunk left and touches nothing else.
struct Schedule {
  std::atomic<int64_t> next{0};
  int64_t n_chunks = 0;
  std::mutex mutex;
  std::condition_variable finished;
  int64_t done = 0;  // under `mutex`
};

// Runs `chunk(i, work)` for every i in [0, n_chunks): on the calling thread and, when
// `parallel`, on up to num_threads - 1 helpers of XLA's intra-op pool; each thread gets
// `work_size` doubles of scratch. Returns when every chunk is done, waiting only for chunks
// that a running helper took (a helper that has not started is not waited for).
template <typename Chunk>
void RunChunks(ffi::ThreadPool& pool, int64_t n_chunks, bool parallel, int64_t work_size,
               Chunk chunk) {
  auto schedule = std::make_shared<Schedule>();
  schedule->n_chunks = n_chunks;
  auto run = [=](Schedule& s) {  // takes chunks until none is left; returns how many
    std::vector<double> work(work_size);
    int64_t solved = 0;
    for (int64_t i = s.next.fetch_add(1); i < s.n_chunks; i = s.next.fetch_add(1), ++solved) {
      chunk(i, work.data());
    }
    return solved;
  };
  const int64_t helpers = parallel ? std::min(pool.num_threads(), n_chunks) - 1 : 0;
  for (int64_t h = 0; h < helpers; ++h) {
    pool.Schedule([schedule, run]() {
      const int64_t solved = run(*schedule);
      if (solved == 0) return;
      std::lock_guard<std::mutex> lock(schedule->mutex);
      schedule->done += solved;
      if (schedule->done == schedule->n_chunks) schedule->finished.notify_all();
    });
  }
  const int64_t solved = run(*schedule);
  std::unique_lock<std::mutex> lock(schedule->mutex);
  schedule->done += solved;
  schedule->finished.wait(lock, [&] { return schedule->done == schedule->n_chunks; });
}

template <typename T>
ffi::Error Solve(ffi::ThreadPool pool, ffi::AnyBuffer other, ffi::AnyBuffer col,
                 ffi::AnyBuffer row_start, ffi::AnyBuffer c, ffi::AnyBuffer r,
                 ffi::AnyBuffer extra, ffi::AnyBuffer l2, ffi::Result<ffi::AnyBuffer> x) {
  const auto out_dims = x->dimensions();
  if (out_dims.size() < 2) return ffi::Error::InvalidArgument("ridge_cpu: x must be [..., n, k]");
  const std::vector<int64_t> batch_dims(out_dims.begin(), out_dims.end() - 2);
  const int64_t n = out_dims[out_dims.size() - 2], k = out_dims.back();
  const auto other_dims = other.dimensions();
  if (other_dims.size() < 2 || other_dims.back() != k) {
    return ffi::Error::InvalidArgument("ridge_cpu: other must be [..., m, k]");
  }
  const int64_t m = other_dims[other_dims.size() - 2];
  const int64_t n_pairs = col.dimensions().size() == 0 ? -1 : col.dimensions().back();
  for (const ffi::AnyBuffer* b : {&c, &r}) {
    if (b->dimensions().size() == 0 || b->dimensions().back() != n_pairs) {
      return ffi::Error::InvalidArgument("ridge_cpu: c and r must have one entry per pair");
    }
  }
  const auto rs_dims = row_start.dimensions(), extra_dims = extra.dimensions();
  if (rs_dims.size() == 0 || rs_dims.back() != n + 1 || extra_dims.size() < 2 ||
      extra_dims.back() != k || extra_dims[extra_dims.size() - 2] != n ||
      l2.dimensions().size() == 0 || l2.dimensions().back() != 1) {
    return ffi::Error::InvalidArgument(
        "ridge_cpu: row_start must be [..., n + 1], extra [..., n, k], l2 [..., 1]");
  }
  for (const ffi::AnyBuffer* b : {&other, &c, &r, &extra, &l2}) {
    if (b->element_type() != x->element_type()) {
      return ffi::Error::InvalidArgument("ridge_cpu: the float operands must share a dtype");
    }
  }
  if (col.element_type() != ffi::DataType::S32 || row_start.element_type() != ffi::DataType::S32) {
    return ffi::Error::InvalidArgument("ridge_cpu: col and row_start must be int32");
  }
  Operand o_other, o_col, o_start, o_c, o_r, o_extra, o_l2;
  const bool fits = Broadcast(other, batch_dims, 2, o_other) &&
                    Broadcast(col, batch_dims, 1, o_col) &&
                    Broadcast(row_start, batch_dims, 1, o_start) &&
                    Broadcast(c, batch_dims, 1, o_c) && Broadcast(r, batch_dims, 1, o_r) &&
                    Broadcast(extra, batch_dims, 2, o_extra) && Broadcast(l2, batch_dims, 1, o_l2);
  if (!fits) {
    return ffi::Error::InvalidArgument(
        "ridge_cpu: each operand's batch dimensions must be the result's or 1");
  }
  const int64_t batch = static_cast<int64_t>(o_other.offset.size());
  if (batch == 0 || n == 0 || k == 0) return ffi::Error::Success();

  // the index arrays, once per distinct operand (shared ones once in all)
  for (int64_t b = 0; b < batch; ++b) {
    if (b > 0 && o_start.offset[b] == o_start.offset[b - 1] &&
        o_col.offset[b] == o_col.offset[b - 1]) {
      continue;
    }
    const int32_t* start = At<int32_t>(o_start, b);
    const int32_t* cols = At<int32_t>(o_col, b);
    if (start[0] < 0 || start[n] > n_pairs) {
      return ffi::Error::InvalidArgument("ridge_cpu: row_start out of [0, P]");
    }
    for (int64_t i = 0; i < n; ++i) {
      if (start[i + 1] < start[i]) {
        return ffi::Error::InvalidArgument("ridge_cpu: row_start must be non-decreasing");
      }
    }
    for (int64_t j = start[0]; j < start[n]; ++j) {
      if (cols[j] < 0 || cols[j] >= m) {
        return ffi::Error::InvalidArgument("ridge_cpu: col out of [0, m)");
      }
    }
  }

  std::vector<Problem<T>> problems(batch);
  for (int64_t b = 0; b < batch; ++b) {
    problems[b] = Problem<T>{At<T>(o_other, b),
                             At<int32_t>(o_col, b),
                             At<int32_t>(o_start, b),
                             At<T>(o_c, b),
                             At<T>(o_r, b),
                             At<T>(o_extra, b),
                             static_cast<double>(*At<T>(o_l2, b)),
                             Data<T>(x, b * n * k)};
  }
  const RowSolver<T> solve_rows = PickKernels<T>(k).solve_rows;
  const int64_t chunks_per_problem = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  const bool parallel = (n_pairs + n) * k * k * batch >= kParallelWork;
  const Problem<T>* each = problems.data();
  RunChunks(pool, batch * chunks_per_problem, parallel, WorkSize(k), [=](int64_t i, double* work) {
    const int64_t b = i / chunks_per_problem, lo = (i % chunks_per_problem) * kRowsPerChunk;
    solve_rows(each[b], k, lo, std::min(n, lo + kRowsPerChunk), work);
  });
  return ffi::Error::Success();
}

ffi::Error RidgeImpl(ffi::ThreadPool pool, ffi::AnyBuffer other, ffi::AnyBuffer col,
                     ffi::AnyBuffer row_start, ffi::AnyBuffer c, ffi::AnyBuffer r,
                     ffi::AnyBuffer extra, ffi::AnyBuffer l2, ffi::Result<ffi::AnyBuffer> x) {
  return ForFloatType("ridge_cpu", x->element_type(), "the operands", [&](auto zero) {
    return Solve<decltype(zero)>(pool, other, col, row_start, c, r, extra, l2, x);
  });
}

// score_j = a[row_j] . b[col_j] for every pair (double accumulation): the scores of a
// problem's pairs, which XLA's CPU backend would gather row by row.
template <typename T>
ffi::Error PairScores(ffi::ThreadPool pool, ffi::AnyBuffer a, ffi::AnyBuffer b,
                      ffi::AnyBuffer row, ffi::AnyBuffer col, ffi::Result<ffi::AnyBuffer> out) {
  const auto out_dims = out->dimensions(), a_dims = a.dimensions(), b_dims = b.dimensions();
  if (out_dims.size() == 0 || a_dims.size() < 2 || b_dims.size() < 2 ||
      a_dims.back() != b_dims.back()) {
    return ffi::Error::InvalidArgument("pair_scores_cpu: a [..., n, k], b [..., m, k]");
  }
  const std::vector<int64_t> batch_dims(out_dims.begin(), out_dims.end() - 1);
  const int64_t n_pairs = out_dims.back(), k = a_dims.back();
  const int64_t n = a_dims[a_dims.size() - 2], m = b_dims[b_dims.size() - 2];
  for (const ffi::AnyBuffer* ids : {&row, &col}) {
    if (ids->element_type() != ffi::DataType::S32 || ids->dimensions().size() == 0 ||
        ids->dimensions().back() != n_pairs) {
      return ffi::Error::InvalidArgument("pair_scores_cpu: row and col must be int32 [..., P]");
    }
  }
  if (a.element_type() != out->element_type() || b.element_type() != out->element_type()) {
    return ffi::Error::InvalidArgument("pair_scores_cpu: a and b must share the result's dtype");
  }
  Operand o_a, o_b, o_row, o_col;
  if (!(Broadcast(a, batch_dims, 2, o_a) && Broadcast(b, batch_dims, 2, o_b) &&
        Broadcast(row, batch_dims, 1, o_row) && Broadcast(col, batch_dims, 1, o_col))) {
    return ffi::Error::InvalidArgument(
        "pair_scores_cpu: each operand's batch dimensions must be the result's or 1");
  }
  const int64_t batch = static_cast<int64_t>(o_a.offset.size());
  for (int64_t i = 0; i < batch; ++i) {  // the ids, once per distinct operand
    const bool same = i > 0 && o_row.offset[i] == o_row.offset[i - 1] &&
                      o_col.offset[i] == o_col.offset[i - 1];
    if (same) continue;
    const int32_t *rows = At<int32_t>(o_row, i), *cols = At<int32_t>(o_col, i);
    for (int64_t j = 0; j < n_pairs; ++j) {
      if (rows[j] < 0 || rows[j] >= n || cols[j] < 0 || cols[j] >= m) {
        return ffi::Error::InvalidArgument("pair_scores_cpu: row or col out of range");
      }
    }
  }
  if (batch == 0 || n_pairs == 0) return ffi::Error::Success();
  const PairScorer<T> score_pairs = PickKernels<T>(k).score_pairs;
  const int64_t per_problem = (n_pairs + kPairsPerChunk - 1) / kPairsPerChunk;
  T* scores = Data<T>(out);
  RunChunks(pool, batch * per_problem, n_pairs * k * batch >= kParallelWork, 0,
            [&, scores](int64_t c, double*) {
              const int64_t i = c / per_problem, lo = (c % per_problem) * kPairsPerChunk;
              score_pairs(At<T>(o_a, i), At<T>(o_b, i), At<int32_t>(o_row, i),
                          At<int32_t>(o_col, i), k, lo, std::min(n_pairs, lo + kPairsPerChunk),
                          scores + i * n_pairs);
            });
  return ffi::Error::Success();
}

ffi::Error PairScoresImpl(ffi::ThreadPool pool, ffi::AnyBuffer a, ffi::AnyBuffer b,
                          ffi::AnyBuffer row, ffi::AnyBuffer col, ffi::Result<ffi::AnyBuffer> out) {
  return ForFloatType("pair_scores_cpu", out->element_type(), "the factors", [&](auto zero) {
    return PairScores<decltype(zero)>(pool, a, b, row, col, out);
  });
}

}  // namespace

// x_n = (sum_j c_j f_j f_j^T + l2 I)^{-1} (sum_j r_j f_j + extra_n) for every row n.
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcalRidgeCpu, RidgeImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()     // other [..., m, k]
                                  .Arg<ffi::AnyBuffer>()     // col [..., P] int32
                                  .Arg<ffi::AnyBuffer>()     // row_start [..., n + 1] int32
                                  .Arg<ffi::AnyBuffer>()     // c [..., P]
                                  .Arg<ffi::AnyBuffer>()     // r [..., P]
                                  .Arg<ffi::AnyBuffer>()     // extra [..., n, k]
                                  .Arg<ffi::AnyBuffer>()     // l2 [..., 1]
                                  .Ret<ffi::AnyBuffer>());  // x [..., n, k]

// score_j = a[row_j] . b[col_j] for every pair.
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcalPairScoresCpu, PairScoresImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()     // a [..., n, k]
                                  .Arg<ffi::AnyBuffer>()     // b [..., m, k]
                                  .Arg<ffi::AnyBuffer>()     // row [..., P] int32
                                  .Arg<ffi::AnyBuffer>()     // col [..., P] int32
                                  .Ret<ffi::AnyBuffer>());  // scores [..., P]
