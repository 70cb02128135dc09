// ENIR (ensemble of near-isotonic regressions, Naeini & Cooper 2016) for XLA's CPU
// backend, as XLA FFI handlers.
//
// jaxcal/calibrators/enir.py traces the near-isotonic path (Tibshirani, Hoefling &
// Tibshirani 2011) in pure JAX: a lax.while_loop with one merge of two adjacent groups per
// iteration. On a CPU each iteration pays the loop runtime's per-step cost (about 5
// microseconds), far more than the merge itself needs. These handlers run the same
// algorithm sequentially, in double precision whatever the input dtype, on the tie-pooled
// runs that the Python caller builds (run weights W, mean targets y, positive / negative
// weights s1 and s0, and a mask of the real runs, which come first; the rest is padding):
//
//   1. the path (modified PAV). Groups of adjacent runs move linearly in lambda with slope
//      (1[left neighbour above] - 1[right neighbour below]) / W and fuse when two adjacent
//      ones collide; they never split. The next collision is the top of an indexed 4-ary
//      heap of the adjacent pairs' collision lambdas, ordered by (lambda, left group): the
//      first minimum, as the JAX tournament tree picks it, so both make the same merges in
//      the same order. A merge changes only the merged group's slope (the two merging
//      groups are equal when they merge, so the neighbours stay on the same side of it), so
//      it updates three heap entries. Pairs that are equal already merge at lambda = 0, in
//      one sweep before the heap is built (the heap's order, without the heap). Merges
//      closer than a relative 1e-12 in lambda are simultaneous: they happen at the first
//      one's lambda and make one breakpoint model (lambda = 0 excluded);
//   2. the ENIR average (JaxcalEnirCpu only). A *segment* is a group between the merge that
//      makes it and the merge that ends it, moving linearly in lambda. When a segment ends,
//      the path records its least log-loss over the values it took; summed over the
//      segments alive at a breakpoint, plus K log N, that bounds the breakpoint's BIC from
//      below. The final (isotonic) model is scored exactly; a breakpoint whose bound
//      exceeds that BIC by more than 2 (40 + log M) (M models) carries less than e^-40 / M
//      of the best model's weight and is skipped. The others are scored exactly from the
//      segments that hold one of them (static segments add a constant over their span of
//      models, moving ones are evaluated at each scored model in their span), weighted by
//      exp(-BIC / 2) normalised by logsumexp, and the averaged value of each run is the sum
//      over the segments that contain it of the weighted sum of the segment's values over
//      its span (prefix sums of the weights and of weight x lambda), added up by a
//      difference array over the runs.
//
// Every rule (the tolerance for "already equal", the simultaneity of merges, the clipping
// of fitted values in the likelihood, the pruning margin and slack) is the JAX code's, so
// both give the same models; the averaged values agree to rounding. Inputs are [..., N]:
// every leading index is one problem (how vmap reaches the handler).
//
// Two handlers: JaxcalEnirCpu returns the averaged run values, the number of models on the
// path and the number scored exactly; JaxcalNearIsotonicCpu returns the path's fit at one
// lambda (near_isotonic_regression).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "ffi_checks.h"
#include "workspace_lease.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using jaxcal_native::Batch, jaxcal_native::BatchOf, jaxcal_native::CheckBatch,
    jaxcal_native::CheckLike, jaxcal_native::Data, jaxcal_native::ForFloatType;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kSimultaneous = 1e-12;  // merges closer than this (relative) in lambda
constexpr double kLogWeightMargin = 40.0;  // enir.py's _LOG_W_MARGIN
constexpr double kBoundSlack = 1e-9;       // relative slack of the pruning test (rounding)
constexpr int64_t kKeepMax = int64_t{1} << 21;  // largest problem whose buffers are kept

// Value at `lam` of a group that was `v0` at `lam0` and moves with `slope` (a static group
// keeps its value exactly).
inline double At(double v0, double lam0, double slope, double lam) {
  return v0 + (slope == 0.0 ? 0.0 : slope * (lam - lam0));
}

// Absolute lambda at which adjacent groups a < b (values va, vb at `lam`, slopes sa, sb)
// meet: `lam` if they are equal already (within `tol`), inf if they never do.
inline double Collision(double va, double vb, double sa, double sb, double lam, double tol) {
  const double num = va - vb, den = sb - sa;
  if (std::abs(num) <= tol) return lam;
  if (den != 0.0) {
    const double t = num / den;
    if (t > 0.0) return lam + t;
  }
  return kInf;
}

// jnp.clip: min(max(x, lo), hi).
inline double Clip(double x, double lo, double hi) { return std::min(std::max(x, lo), hi); }

