// moe.cpp — mixture-of-experts ops: group-limited top-k router with its gate backward, the
// sequence-wise balance loss, the router z-loss, and permutation by expert (counting-sort plan,
// row gather, weighted unpermute).
#include <algorithm>

#include "kernels/cpu/common.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {

void check_spec(const RouterSpec& sp) {
  MOET_CHECK(sp.n_experts >= 1 && sp.n_group >= 1 && sp.n_experts % sp.n_group == 0,
             "router: n_experts ", sp.n_experts, " must be a positive multiple of n_group ",
             sp.n_group);
  MOET_CHECK(sp.topk_group >= 1 && sp.topk_group <= sp.n_group, "router: topk_group ",
             sp.topk_group, " must be in [1, n_group=", sp.n_group, "]");
  MOET_CHECK(sp.top_k >= 1 && sp.top_k <= sp.topk_group * (sp.n_experts / sp.n_group),
             "router: top_k ", sp.top_k, " exceeds the experts of the kept groups (",
             sp.topk_group * (sp.n_experts / sp.n_group), ")");
}

// The K-by-K row of chosen experts must be valid expert ids.
void check_idx(const Tensor& idx_NK, int64_t E) {
  check_i32(idx_NK);
  const int32_t* p = idx_NK.i32();
  for (int64_t i = 0; i < idx_NK.numel(); ++i)
    MOET_CHECK(p[i] >= 0 && p[i] < E, "expert index ", p[i], " at ", i, " outside [0, ", E, ")");
}

// Index of the largest v[i] over i in [0, n) with ok(i); ties go to the lower index.
template <typename V, typename Ok>
int64_t argmax_first(const V* v, int64_t n, Ok ok) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i)
    if (ok(i) && (best < 0 || v[i] > v[best])) best = i;
  return best;
}

template <typename T>
double logsumexp(const T* x, int64_t n) {
  T m = x[0];
  for (int64_t j = 1; j < n; ++j) m = std::max(m, x[j]);
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += double(std::exp(x[j] - m));
  return double(m) + std::log(s);
}

}  // namespace

void router_forward(const Tensor& logits_NE, const Tensor& bias_E, const RouterSpec& spec,
                    Tensor& scores_NE, Tensor& idx_NK, Tensor& gates_NK) {
  OpScope op_scope("router", 0, 3.0 * double(logits_NE.bytes()));
  check_spec(spec);
  const int64_t E = spec.n_experts, G = spec.n_group, EG = E / G, K = spec.top_k;
  const int64_t N = rows_of(logits_NE);
  MOET_CHECK(logits_NE.size(-1) == E && scores_NE.numel() == N * E && idx_NK.numel() == N * K &&
                 gates_NK.numel() == N * K && (bias_E.empty() || bias_E.numel() == E),
             "router: logits ", logits_NE.shape_str(), " bias ", bias_E.shape_str(), " scores ",
             scores_NE.shape_str(), " idx ", idx_NK.shape_str(), " gates ", gates_NK.shape_str(),
             " E=", E, " K=", K);
  check_i32(idx_NK);
  check_dtype(logits_NE.dtype, {&bias_E, &scores_NE, &gates_NK});
  dispatch_float(logits_NE.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* lg = logits_NE.data<T>();
    const T* bias = bias_E.empty() ? nullptr : bias_E.data<T>();
    T* sc = scores_NE.data<T>();
    int32_t* idx = idx_NK.i32();
    T* gates = gates_NK.data<T>();
#pragma omp parallel for schedule(static) if (N * E * 4 > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      T* sel = scratch<T>(size_t(E + G), 2);  // selection scores, then group scores
      T* gsc = sel + E;
      char* avail = scratch<char>(size_t(E + G), 2);  // expert usable / group kept
      char* kept = avail + E;
      const T* x = lg + n * E;
      T* s = sc + n * E;
      for (int64_t e = 0; e < E; ++e) {
        s[e] = sigmoid(x[e]);
        sel[e] = bias ? s[e] + bias[e] : s[e];
      }
      for (int64_t g = 0; g < G; ++g) {  // sum of the two largest selection scores
        const T* v = sel + g * EG;
        const int64_t i1 = argmax_first(v, EG, [](int64_t) { return true; });
        const int64_t i2 = argmax_first(v, EG, [&](int64_t i) { return i != i1; });
        gsc[g] = i2 < 0 ? v[i1] : v[i1] + v[i2];
        kept[g] = 0;
      }
      for (int64_t r = 0; r < spec.topk_group; ++r)
        kept[argmax_first(gsc, G, [&](int64_t g) { return !kept[g]; })] = 1;
      for (int64_t e = 0; e < E; ++e) avail[e] = kept[e / EG];
      int32_t* id = idx + n * K;
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = argmax_first(sel, E, [&](int64_t i) { return avail[i] != 0; });
        avail[e] = 0;
        id[k] = int32_t(e);
        sum += double(s[e]);
      }
      const double c = spec.norm_topk_prob ? spec.scaling / sum : spec.scaling;
      for (int64_t k = 0; k < K; ++k) gates[n * K + k] = T(double(s[id[k]]) * c);
    }
  });
}

