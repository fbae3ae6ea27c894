// op_test_util.h — helpers for the op tests: owning buffers behind Tensor views, a seeded
// generator, normalised error, and the finite-difference / F32-vs-F64 case harness.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace moet::test {

namespace ops = moet::ops;

// An owned, 64-bit aligned buffer of any dtype with a Tensor view; values read and written as
// double.
class Buf {
 public:
  Buf(DType dt, std::vector<int64_t> shape) : dt_(dt), shape_(std::move(shape)) {
    n_ = 1;
    for (int64_t d : shape_) n_ *= d;
    store_.assign((n_ * dtype_size(dt_) + 7) / 8 + 1, 0);
    view_.ptr = store_.data();
    view_.dtype = dt_;
    view_.ndim = int(shape_.size());
    for (int i = 0; i < view_.ndim; ++i) view_.shape[i] = shape_[i];
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  // The view, as an lvalue so that it binds to the ops' output parameters.
  Tensor& t() { return view_; }
  const Tensor& t() const { return view_; }
  int64_t n() const { return n_; }
  DType dtype() const { return dt_; }
  double get(int64_t i) const {
    const void* p = store_.data();
    switch (dt_) {
      case DType::F32:
        return static_cast<const float*>(p)[i];
      case DType::F64:
        return static_cast<const double*>(p)[i];
      case DType::I32:
        return static_cast<const int32_t*>(p)[i];
      default:
        return NAN;
    }
  }
  void set(int64_t i, double v) {
    void* p = store_.data();
    switch (dt_) {
      case DType::F32:
        static_cast<float*>(p)[i] = float(v);
        break;
      case DType::F64:
        static_cast<double*>(p)[i] = v;
        break;
      case DType::I32:
        static_cast<int32_t*>(p)[i] = int32_t(v);
        break;
      default:
        break;
    }
  }
  std::vector<double> vals() const {
    std::vector<double> v(n_);
    for (int64_t i = 0; i < n_; ++i) v[i] = get(i);
    return v;
  }
  void assign(const std::vector<double>& v) {
    for (int64_t i = 0; i < n_; ++i) set(i, v[i]);
  }
  void fill(double v) {
    for (int64_t i = 0; i < n_; ++i) set(i, v);
  }
  bool bitwise_equal(const Buf& o) const {
    return n_ == o.n_ && dt_ == o.dt_ &&
           std::memcmp(store_.data(), o.store_.data(), n_ * dtype_size(dt_)) == 0;
  }

 private:
  DType dt_;
  std::vector<int64_t> shape_;
  int64_t n_;
  std::vector<uint64_t> store_;
  Tensor view_;
};

// Seeded uniform values, rounded to float so that F32 and F64 runs see identical inputs.
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  double uniform(double lo, double hi) {
    const double u = double(g_() >> 11) * 0x1.0p-53;
    return double(float(lo + (hi - lo) * u));
  }
  int64_t below(int64_t n) { return int64_t(g_() % uint64_t(n)); }

 private:
  std::mt19937_64 g_;
};

// ||a - b|| / max(||a||, ||b||), 0 when both are zero.
inline double nerr(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  const double den = std::sqrt(std::max(na, nb));
  return den == 0 ? std::sqrt(d) : std::sqrt(d) / den;
}

inline double dot(const Buf& a, const Buf& b) {
  double s = 0;
  for (int64_t i = 0; i < a.n(); ++i) s += a.get(i) * b.get(i);
  return s;
}

// One differentiable op case, built for a dtype by a factory. `loss` runs the forward and
// returns a fixed random projection of its outputs; `backward` fills the analytic gradients of
// that projection with respect to `wrt` into `grads` (same order).
struct Case {
  explicit Case(DType d) : dt(d), rng(1234) {}
  DType dt;
  Rng rng;
  std::deque<Buf> bufs;  // stable addresses
  std::vector<std::pair<std::string, Buf*>> wrt, grads, outs;
  std::function<double()> loss;
  std::function<void()> backward;

  Buf& make(std::vector<int64_t> shape) { return make_as(dt, std::move(shape)); }
  Buf& make_as(DType t, std::vector<int64_t> shape) {
    return bufs.emplace_back(t, std::move(shape));
  }
  Buf& rand(std::vector<int64_t> shape, double lo = -1, double hi = 1) {
    Buf& b = make(std::move(shape));
    for (int64_t i = 0; i < b.n(); ++i) b.set(i, rng.uniform(lo, hi));
    return b;
  }
  Buf& ints(std::vector<int64_t> shape, const std::vector<int>& v) {
    Buf& b = make_as(DType::I32, std::move(shape));
    for (int64_t i = 0; i < b.n(); ++i) b.set(i, v[i]);
    return b;
  }
};

using CaseFactory = std::function<void(Case&)>;

// Central differences of c.loss with respect to every element of every `wrt` buffer.
inline std::vector<std::vector<double>> numeric_grads(Case& c, double eps) {
  std::vector<std::vector<double>> out;
  for (auto& [name, b] : c.wrt) {
    std::vector<double> g(b->n());
    for (int64_t i = 0; i < b->n(); ++i) {
      const double v = b->get(i);
      b->set(i, v + eps);
      const double lp = c.loss();
      b->set(i, v - eps);
      const double lm = c.loss();
      b->set(i, v);
      g[i] = (lp - lm) / (2 * eps);
    }
    out.push_back(std::move(g));
  }
  return out;
}

// ------------------------------------------------------------------ shared helpers

inline double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Random expert choices: K distinct experts per row.
inline std::vector<int> random_choices(Rng& rng, int64_t N, int64_t K, int64_t E) {
  std::vector<int> idx;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int> row;
    while (int64_t(row.size()) < K) {
      const int e = int(rng.below(E));
      if (std::find(row.begin(), row.end(), e) == row.end()) row.push_back(e);
    }
    idx.insert(idx.end(), row.begin(), row.end());
  }
  return idx;
}

inline ops::RouterSpec router_spec(int64_t E, int64_t G, int64_t tg, int64_t K, bool norm,
                                   double sc) {
  ops::RouterSpec s;
  s.n_experts = E;
  s.n_group = G;
  s.topk_group = tg;
  s.top_k = K;
  s.norm_topk_prob = norm;
  s.scaling = sc;
  return s;
}

inline const DType kFloatTypes[] = {DType::F32, DType::F64};
// Tolerance of a direct comparison against a double-precision naive result.
inline double tol(DType dt) { return dt == DType::F32 ? 1e-5 : 1e-12; }

inline void fill_rand(Buf& b, Rng& r, double lo = -1, double hi = 1) {
  for (int64_t i = 0; i < b.n(); ++i) b.set(i, r.uniform(lo, hi));
}

}  // namespace moet::test