// -(s1 log p + s0 log(1 - p)) for p in [eps, 1 - eps]; a zero weight skips its logarithm
// (0 log p = 0 exactly there), which halves them for single runs of 0/1 labels.
inline double BernoulliLoss(double s1, double s0, double p) {
  const double a = s1 == 0.0 ? 0.0 : s1 * std::log(p);
  const double b = s0 == 0.0 ? 0.0 : s0 * std::log1p(-p);
  return -(a + b);
}

// Bernoulli log-loss of a value clipped to [eps, 1 - eps].
inline double LogLoss(double s1, double s0, double value, double eps) {
  return BernoulliLoss(s1, s0, Clip(value, eps, 1.0 - eps));
}

// The least log-loss that any value between a and b can give: the loss is convex in the
// clipped value p, so p is the best rate s1 / (s1 + s0) clamped into the clipped interval.
inline double LeastLogLoss(double s1, double s0, double a, double b, double eps) {
  const double lo = Clip(std::min(a, b), eps, 1.0 - eps);
  const double hi = Clip(std::max(a, b), eps, 1.0 - eps);
  return BernoulliLoss(s1, s0, Clip(s1 / (s1 + s0 > 0.0 ? s1 + s0 : 1.0), lo, hi));
}

// The state of one group of the path, keyed by its first run: weight, positive / negative
// weights, value v0 at lam0 and slope, its neighbours (prev = -1 / next = N at the ends),
// its position in the collision heap and the merge that made its current segment (-1: the
// single run). One cache line, so that a merge touches four lines for its four groups.
struct alignas(64) Group {
  double w, s1, s0, v0, lam0, slope;
  int32_t prev, next;
  int32_t heap_pos;  // -1: no collision ahead with the next group
  int32_t start;
};

// Indexed 4-ary min-heap of the adjacent pairs' collision lambdas, keyed by the pair's left
// group (whose Group holds the position). Order: (lambda, group), so that the top is the
// first minimum, as the JAX tournament tree picks it; pairs that never collide (lambda =
// inf) are not in the heap. A node's four children share one cache line: node i sits at
// slot i + 3 of a 64-byte aligned array, its children at slots 4i + 4 .. 4i + 7.
class CollisionHeap {
 public:
  void Reset(int64_t capacity, Group* groups) {
    if (capacity > capacity_) {
      memory_.reset(new Entry[capacity + 12]);  // 3 slots before the root, 4 past the end
      capacity_ = capacity;
    }
    const uintptr_t at = reinterpret_cast<uintptr_t>(memory_.get());
    slots_ = memory_.get() + ((64 - at % 64) % 64) / sizeof(Entry);  // slot 0 aligned
    size_ = 0;
    groups_ = groups;
    for (int64_t i = 0; i < 4; ++i) At(i) = kSentinel;
  }

  // Build the heap: Push every finite entry, then Heapify (O(n)).
  void Push(int32_t key, double time) {
    Place(size_++, {time, key});
    At(size_ + 3) = kSentinel;
  }
  void Heapify() {
    for (int64_t i = (size_ - 2) / 4; i >= 0 && size_ > 1; --i) Down(i);
  }

  bool Empty() const { return size_ == 0; }
  double TopTime() const { return At(0).time; }
  int32_t TopKey() const { return At(0).key; }

  // Set the collision lambda of `key` (insert, move, or remove it for inf).
  void Set(int32_t key, double time) {
    const int64_t i = groups_[key].heap_pos;
    if (!(time < kInf)) {
      if (i >= 0) Remove(i);
      return;
    }
    if (i < 0) {
      Place(size_, {time, key});
      At(size_ + 4) = kSentinel;
      Up(size_++);
      return;
    }
    const Entry old = At(i);
    At(i).time = time;
    if (Before(At(i), old)) {
      Up(i);
    } else {
      Down(i);
    }
  }

 private:
  struct Entry {
    double time;
    int32_t key;
  };
  static constexpr Entry kSentinel = {kInf, std::numeric_limits<int32_t>::max()};

  static bool Before(const Entry& a, const Entry& b) {
    return a.time < b.time || (a.time == b.time && a.key < b.key);
  }

  Entry& At(int64_t i) { return slots_[i + 3]; }
  const Entry& At(int64_t i) const { return slots_[i + 3]; }

  void Place(int64_t i, const Entry& e) {
    At(i) = e;
    groups_[e.key].heap_pos = static_cast<int32_t>(i);
  }

  void Up(int64_t i) {
    const Entry e = At(i);
    while (i > 0) {
      const int64_t parent = (i - 1) / 4;
      if (!Before(e, At(parent))) break;
      Place(i, At(parent));
      i = parent;
    }
    Place(i, e);
  }

