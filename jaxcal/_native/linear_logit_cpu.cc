// The exact constrained fit of a linear-logit map (jaxcal/fitting/solver.py) for XLA's CPU
// backend, as an XLA FFI handler.
//
// Minimises  L(theta) = sum_i w_i [softplus(x_i . theta) - t_i x_i . theta]
//                       + l2 / 2 |theta without the intercept|^2   subject to  C theta >= 0
// for one problem (features X [n, p], p and the k constraint rows a handful). The method is
// solver.py's without its sketch, step by step: the same standardisation (theta = A eta),
// damped Newton on the face of an active set with the projector P (step
// (P H P + ridge P + I - P) d = -P g, Armijo test, step halving, the same stopping rule and
// divergence tests), and the same active-set search (unconstrained; the violated rows,
// warm-started, accepted by the KKT test; else every non-empty active set, the feasible
// candidate with the lowest objective winning; a constrained solve that fails from the
// unconstrained iterate runs once more from the intercept-only start). Small linear systems
// are solved by the same Gauss-Jordan elimination without pivoting.
//
// Why a kernel: the pure-JAX solver is one program of nested while loops that XLA compiles
// in about half a second, on the first fit of every family in a fresh process. Here the
// program around the call is the family's features and this call.
//
// Every sum and solve runs in double precision whatever the input dtype (float32 inputs
// are widened on entry, the results rounded on exit), with double's machine epsilon in the
// tolerances that use it. The data pass walks the rows once per trial point, the
// standardised features kept in a column-major buffer of doubles.
//
// Operands: X [n, p], t [n], w [n], C [k, p] (one dtype), l2 [] and tol [] (that dtype),
// max_iter [] int32; attribute `intercept` (the intercept column, or -1). Results:
// theta [p] and info [4 + 2 k] = (code, n_iter, objective, kkt_residual, active[k],
// multipliers[k]), in the input dtype.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ffi_checks.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using jaxcal_native::CheckShape, jaxcal_native::Data, jaxcal_native::ForFloatType,
    jaxcal_native::Mismatch;

