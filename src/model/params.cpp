#include "model/params.h"

#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/rng.h"
#include "core/tree_sum.h"

namespace moet {

namespace {
// Rows [begin, end) of t seen as a matrix [numel / last, last]; t itself when they cover it.
Tensor row_slice(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t cols = t.shape[t.ndim - 1], rows = t.numel() / cols;
  if (begin == 0 && end == rows) return t;
  return t.view({rows, cols}).rows(begin, end);
}
}  // namespace

Tensor NamedSlice::value() const { return row_slice(weight->value, row_begin, row_end); }
Tensor NamedSlice::grad() const { return row_slice(weight->grad, row_begin, row_end); }

Weight* ParamStore::declare(const std::string& name, std::initializer_list<int64_t> shape,
                            Init init, bool decay, bool trainable, bool expose_name) {
  auto existing = [&](std::deque<Weight>& weights) -> Weight* {
    for (Weight& w : weights)
      if (w.name == name) {
        Tensor want(nullptr, DType::F32, shape);
        MOET_ASSERT(want.ndim == w.value.ndim && want.numel() == w.value.numel());
        return &w;
      }
    return nullptr;
  };
  if (owner_) {
    if (Weight* w = existing(owner_->weights_)) return w;
    MOET_FAIL("shared parameters lack '", name, "'");
  }
  if (share_)
    if (Weight* w = existing(weights_)) return w;
  MOET_ASSERT(!allocated());
  Weight& w = weights_.emplace_back();
  w.name = name;
  w.value = Tensor(nullptr, DType::F32, shape);
  w.grad = w.value;
  w.init = init;
  w.decay = decay;
  w.trainable = trainable;
  w.offset = numel_;
  w.version = &version_;
  numel_ += w.value.numel();
  if (expose_name) {
    int64_t rows = w.value.numel() / w.value.shape[w.value.ndim - 1];
    add_name(name, &w, 0, rows);
  }
  return &w;
}

void ParamStore::add_name(const std::string& name, const Weight* w, int64_t row_begin,
                          int64_t row_end) {
  if (owner_) return;                                                    // the owner has the names
  if (share_ && names_.count(name) && names_[name].weight == w) return;  // declared again
  MOET_ASSERT(names_.count(name) == 0);
  names_[name] = NamedSlice{w, row_begin, row_end};
}

std::vector<int64_t> Weight::whole_shape() const {
  std::vector<int64_t> s(value.shape, value.shape + value.ndim);
  if (shard.parts > 1) s[size_t(shard.dim)] *= shard.parts;
  return s;
}

double Weight::grad_square_sum() const {
  if (shard.pieces == 0) return ops::sum_squares(grad);
  int64_t inner = 1;
  for (int j = shard.dim + 1; j < grad.ndim; ++j) inner *= grad.shape[j];
  const int64_t S = grad.shape[shard.dim], outer = grad.numel() / (S * inner);
  const int64_t block = S / shard.segments, width = block / shard.pieces;
  constexpr int64_t kMaxPieces = 64;
  MOET_ASSERT(shard.pieces <= kMaxPieces && width * shard.pieces == block);
  double sums[kMaxPieces] = {};
  const float* g = grad.f32();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t d = 0; d < S; ++d) {
      const float* row = g + (o * S + d) * inner;
      double acc = sums[(d % block) / width];
      for (int64_t i = 0; i < inner; ++i) acc += double(row[i]) * double(row[i]);
      sums[(d % block) / width] = acc;
    }
  tree_sum_arrays(sums, shard.pieces, 1);  // ((p0 + p1) + (p2 + p3))
  return sums[0];
}

void ParamStore::set_shard(Weight* w, const WeightShard& shard) {
  MOET_ASSERT(shard.dim >= 0 && shard.dim < w->value.ndim && shard.segments >= 1 &&
              0 <= shard.part && shard.part < shard.parts &&
              w->value.shape[shard.dim] % shard.segments == 0);
  if (owner_ || w->shard.parts > 1 || w->shard.pieces > 0) {  // declared again (bound, shared)
    MOET_ASSERT(w->shard.dim == shard.dim && w->shard.parts == shard.parts &&
                w->shard.part == shard.part && w->shard.segments == shard.segments &&
                w->shard.pieces == shard.pieces);
    return;
  }
  w->shard = shard;
}