  // Sift down; the four children are compared without branches (slots past the end hold
  // the sentinel, which is never before anything).
  void Down(int64_t i) {
    const Entry e = At(i);
    while (true) {
      const int64_t first = 4 * i + 1;
      if (first >= size_) break;
      const int64_t a = Before(At(first + 1), At(first)) ? first + 1 : first;
      const int64_t b = Before(At(first + 3), At(first + 2)) ? first + 3 : first + 2;
      const int64_t best = Before(At(b), At(a)) ? b : a;
      if (!Before(At(best), e)) break;
      Place(i, At(best));
      i = best;
    }
    Place(i, e);
  }

  void Remove(int64_t i) {
    groups_[At(i).key].heap_pos = -1;
    const Entry last = At(--size_);
    At(size_) = kSentinel;
    if (i == size_) return;
    const Entry old = At(i);
    Place(i, last);
    if (Before(last, old)) {
      Up(i);
    } else {
      Down(i);
    }
  }

  std::unique_ptr<Entry[]> memory_;
  int64_t capacity_ = 0;
  Entry* slots_ = nullptr;
  int64_t size_ = 0;
  Group* groups_ = nullptr;
};

// One merge of the path: group `g` absorbs the next group `h`; `next` is the group after
// them (N at the end). `lam` is the merge's lambda; the merged group has `value` there,
// moves with `slope` and has positive / negative weights s1, s0. It ends the segments of g
// and h and makes a new one, which lasts until merge `end` (E: the final model). With the
// bounds on: `c_made` is the least log-loss of the segment made here over its span,
// `c_ended` the sum of those of the two segments it ends.
struct Merge {
  int32_t g, h, next, end;
  double lam, value, slope, s1, s0, c_made, c_ended;
  bool record;  // the breakpoint model before this merge is logged (at the previous lambda)
};

// A segment that holds at least one scored model: index j (single run j < R, or the one made
// by merge j - R) and its ranks [lo, hi) among the scored models.
struct Span {
  int64_t j;
  int32_t lo, hi;
};

// Work buffers of one problem, kept between calls (see WorkspaceLease).
struct Workspace {
  std::vector<Group> groups;
  std::vector<double> leaf;
  CollisionHeap heap;
  std::vector<Merge> merges;
  std::vector<int32_t> single_end;  // the merge that ends each single run's segment
  std::vector<int32_t> rank_of, k_of_rank;
  std::vector<double> lam_of_rank, loss_rank, c, p0, p1, diff;
  std::vector<Span> spans;
};

// The buffers of problems of up to kKeepMax runs (about 180 bytes a run) are kept between
// calls.
using WorkspaceLease = jaxcal_native::WorkspaceLease<Workspace, kKeepMax>;

// The near-isotonic path of one problem: N runs, the first `n_real` of them real.
struct Path {
  int64_t n = 0, n_real = 0;
  double tol = 0.0;      // values this close count as equal
  double lam = 0.0;      // lambda of the last merge (0 if none)
  int64_t n_models = 0;  // breakpoint models logged (lambda = 0 excluded)
  double c_singles = 0.0;  // sum of the single runs' least log-losses (with the bounds)
};

// Slope of single run r at lambda = 0: pushed up by a violating left neighbour, down by a
// violating right one (0 for padding runs).
template <typename T>
inline double SingleSlope(const T* w, const T* y, int64_t r, int64_t n_real, double tol) {
  if (r >= n_real) return 0.0;
  const double yr = static_cast<double>(y[r]);
  const bool up = r > 0 && static_cast<double>(y[r - 1]) > yr + tol;
  const bool down = r < n_real - 1 && yr > static_cast<double>(y[r + 1]) + tol;
  return (static_cast<double>(up) - static_cast<double>(down)) / static_cast<double>(w[r]);
}