namespace {

// solver.py's status codes and constants (jaxcal/fitting/newton.py)
constexpr int kConverged = 0, kMaxIter = 1, kDiverged = 2;
constexpr double kDivergenceBound = 1e8;
constexpr double kArmijo = 1e-4;
constexpr int kMaxHalvings = 40;
constexpr double kEps = std::numeric_limits<double>::epsilon();
constexpr double kInf = std::numeric_limits<double>::infinity();

using Vector = std::vector<double>;
using Matrix = std::vector<double>;  // row-major

// M^{-1} B for a symmetric positive definite M [p, p] and B [p, m] (in place in B):
// Gauss-Jordan elimination on [M | B] without pivoting, newton._spd_solve's arithmetic.
void SpdSolve(Matrix M, double* B, int64_t p, int64_t m) {
  const int64_t c = p + m;
  Matrix A(p * c);
  for (int64_t i = 0; i < p; ++i) {
    for (int64_t j = 0; j < p; ++j) A[i * c + j] = M[i * p + j];
    for (int64_t j = 0; j < m; ++j) A[i * c + p + j] = B[i * m + j];
  }
  Vector pivot(c);
  for (int64_t j = 0; j < p; ++j) {
    const double a = A[j * c + j];
    for (int64_t q = 0; q < c; ++q) pivot[q] = A[j * c + q] / a;
    for (int64_t i = 0; i < p; ++i) {
      if (i == j) continue;
      const double f = A[i * c + j];
      for (int64_t q = 0; q < c; ++q) A[i * c + q] -= f * pivot[q];
    }
    for (int64_t q = 0; q < c; ++q) A[j * c + q] = pivot[q];
  }
  for (int64_t i = 0; i < p; ++i) {
    for (int64_t j = 0; j < m; ++j) B[i * m + j] = A[i * c + p + j];
  }
}

// One standardised problem (newton._Problem without its rows).
struct Problem {
  int64_t n = 0, p = 0, k = 0;
  Matrix xs;     // [p, n] standardised features, column by column
  Vector t, w;   // [n]
  double W = 0;  // total weight
  Matrix C;      // [k, p] constraints in eta coordinates (C0 A)
  Matrix C0;     // [k, p] constraints in theta coordinates
  Matrix Q;      // [p, p] penalty in eta coordinates
  Matrix A;      // [p, p] theta = A eta
  Matrix A_inv;  // [p, p]
  Vector eta0;   // [p] the intercept-only start
};

// The objective, gradient and Hessian at eta (one pass over the rows), penalty included.
struct Derivatives {
  double f = 0;
  Vector g;  // [p]
  Matrix H;  // [p, p]
};

void ValueGradHess(const Problem& pr, const Vector& eta, Derivatives& out) {
  const int64_t n = pr.n, p = pr.p;
  double f = 0;
  double g[16] = {0}, h[136] = {0};  // p <= 16 (checked by the caller)
  const double* x = pr.xs.data();
  for (int64_t i = 0; i < n; ++i) {
    const double wi = pr.w[i];
    double z = 0;
    for (int64_t j = 0; j < p; ++j) z += eta[j] * x[j * n + i];
    const double ti = pr.t[i];
    const double e = std::exp(-std::fabs(z));
    const double sn = e / (1.0 + e);  // sigmoid(-|z|)
    // softplus(z) - t z = (1 - t) softplus(z) + t softplus(-z), and sigmoid(z) - t, written
    // so that a saturated logit on its label's side (t = 1, z >> 0) costs exactly log1p(e)
    // and pulls by -sn: no cancellation of z against t z, whose rounding (an ulp of z per
    // row) would stall Newton near a near-step optimum (newton._value_grad_hess)
    f += wi * ((1.0 - ti) * std::max(z, 0.0) + ti * std::max(-z, 0.0)) + wi * std::log1p(e);
    const double r = wi * (z >= 0 ? (1.0 - ti) - sn : sn - ti);
    const double c = wi * sn * (1.0 - sn);
    int64_t q = 0;
    for (int64_t a = 0; a < p; ++a) {
      const double xa = x[a * n + i];
      g[a] += xa * r;
      const double cxa = c * xa;
      for (int64_t b = a; b < p; ++b) h[q++] += cxa * x[b * n + i];
    }
  }
  out.g.assign(p, 0.0);
  out.H.assign(p * p, 0.0);
  int64_t q = 0;
  for (int64_t a = 0; a < p; ++a) {
    for (int64_t b = a; b < p; ++b, ++q) out.H[a * p + b] = out.H[b * p + a] = h[q];
  }
  double quad = 0;
  for (int64_t a = 0; a < p; ++a) {
    double qa = 0;
    for (int64_t b = 0; b < p; ++b) {
      qa += pr.Q[a * p + b] * eta[b];
      out.H[a * p + b] += pr.Q[a * p + b];
    }
    out.g[a] = g[a] + qa;
    quad += eta[a] * qa;
  }
  out.f = f + 0.5 * quad;
}

// G^{-1} B with G = C_S C_S^T + diag(not active) for the rows C [k, p] and the [k, m]
// matrix B (in place): newton._row_gram_solve.
void RowGramSolve(const Matrix& C, int64_t k, int64_t p, const std::vector<bool>& active,
                  double* B, int64_t m) {
  Matrix G(k * k, 0.0);
  for (int64_t a = 0; a < k; ++a) {
    for (int64_t b = 0; b < k; ++b) {
      double s = 0;
      if (active[a] && active[b]) {
        for (int64_t j = 0; j < p; ++j) s += C[a * p + j] * C[b * p + j];
      }
      G[a * k + b] = s + (a == b && !active[a] ? 1.0 : 0.0);
    }
  }
  SpdSolve(G, B, k, m);
}

// The orthogonal projector onto {eta : C_S eta = 0} (rows `C`, [k, p]):
// I - C_S^T G^{-1} C_S.
Matrix Projector(const Matrix& C, int64_t k, int64_t p, const std::vector<bool>& active) {
  Matrix P(p * p, 0.0);
  for (int64_t j = 0; j < p; ++j) P[j * p + j] = 1.0;
  if (k == 0) return P;
  Matrix Ca(k * p);
  for (int64_t a = 0; a < k; ++a) {
    for (int64_t j = 0; j < p; ++j) Ca[a * p + j] = active[a] ? C[a * p + j] : 0.0;
  }
  Matrix GinvCa = Ca;
  RowGramSolve(C, k, p, active, GinvCa.data(), p);
  for (int64_t i = 0; i < p; ++i) {
    for (int64_t j = 0; j < p; ++j) {
      double s = 0;
      for (int64_t a = 0; a < k; ++a) s += Ca[a * p + i] * GinvCa[a * p + j];
      P[i * p + j] -= s;
    }
  }
  return P;
}

Vector MatVec(const Matrix& M, const Vector& v, int64_t rows, int64_t cols) {
  Vector out(rows, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += M[i * cols + j] * v[j];
    out[i] = s;
  }
  return out;
}

// A finished Newton loop (newton._Candidate).
struct Candidate {
  Vector eta, grad;
  double objective = kInf;
  int code = kMaxIter;
  int n_iter = 0;
};

// The Newton step within the subspace of P and its decrement (newton._newton_direction).
double Direction(const Matrix& P, const Derivatives& d, int64_t p, Vector& step) {
  Matrix PH(p * p, 0.0), Hs(p * p, 0.0);
  for (int64_t i = 0; i < p; ++i) {
    for (int64_t j = 0; j < p; ++j) {
      double s = 0;
      for (int64_t q = 0; q < p; ++q) s += P[i * p + q] * d.H[q * p + j];
      PH[i * p + j] = s;
    }
  }
  double trace_hs = 0, trace_p = 0;
  for (int64_t i = 0; i < p; ++i) {
    for (int64_t j = 0; j < p; ++j) {
      double s = 0;
      for (int64_t q = 0; q < p; ++q) s += PH[i * p + q] * P[q * p + j];
      Hs[i * p + j] = s;
    }
    trace_hs += Hs[i * p + i];
    trace_p += P[i * p + i];
  }
  const double ridge = kEps * trace_hs / std::max(trace_p, 1.0);
  Vector gs = MatVec(P, d.g, p, p);
  Matrix M(p * p);
  for (int64_t i = 0; i < p; ++i) {
    for (int64_t j = 0; j < p; ++j) {
      M[i * p + j] = Hs[i * p + j] + ridge * P[i * p + j] + ((i == j ? 1.0 : 0.0) - P[i * p + j]);
    }
  }
  Vector sol = gs;
  SpdSolve(M, sol.data(), p, 1);
  for (double& v : sol) v = -v;
  step = MatVec(P, sol, p, p);
  double dec = 0;
  for (int64_t i = 0; i < p; ++i) dec += gs[i] * step[i];
  return -dec;
}

// Damped Newton on the face of `active` from `start` (newton._newton).
Candidate Newton(const Problem& pr, const std::vector<bool>& active, const Vector& start,
                 int64_t max_iter, double tol) {
  const int64_t p = pr.p;
  const Matrix P = Projector(pr.C, pr.k, p, active);
  Vector eta = MatVec(P, start, p, p), g(p, 0.0), d(p, 0.0), trial(p), d_t(p);
  double f = kInf, dec = 0.0, alpha = 1.0;
  int64_t halvings = 0, it = 0;
  int code = kMaxIter;
  bool done = false;
  Derivatives at;
  while (!done && it <= max_iter) {
    for (int64_t j = 0; j < p; ++j) trial[j] = eta[j] + alpha * d[j];
    ValueGradHess(pr, trial, at);
    const double slack = 8 * kEps * std::fabs(f);
    const bool ok = std::isfinite(at.f) && at.f <= f - kArmijo * alpha * dec + slack;
    const double dec_t = Direction(P, at, p, d_t);
    double largest = 0;
    bool finite_step = true;
    for (int64_t j = 0; j < p; ++j) {
      largest = std::max(largest, std::fabs(trial[j]));
      finite_step = finite_step && std::isfinite(d_t[j]);
    }
    // A decrement below -tol is no rounding: the Hessian is numerically singular (saturated
    // logits far from any optimum, e.g. a warm start projected onto a face) and d_t is no
    // descent direction. Such a point is no optimum: the candidate fails (its stage may run
    // again from a cold start), never "converged" because the decrement is below tol.
    const bool indefinite = dec_t < -2 * tol * pr.W;
    const bool bad_step = ok && (largest > kDivergenceBound || !finite_step || indefinite);
    const bool gave_up = !ok && (halvings + 1 >= kMaxHalvings || std::isinf(f));
    const bool diverged = bad_step || gave_up;
    const bool accept = ok && !bad_step;
    const bool converged = accept && dec_t <= 2 * tol * pr.W;
    code = diverged ? kDiverged : (converged ? kConverged : kMaxIter);
    if (accept) {
      eta = trial;
      g = at.g;
      d = d_t;
      f = at.f;
      dec = dec_t;
      alpha = 1.0;
      halvings = 0;
    } else {
      alpha *= 0.5;
      ++halvings;
    }
    if (accept || diverged) ++it;
    done = diverged || converged;
  }
  Candidate c;
  c.eta = eta;
  c.grad = g;
  c.objective = f;
  c.code = code;
  c.n_iter = static_cast<int>(std::max<int64_t>(it - 1, 0));
  return c;
}

// Lagrange multipliers of the active rows (grad = C_S^T mu_S by least squares; 0 elsewhere).
Vector Multipliers(const Problem& pr, const Candidate& c, const std::vector<bool>& active) {
  const int64_t k = pr.k, p = pr.p;
  Vector mu(k, 0.0);
  for (int64_t a = 0; a < k; ++a) {
    if (!active[a]) continue;
    double s = 0;
    for (int64_t j = 0; j < p; ++j) s += pr.C[a * p + j] * c.grad[j];
    mu[a] = s;
  }
  if (k > 0) RowGramSolve(pr.C, k, p, active, mu.data(), 1);
  return mu;
}

bool Feasible(const Problem& pr, const Candidate& c, const std::vector<bool>& active) {
  for (int64_t a = 0; a < pr.k; ++a) {
    double s = 0;
    for (int64_t j = 0; j < pr.p; ++j) s += pr.C[a * pr.p + j] * c.eta[j];
    if (!active[a] && !(s >= 0)) return false;
  }
  return true;
}

// Converged, feasible in the inactive rows and multipliers >= 0 (solver._kkt_ok).
bool KktOk(const Problem& pr, const Candidate& c, const std::vector<bool>& active) {
  const Vector mu = Multipliers(pr, c, active);
  for (int64_t a = 0; a < pr.k; ++a) {
    double scale = 0;
    for (int64_t j = 0; j < pr.p; ++j) scale = std::max(scale, std::fabs(pr.C[a * pr.p + j]));
    if (!(mu[a] >= -std::sqrt(kEps) * 1e-4 * scale * pr.W)) return false;
  }
  return Feasible(pr, c, active) && c.code == kConverged;
}

// The candidate's objective if it is feasible and not NaN, else +inf.
double FeasibleObjective(const Problem& pr, const Candidate& c, const std::vector<bool>& active) {
  return Feasible(pr, c, active) && !std::isnan(c.objective) ? c.objective : kInf;
}

struct Answer {
  Candidate c;
  std::vector<bool> active;
};

// The active-set search (solver._active_set_solve without the sketch's polish stage).
Answer Search(const Problem& pr, int64_t max_iter, double tol) {
  const int64_t k = pr.k, p = pr.p;
  const std::vector<bool> none(k, false);
  const Candidate unc = Newton(pr, none, pr.eta0, max_iter, tol);
  if (k == 0 || KktOk(pr, unc, none)) return {unc, none};
  bool warm = false;
  for (int64_t j = 0; j < p; ++j) warm = warm || unc.eta[j] != pr.eta0[j];
  auto on_face = [&](const std::vector<bool>& active) {
    Candidate c = Newton(pr, active, unc.eta, max_iter, tol);
    if (c.code != kConverged && warm) c = Newton(pr, active, pr.eta0, max_iter, tol);
    return c;
  };
  std::vector<bool> violated(k);
  for (int64_t a = 0; a < k; ++a) {
    double s = 0;
    for (int64_t j = 0; j < p; ++j) s += pr.C[a * p + j] * unc.eta[j];
    violated[a] = s < 0;
  }
  const Candidate guess = on_face(violated);
  if (KktOk(pr, guess, violated)) return {guess, violated};
  Answer best{Candidate{}, none};
  double best_objective = kInf;
  for (int64_t r = 1; r <= k; ++r) {  // every non-empty subset, by size, as _subsets
    std::vector<bool> pick(k, false);
    std::fill(pick.begin(), pick.begin() + r, true);
    do {
      const Candidate c = on_face(pick);
      const double objective = FeasibleObjective(pr, c, pick);
      if (objective < best_objective) {
        best = {c, pick};
        best_objective = objective;
      }
    } while (std::prev_permutation(pick.begin(), pick.end()));
  }
  if (FeasibleObjective(pr, unc, none) <= best_objective || best.c.eta.empty()) {
    return {unc, none};
  }
  return best;
}

// Standardisation and coordinates (newton._standardisation, newton._coordinates).
template <typename T>
Problem Setup(const T* X, const T* t, const T* w, const T* C, int64_t n, int64_t p, int64_t k,
              double l2, int64_t intercept) {
  Problem pr;
  pr.n = n;
  pr.p = p;
  pr.k = k;
  pr.t.assign(t, t + n);
  pr.w.assign(w, w + n);
  double W = 0, WT = 0;
  for (int64_t i = 0; i < n; ++i) {
    W += pr.w[i];
    WT += pr.w[i] * pr.t[i];
  }
  pr.W = W;
  Vector centre(p, 0.0), sd(p, 1.0);
  pr.xs.resize(p * n);
  for (int64_t j = 0; j < p; ++j) {
    double* col = pr.xs.data() + j * n;
    for (int64_t i = 0; i < n; ++i) col[i] = static_cast<double>(X[i * p + j]);
    const bool slope = j != intercept;
    if (intercept >= 0 && slope) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += pr.w[i] * col[i];
      centre[j] = s / W;
    }
    double s2 = 0;
    for (int64_t i = 0; i < n; ++i) s2 += pr.w[i] * (col[i] - centre[j]) * (col[i] - centre[j]);
    const double v = std::sqrt(s2 / W);
    sd[j] = slope && v > 0 ? v : 1.0;
    for (int64_t i = 0; i < n; ++i) col[i] = (col[i] - centre[j]) * (1.0 / sd[j]);
  }
  pr.A.assign(p * p, 0.0);
  pr.A_inv.assign(p * p, 0.0);
  for (int64_t j = 0; j < p; ++j) {
    pr.A[j * p + j] = 1.0 / sd[j];
    pr.A_inv[j * p + j] = sd[j];
  }
  if (intercept >= 0) {
    for (int64_t j = 0; j < p; ++j) {
      if (j == intercept) continue;
      pr.A[intercept * p + j] += -centre[j] / sd[j];
      pr.A_inv[intercept * p + j] += centre[j];
    }
  }
  pr.Q.assign(p * p, 0.0);  // l2 A^T diag(slope) A
  for (int64_t a = 0; a < p; ++a) {
    for (int64_t b = 0; b < p; ++b) {
      double s = 0;
      for (int64_t j = 0; j < p; ++j) {
        if (j != intercept) s += pr.A[j * p + a] * pr.A[j * p + b];
      }
      pr.Q[a * p + b] = l2 * s;
    }
  }
  pr.C0.assign(C, C + k * p);
  pr.C.assign(k * p, 0.0);
  for (int64_t a = 0; a < k; ++a) {
    for (int64_t b = 0; b < p; ++b) {
      double s = 0;
      for (int64_t j = 0; j < p; ++j) s += pr.C0[a * p + j] * pr.A[j * p + b];
      pr.C[a * p + b] = s;
    }
  }
  pr.eta0.assign(p, 0.0);
  if (intercept >= 0) {
    const double tbar = std::min(std::max(WT / W, 1e-6), 1 - 1e-6);
    pr.eta0[intercept] = std::log(tbar) - std::log1p(-tbar);
  }
  return pr;
}