void ParamStore::reserve_operands(Weight* w, const ops::LinearPrecision& p) {
  if (owner_) return owner_->reserve_operands(w, p);
  const ops::LinearPrecision& have = w->operand_precision;
  if (!have.is_f32() || allocated()) {
    MOET_ASSERT(have.fprop == p.fprop && have.dgrad == p.dgrad && have.wgrad == p.wgrad);
    return;
  }
  w->operand_precision = p;
}

void ParamStore::allocate() {
  MOET_ASSERT(!allocated());
  values_ = Arena(numel_ * sizeof(float));
  grads_ = Arena(numel_ * sizeof(float));
  for (Weight& w : weights_) {
    w.value.ptr = values_.base() + w.offset * sizeof(float);
    w.grad.ptr = grads_.base() + w.offset * sizeof(float);
  }
  // Low-precision operand copies: plan their sizes, then place them.
  const DType dt = ops::gemm_operand_dtype();
  auto place = [&](Arena& a) {
    for (Weight& w : weights_) {
      const ops::LinearPrecision& p = w.operand_precision;
      auto shaped = [&](Tensor t) {
        t.dtype = dt;
        return t;
      };
      if (p.fprop != ops::Format::F32) {
        w.operand_copies.fprop = shaped(w.value);
        w.operand_copies.fprop.ptr = a.alloc(dt, {w.value.numel()}).ptr;
      }
      if (ops::weight_dgrad_separate(p)) {
        w.operand_copies.dgrad = shaped(w.value);
        w.operand_copies.dgrad.ptr = a.alloc(dt, {w.value.numel()}).ptr;
      }
      // the weight's identity in its gradients' stochastic rounding (FP4): the same on every rank
      w.operand_copies.key = std::hash<std::string>{}(w.name);
    }
  };
  Arena plan = Arena::planning();
  place(plan);
  if (plan.used() > 0) {
    operands_ = Arena(plan.used());
    place(operands_);
  }
}

const ops::WeightOperands* Weight::operands() {
  if (operand_precision.is_f32()) return nullptr;
  if (operand_version != *version) {
    ops::prepare_weight(value, operand_precision, operand_copies);
    operand_version = *version;
  }
  return &operand_copies;
}

void ParamStore::initialize(uint64_t seed, double std) {
  MOET_ASSERT(allocated());
  mark_updated();
  for (Weight& w : weights_) {
    // Keyed by the weight's name, so adding a weight never changes another's values.
    CounterRng rng(seed, stream_id({std::hash<std::string>{}(w.name)}));
    float* p = w.value.f32();
    int64_t n = w.value.numel();
    switch (w.init) {
      case Init::Normal:
        // each element the whole weight's value at its place there (a shard's runs)
        w.for_each_run(0, n, [&](int64_t local, int64_t whole, int64_t len) {
#pragma omp parallel for schedule(static) if (len > 4096)
          for (int64_t i = 0; i < len; ++i)
            p[local + i] = static_cast<float>(std * rng.normal(w.init_offset + whole + i));
        });
        break;
      case Init::Ones:
        for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
        break;
      case Init::Zeros:
        std::memset(p, 0, n * sizeof(float));
        break;
    }
  }
}

void ParamStore::zero_grads() { std::memset(grads_.base(), 0, numel_ * sizeof(float)); }

const NamedSlice& ParamStore::named(const std::string& name) const {
  auto it = names_.find(name);
  MOET_CHECK(it != names_.end(), "the model has no parameter named '", name, "'");
  return it->second;
}

Tensor ParamStore::all_values() const { return Tensor(values_.base(), DType::F32, {numel_}); }
Tensor ParamStore::all_grads() const { return Tensor(grads_.base(), DType::F32, {numel_}); }

}  // namespace moet