// Trace the path (modified PAV) until the next collision is at `lam_stop` or later, or none
// is left (the isotonic fit). `eps_dtype`: machine epsilon of the inputs' dtype, for the
// tolerance of "already equal" (64 eps (1 + max |y|), over the padded y as in JAX).
// `bounds_eps` > 0 (ENIR, traced to the end) also computes each segment's least log-loss
// over its span, with fitted values clipped to [eps, 1 - eps], when the segment ends.
template <typename T>
Path TracePath(Workspace& ws, int64_t n, int64_t n_real, const T* w, const T* y, const T* s1,
               const T* s0, double eps_dtype, double lam_stop, double bounds_eps) {
  Path path;
  path.n = n;
  path.n_real = n_real;
  double y_max = 0.0;
  for (int64_t r = 0; r < n; ++r) y_max = std::max(y_max, std::abs(static_cast<double>(y[r])));
  const double tol = 64.0 * eps_dtype * (1.0 + y_max);
  path.tol = tol;
  const bool bounds = bounds_eps > 0.0;
  ws.groups.resize(n);
  ws.leaf.resize(n);
  ws.merges.clear();
  ws.merges.reserve(n);
  if (bounds) ws.single_end.resize(n_real);
  Group* G = ws.groups.data();
  for (int64_t r = 0; r < n; ++r) {
    G[r] = {static_cast<double>(w[r]),
            static_cast<double>(s1[r]),
            static_cast<double>(s0[r]),
            static_cast<double>(y[r]),
            0.0,
            SingleSlope(w, y, r, n_real, tol),
            static_cast<int32_t>(r - 1),
            static_cast<int32_t>(r < n_real - 1 ? r + 1 : n),
            -1,
            -1};
  }
  for (int64_t r = 0; r < n; ++r) {
    ws.leaf[r] = r < n_real - 1
                     ? Collision(G[r].v0, G[r + 1].v0, G[r].slope, G[r + 1].slope, 0.0, tol)
                     : kInf;
  }
  // a segment ends: its least log-loss over [v0, its value at lam] goes to the merge that
  // made it (or to the single runs' sum), with the merge that ends it
  const auto end_segment = [&](int64_t key, double lam, int32_t end) {
    const Group& a = G[key];
    const double c =
        LeastLogLoss(a.s1, a.s0, a.v0, At(a.v0, a.lam0, a.slope, lam), bounds_eps);
    if (a.start < 0) {
      ws.single_end[key] = end;
      path.c_singles += c;
    } else {
      ws.merges[a.start].end = end;
      ws.merges[a.start].c_made = c;
    }
    return c;
  };
  // Merge group g with the next one at collision lambda t_next; `set(key, lambda)` takes
  // the new collision lambdas of the previous group, of g and of the absorbed group (inf).
  double lam = 0.0;
  const auto merge = [&](int32_t g, double t_next, auto set) {
    Group& a = G[g];
    const int32_t p = a.prev, h = a.next;
    Group& b = G[h];
    const int32_t nn = b.next;
    const bool has_p = p >= 0, has_n = nn < n;
    // a merge within a relative 1e-12 of the current lambda joins its breakpoint
    const bool new_bp = t_next > lam * (1.0 + kSimultaneous);
    const bool record = new_bp && lam > 0.0;
    if (new_bp) lam = t_next;
    const int32_t e = static_cast<int32_t>(ws.merges.size());
    const double vg = At(a.v0, a.lam0, a.slope, lam), vh = At(b.v0, b.lam0, b.slope, lam);
    const double W = a.w + b.w;
    const double S1 = a.s1 + b.s1, S0 = a.s0 + b.s0;
    const double v = (a.w * vg + b.w * vh) / W;
    double vp = 0.0, vn = 0.0;
    if (has_p) vp = At(G[p].v0, G[p].lam0, G[p].slope, lam);
    if (has_n) vn = At(G[nn].v0, G[nn].lam0, G[nn].slope, lam);
    const bool up = has_p && vp > v + tol;
    const bool down = has_n && v > vn + tol;
    const double sl = (static_cast<double>(up) - static_cast<double>(down)) / W;
    ws.merges.push_back({g, h, nn, 0, lam, v, sl, S1, S0, 0.0, 0.0, record});
    if (bounds) ws.merges[e].c_ended = end_segment(g, lam, e) + end_segment(h, lam, e);
    if (has_p) set(p, Collision(vp, v, G[p].slope, sl, lam, tol));
    set(g, has_n ? Collision(v, vn, sl, G[nn].slope, lam, tol) : kInf);
    set(h, kInf);
    a.w = W;
    a.s1 = S1;
    a.s0 = S0;
    a.v0 = v;
    a.lam0 = lam;
    a.slope = sl;
    a.next = nn;
    a.start = e;
    if (has_n) G[nn].prev = g;
    path.n_models += record;
  };
  // Pairs that are equal already (within tol) collide at lambda = 0, where the heap would
  // take them in the order of their left group: a merge can only make its previous group
  // or itself collide at 0 again, and every key before it has collided already. So one
  // sweep from the left, which steps back after a merge that makes the previous pair
  // equal, merges them in the heap's order without the heap (with 0/1 labels: half the
  // merges).
  if (0.0 < lam_stop) {
    const auto set_leaf = [&](int32_t key, double t) { ws.leaf[key] = t; };
    for (int64_t g = 0; g < n;) {
      if (ws.leaf[g] != 0.0) {
        g = G[g].next;
        continue;
      }
      merge(static_cast<int32_t>(g), 0.0, set_leaf);
      const int32_t p = G[g].prev;
      if (p >= 0 && ws.leaf[p] == 0.0) g = p;  // else g itself, or the next group
    }
  }
  ws.heap.Reset(n, G);
  for (int64_t g = 0; g < n; g = G[g].next) {  // the pairs left (absorbed groups are gone)
    if (ws.leaf[g] < kInf) ws.heap.Push(static_cast<int32_t>(g), ws.leaf[g]);
  }
  ws.heap.Heapify();
  const auto set_heap = [&](int32_t key, double t) { ws.heap.Set(key, t); };
  while (!ws.heap.Empty() && ws.heap.TopTime() < lam_stop) {
    merge(ws.heap.TopKey(), ws.heap.TopTime(), set_heap);
  }
  path.lam = lam;
  if (bounds) {  // the segments alive at the end last until the final model
    const int32_t n_ev = static_cast<int32_t>(ws.merges.size());
    for (int64_t g = 0; g < n; g = G[g].next) end_segment(g, lam, n_ev);
  }
  return path;
}