// g_k = c s_k / S (S = Σ_k s_k) gives ds_j = c (dg_j / S - Σ_k dg_k s_k / S²); without the
// normalisation ds_j = c dg_j; then dlogit_j = ds_j s_j (1 - s_j); unchosen experts get 0.
void router_backward(const Tensor& dgates_NK, const Tensor& scores_NE, const Tensor& idx_NK,
                     const RouterSpec& spec, Tensor& dlogits_NE) {
  OpScope op_scope("router", 0, 2.0 * double(dlogits_NE.bytes()));
  check_spec(spec);
  const int64_t E = spec.n_experts, K = spec.top_k, N = rows_of(scores_NE);
  MOET_CHECK(scores_NE.size(-1) == E && dgates_NK.numel() == N * K && idx_NK.numel() == N * K &&
                 dlogits_NE.numel() == N * E,
             "router bwd: scores ", scores_NE.shape_str(), " dgates ", dgates_NK.shape_str(),
             " idx ", idx_NK.shape_str(), " dlogits ", dlogits_NE.shape_str());
  check_idx(idx_NK, E);
  check_dtype(scores_NE.dtype, {&dgates_NK, &dlogits_NE});
  dispatch_float(scores_NE.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* sc = scores_NE.data<T>();
    const T* dg = dgates_NK.data<T>();
    const int32_t* idx = idx_NK.i32();
    T* dl = dlogits_NE.data<T>();
#pragma omp parallel for schedule(static) if (N * E > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T* s = sc + n * E;
      const int32_t* id = idx + n * K;
      const T* d = dg + n * K;
      T* out = dl + n * E;
      std::fill_n(out, E, T(0));
      double S = 0, dot = 0;
      for (int64_t k = 0; k < K; ++k) {
        S += double(s[id[k]]);
        dot += double(d[k]) * double(s[id[k]]);
      }
      const double c = spec.scaling;
      for (int64_t k = 0; k < K; ++k) {
        const double sk = s[id[k]];
        const double ds =
            spec.norm_topk_prob ? c * (double(d[k]) / S - dot / (S * S)) : c * double(d[k]);
        out[id[k]] = T(ds * sk * (1.0 - sk));
      }
    }
  });
}

// L = 1/B Σ_b Σ_e f_be P_be with f_be = E/(K T) count_be (constant), P_be = 1/T Σ_t s_te / Z_t,
// Z_t = Σ_j s_tj. dL/ds_tj = (f_bj / Z_t - Σ_e f_be s_te / Z_t²) / (B T); then times s (1 - s).
double balance_loss(const Tensor& scores_NE, const Tensor& idx_NK, int64_t B, int64_t T,
                    double coef, Tensor& dlogits_NE) {
  OpScope op_scope("router", 0, double(scores_NE.bytes()));
  const int64_t N = B * T, E = scores_NE.size(-1);
  MOET_CHECK(B >= 1 && T >= 1 && rows_of(scores_NE) == N && idx_NK.numel() % N == 0 &&
                 (dlogits_NE.empty() || dlogits_NE.numel() == N * E),
             "balance_loss: scores ", scores_NE.shape_str(), " idx ", idx_NK.shape_str(), " B ", B,
             " T ", T, " dlogits ", dlogits_NE.shape_str());
  const int64_t K = idx_NK.numel() / N;
  check_idx(idx_NK, E);
  check_dtype(scores_NE.dtype, {&dlogits_NE});
  const int32_t* idx = idx_NK.i32();
  double* f = scratch<double>(size_t(B * E + N), 3);  // f[b, e], then per-token loss terms
  double* term = f + B * E;
  std::fill_n(f, B * E, 0.0);
  const double fscale = double(E) / double(K * T);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) f[(n / T) * E + idx[n * K + k]] += fscale;
  return dispatch_float(scores_NE.dtype, [&](auto t0) {
    using S = decltype(t0);
    const S* sc = scores_NE.data<S>();
    S* dl = dlogits_NE.empty() ? nullptr : dlogits_NE.data<S>();
    const double inv_bt = 1.0 / double(N);
#pragma omp parallel for schedule(static) if (N * E > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const S* s = sc + n * E;
      const double* fb = f + (n / T) * E;
      double Z = 0, a = 0;
      for (int64_t e = 0; e < E; ++e) {
        Z += double(s[e]);
        a += fb[e] * double(s[e]);
      }
      term[n] = a / Z;
      if (dl) {
        S* d = dl + n * E;
        for (int64_t j = 0; j < E; ++j) {
          const double sj = s[j], ds = (fb[j] / Z - a / (Z * Z)) * inv_bt;
          d[j] += S(coef * ds * sj * (1.0 - sj));
        }
      }
    }
    double total = 0;
    for (int64_t n = 0; n < N; ++n) total += term[n];
    return total * inv_bt;
  });
}

// z = mean_n lse_n²; dz/dx_nj = 2 lse_n softmax_nj / N.
double z_loss(const Tensor& logits_NE, double coef, Tensor& dlogits_NE) {
  OpScope op_scope("router", 0, double(logits_NE.bytes()));
  const int64_t E = logits_NE.size(-1), N = rows_of(logits_NE);
  MOET_CHECK(dlogits_NE.empty() || dlogits_NE.numel() == N * E, "z_loss: logits ",
             logits_NE.shape_str(), " dlogits ", dlogits_NE.shape_str());
  check_dtype(logits_NE.dtype, {&dlogits_NE});
  if (N == 0) return 0.0;
  return dispatch_float(logits_NE.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* lg = logits_NE.data<T>();
    T* dl = dlogits_NE.empty() ? nullptr : dlogits_NE.data<T>();
    double* term = scratch<double>(size_t(N), 3);
#pragma omp parallel for schedule(static) if (N * E > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T* x = lg + n * E;
      const double lse = logsumexp(x, E);
      term[n] = lse * lse;
      if (dl) {
        T* d = dl + n * E;
        const double c = coef * 2.0 * lse / double(N);
        for (int64_t j = 0; j < E; ++j) d[j] += T(c * std::exp(double(x[j]) - lse));
      }
    }
    double total = 0;
    for (int64_t n = 0; n < N; ++n) total += term[n];
    return total / double(N);
  });
}

}  // namespace moet::ops