constexpr const char* kLl = "linear_logit_cpu";

template <typename T>
ffi::Error Fit(ffi::AnyBuffer X, ffi::AnyBuffer t, ffi::AnyBuffer w, ffi::AnyBuffer C,
               ffi::AnyBuffer l2, ffi::AnyBuffer tol, ffi::AnyBuffer max_iter, int64_t intercept,
               ffi::Result<ffi::AnyBuffer> theta, ffi::Result<ffi::AnyBuffer> info) {
  const auto xd = X.dimensions(), cd = C.dimensions();
  if (xd.size() != 2 || cd.size() != 2 || cd[1] != xd[1]) {
    return ffi::Error::InvalidArgument("linear_logit_cpu: X must be [n, p] and C [k, p]");
  }
  const int64_t n = xd[0], p = xd[1], k = cd[0];
  if (p < 1 || p > 16 || k > 8) {
    return ffi::Error::InvalidArgument("linear_logit_cpu: 1 <= p <= 16 and k <= 8");
  }
  const ffi::DataType type = X.element_type();
  for (ffi::Error e : {CheckShape(kLl, "t", t, type, {n}, "[n] of X's dtype"),
                       CheckShape(kLl, "w", w, type, {n}, "[n] of X's dtype"),
                       CheckShape(kLl, "C", C, type, {k, p}, "[k, p] of X's dtype"),
                       CheckShape(kLl, "theta (result)", *theta, type, {p}, "[p] of X's dtype"),
                       CheckShape(kLl, "info (result)", *info, type, {4 + 2 * k},
                                  "[4 + 2 k] of X's dtype")}) {
    if (e.failure()) return e;
  }
  if (l2.element_count() != 1 || tol.element_count() != 1 || max_iter.element_count() != 1 ||
      l2.element_type() != type || tol.element_type() != type ||
      max_iter.element_type() != ffi::DataType::S32) {
    return Mismatch(kLl, "l2, tol and max_iter", "scalars (of X's dtype; max_iter int32)");
  }
  if (intercept >= p) return ffi::Error::InvalidArgument("linear_logit_cpu: intercept >= p");
  const Problem pr = Setup<T>(Data<T>(X), Data<T>(t), Data<T>(w), Data<T>(C), n, p, k,
                              static_cast<double>(*Data<T>(l2)), intercept);
  const int64_t iters = *Data<int32_t>(max_iter);
  const double tolerance = static_cast<double>(*Data<T>(tol));
  const Answer answer = Search(pr, iters, tolerance);
  const Candidate& c = answer.c;

  // solver._finish: multipliers, the KKT residual in theta coordinates, and theta on the
  // active face (coordinates pinned by as many active rows as they involve exactly 0)
  const Vector mu = Multipliers(pr, c, answer.active);
  Vector r = c.grad;
  for (int64_t j = 0; j < p; ++j) {
    for (int64_t a = 0; a < k; ++a) r[j] -= pr.C[a * p + j] * mu[a];
  }
  double resid = 0;
  for (int64_t j = 0; j < p; ++j) {
    double s = 0;
    for (int64_t i = 0; i < p; ++i) s += pr.A_inv[i * p + j] * r[i];
    resid = std::max(resid, std::fabs(s));
    if (std::isnan(s)) resid = s;
  }
  Vector th = MatVec(pr.A, c.eta, p, p);
  if (k > 0) {
    const Vector projected = MatVec(Projector(pr.C0, k, p, answer.active), th, p, p);
    int64_t n_active = 0, n_involved = 0;
    for (int64_t a = 0; a < k; ++a) n_active += answer.active[a];
    std::vector<bool> involved(p, false);
    for (int64_t j = 0; j < p; ++j) {
      for (int64_t a = 0; a < k; ++a) involved[j] = involved[j] || pr.C0[a * p + j] != 0;
      n_involved += involved[j];
    }
    for (int64_t j = 0; j < p; ++j) {
      th[j] = involved[j] && n_active == n_involved ? 0.0 : projected[j];
    }
  }
  T* out = Data<T>(theta);
  for (int64_t j = 0; j < p; ++j) out[j] = static_cast<T>(th[j]);
  T* status = Data<T>(info);
  status[0] = static_cast<T>(c.code);
  status[1] = static_cast<T>(c.n_iter);
  status[2] = static_cast<T>(c.objective);
  status[3] = static_cast<T>(resid);
  for (int64_t a = 0; a < k; ++a) {
    status[4 + a] = answer.active[a] ? T(1) : T(0);
    status[4 + k + a] = static_cast<T>(mu[a]);
  }
  return ffi::Error::Success();
}