// The fitted value of every run at `lam` from the live groups (run 0 always starts one; the
// last real group also covers the padding runs after it).
template <typename T>
void PathValues(const Workspace& ws, const Path& path, double lam, T* out) {
  const Group* G = ws.groups.data();
  for (int64_t g = 0; g < path.n; g = G[g].next) {
    const T value = static_cast<T>(At(G[g].v0, G[g].lam0, G[g].slope, lam));
    const int64_t end = std::min<int64_t>(G[g].next, path.n);
    for (int64_t r = g; r < end; ++r) out[r] = value;
  }
}

// A segment's value at lambda is v0 + slope (lambda - lam0); it covers runs run_lo ..
// run_hi and has positive / negative weights s1, s0.
struct Segment {
  int64_t run_lo, run_hi;
  double v0, lam0, slope, s1, s0;
};

struct Average {
  int32_t n_models, n_scored;
};

// ENIR's BIC average over the path's breakpoint models (the path traced to the end, with
// the bounds). Writes the averaged value of every run to `acc` ([N], 0 for padding runs).
//
// Model k is the fit before merge k (k = E, after the last one: the final model). The BIC
// lower bound of model k is 2 C(k) + (R - k) log N, C(k) the sum of the least log-losses of
// the segments alive at k: C(0) is the single runs' sum, and merge k - 1 adds the segment it
// makes and drops the two it ends. Only the segments that hold a scored model (`spans`)
// enter the exact scores and the average, in the JAX code's order of additions (single
// runs, then merges; every start, then every end), so that the two agree to rounding.
template <typename T>
Average AveragePath(Workspace& ws, const Path& path, const T* w, const T* y, const T* s1,
                    const T* s0, double n_eff, double eps, T* acc) {
  const int64_t n = path.n, n_real = path.n_real;
  const int64_t n_ev = static_cast<int64_t>(ws.merges.size());
  const double log_n = std::log(n_eff);
  const Group* G = ws.groups.data();
  const auto segment = [&](int64_t j) -> Segment {
    if (j < n_real) {
      return {j,
              j,
              static_cast<double>(y[j]),
              0.0,
              SingleSlope(w, y, j, n_real, path.tol),
              static_cast<double>(s1[j]),
              static_cast<double>(s0[j])};
    }
    const Merge& m = ws.merges[j - n_real];
    return {m.g, std::min<int64_t>(m.next, n_real) - 1, m.value, m.lam, m.slope, m.s1, m.s0};
  };
  // the final (isotonic) model, scored exactly: its BIC bounds the best one from above
  double ll_final = 0.0;
  int64_t k_final = 0;
  for (int64_t g = 0; g < n; g = G[g].next) {
    ll_final -= LogLoss(G[g].s1, G[g].s0, At(G[g].v0, G[g].lam0, G[g].slope, path.lam), eps);
    ++k_final;
  }
  const double lw_final = ll_final - 0.5 * static_cast<double>(k_final) * log_n;
  const int64_t n_models = path.n_models + 1;
  const double margin = 2.0 * (kLogWeightMargin + std::log(static_cast<double>(n_models)));
  const double limit = -2.0 * lw_final + margin;

  // the scored models: logged breakpoints whose bound keeps them within reach, and the
  // final model; rank_of[k] = number of scored models before k
  ws.rank_of.resize(n_ev + 2);
  ws.k_of_rank.clear();
  ws.lam_of_rank.clear();
  double c_alive = path.c_singles;
  for (int64_t k = 0; k <= n_ev; ++k) {
    if (k > 0) c_alive += ws.merges[k - 1].c_made - ws.merges[k - 1].c_ended;
    bool keep = k == n_ev;
    if (!keep && ws.merges[k].record) {
      const double bound = 2.0 * c_alive + static_cast<double>(n_real - k) * log_n;
      const double slack = kBoundSlack * (std::abs(bound) + std::abs(lw_final));
      keep = bound - slack <= limit;
    }
    ws.rank_of[k] = static_cast<int32_t>(ws.k_of_rank.size());
    if (keep) {
      ws.k_of_rank.push_back(static_cast<int32_t>(k));
      ws.lam_of_rank.push_back(k == n_ev ? path.lam : ws.merges[k - 1].lam);
    }
  }
  const int64_t n_scored = static_cast<int64_t>(ws.k_of_rank.size());
  ws.rank_of[n_ev + 1] = static_cast<int32_t>(n_scored);

  // the segments that hold a scored model: single runs (from model 0), then merges' (from
  // model e + 1), each up to the model before the merge that ends it
  ws.spans.clear();
  const int64_t k_first = ws.k_of_rank[0];
  for (int64_t r = 0; r < n_real; ++r) {
    const int64_t last = ws.single_end[r];
    if (k_first <= last) ws.spans.push_back({r, 0, ws.rank_of[last + 1]});
  }
  for (int64_t e = 0; e < n_ev; ++e) {
    const int32_t lo = ws.rank_of[e + 1];
    const int64_t last = ws.merges[e].end;
    if (lo < n_scored && ws.k_of_rank[lo] <= last) {
      ws.spans.push_back({n_real + e, lo, ws.rank_of[last + 1]});
    }
  }
  const int64_t n_spans = static_cast<int64_t>(ws.spans.size());

  // exact log-loss of each scored model: static segments add a constant over their ranks
  // (a difference array), moving ones are evaluated at each scored model of their span
  ws.loss_rank.assign(n_scored + 1, 0.0);
  ws.c.resize(n_spans);
  for (int64_t i = 0; i < n_spans; ++i) {
    const Segment s = segment(ws.spans[i].j);
    ws.c[i] = s.slope == 0.0 ? LogLoss(s.s1, s.s0, s.v0, eps) : 0.0;
    if (s.slope == 0.0) ws.loss_rank[ws.spans[i].lo] += ws.c[i];
  }
  for (int64_t i = 0; i < n_spans; ++i) {
    if (segment(ws.spans[i].j).slope == 0.0) ws.loss_rank[ws.spans[i].hi] -= ws.c[i];
  }
  for (int64_t r = 1; r <= n_scored; ++r) ws.loss_rank[r] += ws.loss_rank[r - 1];
  // (where the value is clipped, the loss is the segment's constant at eps or 1 - eps, with
  // IPS targets most pairs: computed once per segment, still added pair by pair)
  for (const Span& sp : ws.spans) {
    const Segment s = segment(sp.j);
    if (s.slope == 0.0) continue;
    double at_lo = kNaN, at_hi = kNaN;
    for (int64_t r = sp.lo; r < sp.hi; ++r) {
      const double v = At(s.v0, s.lam0, s.slope, ws.lam_of_rank[r]);
      double loss;
      if (v <= eps) {
        if (std::isnan(at_lo)) at_lo = BernoulliLoss(s.s1, s.s0, eps);
        loss = at_lo;
      } else if (v >= 1.0 - eps) {
        if (std::isnan(at_hi)) at_hi = BernoulliLoss(s.s1, s.s0, 1.0 - eps);
        loss = at_hi;
      } else {
        loss = BernoulliLoss(s.s1, s.s0, v);
      }
      ws.loss_rank[r] += loss;
    }
  }
  // model weights exp(-BIC / 2), normalised (logsumexp), and their prefix sums (also of
  // weight x lambda) over the ranks
  double lw_max = -kInf;
  for (int64_t r = 0; r < n_scored; ++r) {
    const double k = static_cast<double>(n_real - ws.k_of_rank[r]);  // groups in model r
    ws.loss_rank[r] = -ws.loss_rank[r] - 0.5 * k * log_n;            // now -BIC / 2
    lw_max = std::max(lw_max, ws.loss_rank[r]);
  }
  double sum_exp = 0.0;
  for (int64_t r = 0; r < n_scored; ++r) sum_exp += std::exp(ws.loss_rank[r] - lw_max);
  const double lse = std::log(sum_exp) + lw_max;
  ws.p0.assign(n_scored + 1, 0.0);
  ws.p1.assign(n_scored + 1, 0.0);
  for (int64_t r = 0; r < n_scored; ++r) {
    const double weight = std::exp(ws.loss_rank[r] - lse);
    ws.p0[r + 1] = ws.p0[r] + weight;
    ws.p1[r + 1] = ws.p1[r] + weight * ws.lam_of_rank[r];
  }
  // each segment adds sum_k w_k (v0 + slope (lambda_k - lam0)) over its span to its runs
  ws.diff.assign(n + 1, 0.0);
  for (int64_t i = 0; i < n_spans; ++i) {
    const Span& sp = ws.spans[i];
    const Segment s = segment(sp.j);
    const double omega = ws.p0[sp.hi] - ws.p0[sp.lo];
    const double lam_sum = ws.p1[sp.hi] - ws.p1[sp.lo];
    ws.c[i] = s.v0 * omega + (s.slope == 0.0 ? 0.0 : s.slope * (lam_sum - s.lam0 * omega));
    ws.diff[s.run_lo] += ws.c[i];
  }
  for (int64_t i = 0; i < n_spans; ++i) ws.diff[segment(ws.spans[i].j).run_hi + 1] -= ws.c[i];
  double run_sum = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    run_sum += ws.diff[r];
    acc[r] = static_cast<T>(r < n_real ? run_sum : 0.0);
  }
  return {static_cast<int32_t>(n_models), static_cast<int32_t>(n_scored)};
}

// Number of real runs (`real` must be a prefix mask: the runs, then padding), -1 if not.
int64_t RealCount(const bool* real, int64_t n) {
  int64_t n_real = 0;
  while (n_real < n && real[n_real]) ++n_real;
  for (int64_t r = n_real; r < n; ++r) {
    if (real[r]) return -1;
  }
  return n_real;
}

constexpr const char* kEnir = "enir_cpu";
constexpr const char* kLikeRuns = "of the run weights' dtype and shape [..., N]";
constexpr const char* kPerProblem = "of the run weights' dtype and batch shape [...]";
constexpr const char* kNotPrefix = "enir_cpu: real must be true for a prefix of the runs";

// Calls `solve(ws, b, at, n_real)` for every problem `b` of a batch of runs (its runs start at
// `at`, the first `n_real` of them real) with one leased workspace; returns the first error.
template <typename Solve>
ffi::Error ForEachProblem(const ffi::AnyBuffer& real, const Batch& batch, Solve solve) {
  if (batch.problems() == 0) return ffi::Error::Success();
  const int64_t n = batch.n;
  WorkspaceLease lease(n);
  Workspace& ws = lease.get();
  for (int64_t b = 0; b < batch.problems(); ++b) {
    const int64_t at = b * n;
    const int64_t n_real = RealCount(Data<bool>(real, at), n);
    if (n_real < 0) return ffi::Error::InvalidArgument(kNotPrefix);
    if (ffi::Error e = solve(ws, b, at, n_real); e.failure()) return e;
  }
  return ffi::Error::Success();
}