ffi::Error LinearLogitImpl(ffi::AnyBuffer X, ffi::AnyBuffer t, ffi::AnyBuffer w, ffi::AnyBuffer C,
                           ffi::AnyBuffer l2, ffi::AnyBuffer tol, ffi::AnyBuffer max_iter,
                           int64_t intercept, ffi::Result<ffi::AnyBuffer> theta,
                           ffi::Result<ffi::AnyBuffer> info) {
  return ForFloatType(kLl, X.element_type(), "the operands", [&](auto zero) {
    return Fit<decltype(zero)>(X, t, w, C, l2, tol, max_iter, intercept, theta, info);
  });
}

}  // namespace

// The constrained linear-logit fit of one problem.
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcalLinearLogitCpu, LinearLogitImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // X [n, p]
                                  .Arg<ffi::AnyBuffer>()  // t [n]
                                  .Arg<ffi::AnyBuffer>()  // w [n]
                                  .Arg<ffi::AnyBuffer>()  // C [k, p]
                                  .Arg<ffi::AnyBuffer>()  // l2 []
                                  .Arg<ffi::AnyBuffer>()  // tol []
                                  .Arg<ffi::AnyBuffer>()  // max_iter [] int32
                                  .Attr<int64_t>("intercept")
                                  .Ret<ffi::AnyBuffer>()   // theta [p]
                                  .Ret<ffi::AnyBuffer>());  // info [4 + 2 k]