ffi::Error CheckRuns(const ffi::AnyBuffer& w, std::initializer_list<const ffi::AnyBuffer*> same,
                     const ffi::AnyBuffer& real, Batch& batch) {
  if (ffi::Error e = BatchOf(kEnir, "the runs", w, 31, batch); e.failure()) return e;
  for (const ffi::AnyBuffer* b : same) {
    if (ffi::Error e = CheckLike(kEnir, "every run array", *b, w.element_type(), w, kLikeRuns);
        e.failure()) {
      return e;
    }
  }
  if (ffi::Error e = CheckLike(kEnir, "real", real, ffi::DataType::PRED, w,
                               "bool of the runs' shape [..., N]");
      e.failure()) {
    return e;
  }
  return ffi::Error::Success();
}

template <typename T>
ffi::Error SolveEnir(ffi::AnyBuffer w, ffi::AnyBuffer y, ffi::AnyBuffer s1, ffi::AnyBuffer s0,
                     ffi::AnyBuffer real, ffi::AnyBuffer n_eff, ffi::AnyBuffer eps,
                     ffi::Result<ffi::AnyBuffer> acc, ffi::Result<ffi::Buffer<ffi::S32>> n_models,
                     ffi::Result<ffi::Buffer<ffi::S32>> n_scored, ffi::Result<ffi::AnyBuffer> lam) {
  Batch batch;
  if (ffi::Error e = CheckRuns(w, {&y, &s1, &s0}, real, batch); e.failure()) return e;
  const int64_t n = batch.n;
  const ffi::DataType t = w.element_type();
  constexpr const char* kCount = "int32 of the runs' batch shape [...]";
  for (ffi::Error e : {CheckBatch(kEnir, "n_eff", n_eff, t, w, {}, kPerProblem),
                       CheckBatch(kEnir, "eps", eps, t, w, {}, kPerProblem),
                       CheckLike(kEnir, "the averaged values (result)", *acc, t, w, kLikeRuns),
                       CheckBatch(kEnir, "n_models (result)", *n_models, ffi::DataType::S32, w, {},
                                  kCount),
                       CheckBatch(kEnir, "n_scored (result)", *n_scored, ffi::DataType::S32, w, {},
                                  kCount),
                       CheckBatch(kEnir, "the last lambda (result)", *lam, t, w, {}, kPerProblem)}) {
    if (e.failure()) return e;
  }
  return ForEachProblem(real, batch, [&](Workspace& ws, int64_t b, int64_t at, int64_t n_real) {
    const double clip = static_cast<double>(Data<T>(eps)[b]);
    if (!(clip > 0.0 && clip < 0.5)) return ffi::Error::InvalidArgument("enir_cpu: eps");
    if (n_real == 0) {  // no runs: the final model alone, with no groups (as in JAX)
      T* out = Data<T>(acc, at);
      std::fill(out, out + n, T(0));
      n_models->typed_data()[b] = n_scored->typed_data()[b] = 1;
      Data<T>(lam)[b] = T(0);
      return ffi::Error::Success();
    }
    const T *wp = Data<T>(w, at), *yp = Data<T>(y, at);
    const T *s1p = Data<T>(s1, at), *s0p = Data<T>(s0, at);
    const Path path = TracePath<T>(ws, n, n_real, wp, yp, s1p, s0p,
                                   std::numeric_limits<T>::epsilon(), kInf, clip);
    const double count = static_cast<double>(Data<T>(n_eff)[b]);
    const Average avg =
        AveragePath<T>(ws, path, wp, yp, s1p, s0p, count, clip, Data<T>(acc, at));
    n_models->typed_data()[b] = avg.n_models;
    n_scored->typed_data()[b] = avg.n_scored;
    Data<T>(lam)[b] = static_cast<T>(path.lam);
    return ffi::Error::Success();
  });
}

ffi::Error EnirImpl(ffi::AnyBuffer w, ffi::AnyBuffer y, ffi::AnyBuffer s1, ffi::AnyBuffer s0,
                    ffi::AnyBuffer real, ffi::AnyBuffer n_eff, ffi::AnyBuffer eps,
                    ffi::Result<ffi::AnyBuffer> acc, ffi::Result<ffi::Buffer<ffi::S32>> n_models,
                    ffi::Result<ffi::Buffer<ffi::S32>> n_scored, ffi::Result<ffi::AnyBuffer> lam) {
  return ForFloatType(kEnir, w.element_type(), "the runs", [&](auto zero) {
    return SolveEnir<decltype(zero)>(w, y, s1, s0, real, n_eff, eps, acc, n_models, n_scored,
                                     lam);
  });
}

template <typename T>
ffi::Error SolveNearIsotonic(ffi::AnyBuffer w, ffi::AnyBuffer y, ffi::AnyBuffer real,
                             ffi::AnyBuffer lam, ffi::Result<ffi::AnyBuffer> out) {
  Batch batch;
  if (ffi::Error e = CheckRuns(w, {&y}, real, batch); e.failure()) return e;
  const int64_t n = batch.n;
  for (ffi::Error e :
       {CheckBatch(kEnir, "lam", lam, w.element_type(), w, {}, kPerProblem),
        CheckLike(kEnir, "the fitted values (result)", *out, w.element_type(), w, kLikeRuns)}) {
    if (e.failure()) return e;
  }
  return ForEachProblem(real, batch, [&](Workspace& ws, int64_t b, int64_t at, int64_t n_real) {
    const T *wp = Data<T>(w, at), *yp = Data<T>(y, at);
    const double stop = static_cast<double>(Data<T>(lam)[b]);
    // the positive / negative weights do not enter the path: pass the weights for both
    const Path path =
        TracePath<T>(ws, n, n_real, wp, yp, wp, wp, std::numeric_limits<T>::epsilon(), stop, 0.0);
    PathValues<T>(ws, path, std::isinf(stop) ? path.lam : stop, Data<T>(out, at));
    return ffi::Error::Success();
  });
}

ffi::Error NearIsotonicImpl(ffi::AnyBuffer w, ffi::AnyBuffer y, ffi::AnyBuffer real,
                            ffi::AnyBuffer lam, ffi::Result<ffi::AnyBuffer> out) {
  return ForFloatType(kEnir, w.element_type(), "the runs", [&](auto zero) {
    return SolveNearIsotonic<decltype(zero)>(w, y, real, lam, out);
  });
}

}  // namespace

// ENIR's BIC average over the near-isotonic path of each problem.
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcalEnirCpu, EnirImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()          // run weights W [..., N]
                                  .Arg<ffi::AnyBuffer>()          // run mean targets [..., N]
                                  .Arg<ffi::AnyBuffer>()          // positive weights [..., N]
                                  .Arg<ffi::AnyBuffer>()          // negative weights [..., N]
                                  .Arg<ffi::AnyBuffer>()          // real (bool) [..., N]
                                  .Arg<ffi::AnyBuffer>()          // n_eff [...]
                                  .Arg<ffi::AnyBuffer>()          // eps [...]
                                  .Ret<ffi::AnyBuffer>()          // averaged values [..., N]
                                  .Ret<ffi::Buffer<ffi::S32>>()   // n_models [...]
                                  .Ret<ffi::Buffer<ffi::S32>>()   // n_scored [...]
                                  .Ret<ffi::AnyBuffer>());        // last merge's lambda [...]

// The near-isotonic fit of each problem's runs at one lambda (inf: the isotonic fit).
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcalNearIsotonicCpu, NearIsotonicImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()     // weights [..., N]
                                  .Arg<ffi::AnyBuffer>()     // values [..., N]
                                  .Arg<ffi::AnyBuffer>()     // real (bool) [..., N]
                                  .Arg<ffi::AnyBuffer>()     // lambda [...]
                                  .Ret<ffi::AnyBuffer>());  // fitted values [..., N]
