// Tensor-parallel linears under mpirun (model/tensor_parallel.h), on the SwiGLU MLP that dense
// layers and shared experts use: the fused gate/up projection column-parallel, down
// row-parallel. With TP-invariant sums (--deterministic) every part's output, input gradient and
// weight-gradient rows are bitwise those of one process, for groups of 2 and 4 ranks (and two
// groups of 2 inside 4 ranks), in fp32 and bf16, with and without accumulation; with plain sums
// they agree to rounding. A column-parallel output (a GEMM's output columns computed apart) is
// bitwise the same columns of the whole GEMM.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "core/file_io.h"
#include "kernels/ops.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/lm_head.h"
#include "model/mlp.h"
#include "model/model.h"
#include "model/params.h"
#include "model/recipe.h"
#include "model/rope.h"
#include "model/tensor_parallel.h"
#include "model/vocab_parallel.h"
#include "model/workspace.h"
#include "mpi_test_util.h"
#include "parallel/tp_group.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;
constexpr int64_t kN = 24, kD = 40, kF = 64;

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(size_t(n), 0.f);
  for (float& x : v) x = d(gen) * float(1 << (gen() % 12));  // magnitudes make order matter
  return v;
}

// One process's whole MLP: its inputs and weights (the same on every rank).
struct Full {
  std::vector<float> x = random_values(kN * kD, 1), dy = random_values(kN * kD, 2),
                     y0 = random_values(kN * kD, 3), dx0 = random_values(kN * kD, 4),
                     gate_up = random_values(2 * kF * kD, 5), down = random_values(kD * kF, 6);
};

// What a part computes: the whole y and dx, and its own rows/columns of the weight gradients.
struct Result {
  std::vector<float> y, dx, dgate_up, ddown;
};

Weight& weight(ParamStore& ps, const std::string& name) {
  for (Weight& w : ps.weights())
    if (w.name == name) return w;
  throw Error("no weight " + name);
}

// This part's slice of a full [R, C] matrix: rows [r0, r0 + nr) and columns [c0, c0 + nc).
void copy_block(const std::vector<float>& full, int64_t C, int64_t r0, int64_t nr, int64_t c0,
                int64_t nc, float* out) {
  for (int64_t r = 0; r < nr; ++r)
    std::memcpy(out + r * nc, full.data() + (r0 + r) * C + c0, size_t(nc) * sizeof(float));
}

Result run_mlp(const Full& f, const TensorParallel& tp, const ops::LinearPrecision& lin,
               bool accumulate) {
  ParamStore ps;
  SwiGluMlp mlp(kD, kF, ps, "mlp.", lin, tp);
  ps.allocate();
  const int64_t Fl = kF / tp.parts, f0 = tp.part * Fl;
  Weight& gu = weight(ps, "mlp.gate_up_proj.weight");
  Weight& dn = weight(ps, "mlp.down_proj.weight");
  copy_block(f.gate_up, kD, f0, Fl, 0, kD, gu.value.f32());                 // gate rows
  copy_block(f.gate_up, kD, kF + f0, Fl, 0, kD, gu.value.f32() + Fl * kD);  // up rows
  copy_block(f.down, kF, 0, kD, f0, Fl, dn.value.f32());                    // down columns
  ps.mark_updated();
  ps.zero_grads();
  Arena act(16 << 20), scratch(16 << 20);
  Workspace ws{act, scratch, 1, kN};
  mlp.plan(ws);
  Result r;
  r.y = f.y0, r.dx = f.dx0;
  std::vector<float> x = f.x, dy = f.dy;
  Tensor x_ND(x.data(), DType::F32, {kN, kD}), dy_ND(dy.data(), DType::F32, {kN, kD}),
      y_ND(r.y.data(), DType::F32, {kN, kD}), dx_ND(r.dx.data(), DType::F32, {kN, kD});
  mlp.forward(x_ND, y_ND, accumulate);
  mlp.backward(dy_ND, x_ND, dx_ND, accumulate);
  r.dgate_up.assign(gu.grad.f32(), gu.grad.f32() + gu.grad.numel());
  r.ddown.assign(dn.grad.f32(), dn.grad.f32() + dn.grad.numel());
  return r;
}

// The part's slices of one process's weight gradients, laid out as the part holds them.
Result part_of(const Result& one, const TensorParallel& tp) {
  const int64_t Fl = kF / tp.parts, f0 = tp.part * Fl;
  Result r = one;
  r.dgate_up.assign(size_t(2 * Fl * kD), 0.f);
  r.ddown.assign(size_t(kD * Fl), 0.f);
  copy_block(one.dgate_up, kD, f0, Fl, 0, kD, r.dgate_up.data());
  copy_block(one.dgate_up, kD, kF + f0, Fl, 0, kD, r.dgate_up.data() + Fl * kD);
  copy_block(one.ddown, kF, 0, kD, f0, Fl, r.ddown.data());
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, double(std::abs(b[i])));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst / scale;
}

// The tensor-parallel layouts of this world: every rank one group, and groups of 2 when there
// are 4 ranks.
struct Layout {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<CommunicatorTpGroup> group;
  TensorParallel tp;
};
std::vector<Layout> layouts(bool invariant) {
  MpiCommunicator& world = test::world();
  std::vector<Layout> out;
  for (int parts : {world.size(), 2}) {
    if (parts > world.size() || world.size() % parts != 0) continue;
    if (!out.empty() && parts == out.front().tp.parts) continue;
    Layout l;
    l.comm = world.split(world.rank() / parts, world.rank());
    l.group = std::make_unique<CommunicatorTpGroup>(*l.comm);
    l.tp = {.part = world.rank() % parts,
            .parts = parts,
            .group = l.group.get(),
            .invariant = invariant};
    out.push_back(std::move(l));
  }
  return out;
}

const ops::LinearPrecision kF32 = {}, kBF16 = ops::LinearPrecision::all(ops::Format::BF16);

TEST(TensorParallel, InvariantSumsEqualOneProcessBitwise) {
  const Full f;
  for (const ops::LinearPrecision& lin : {kF32, kBF16})
    for (bool accumulate : {false, true}) {
      const Result one = run_mlp(f, {.invariant = true}, lin, accumulate);
      for (const Layout& l : layouts(true)) {
        SCOPED_TRACE(std::string(ops::format_name(lin.fprop)) + " parts " +
                     std::to_string(l.tp.parts) + (accumulate ? " accumulate" : ""));
        const Result got = run_mlp(f, l.tp, lin, accumulate), want = part_of(one, l.tp);
        EXPECT_TRUE(same_bits(got.y, want.y));
        EXPECT_TRUE(same_bits(got.dx, want.dx));
        EXPECT_TRUE(same_bits(got.dgate_up, want.dgate_up));
        EXPECT_TRUE(same_bits(got.ddown, want.ddown));
      }
    }
}

// The control: the pieces are what makes the sums agree — one GEMM over the whole reduction (a
// plain one-process run) differs from the invariant sums in the last bits, so the test above
// would see a layout that summed its own way.
TEST(TensorParallel, PlainSumsDifferInTheLastBitsOnly) {
  const Full f;
  const Result plain = run_mlp(f, {}, kF32, false);
  const Result invariant = run_mlp(f, {.invariant = true}, kF32, false);
  EXPECT_FALSE(same_bits(plain.y, invariant.y));
  EXPECT_FALSE(same_bits(plain.dx, invariant.dx));
  EXPECT_LT(max_rel(invariant.y, plain.y), 1e-5);
  for (const Layout& l : layouts(false)) {
    SCOPED_TRACE("parts " + std::to_string(l.tp.parts));
    const Result got = run_mlp(f, l.tp, kF32, true),
                 want = part_of(run_mlp(f, {}, kF32, true), l.tp);
    EXPECT_LT(max_rel(got.y, want.y), 1e-5);
    EXPECT_LT(max_rel(got.dx, want.dx), 1e-5);
    // the weight gradients are split outputs: bitwise even with plain sums
    EXPECT_TRUE(same_bits(got.dgate_up, want.dgate_up));
    EXPECT_TRUE(same_bits(got.ddown, want.ddown));
  }
}

// Attention with its heads split: every full weight random (the same on every rank), each part
// given its block of each — the whole weight where the part's shape is the whole shape, else its
// rows (q_b, kv_b: column-parallel by heads) or its columns (o: row-parallel).
struct AttentionResult {
  std::vector<float> y, dx;
  std::map<std::string, std::vector<float>> grads;  // by name, this part's block
};

AttentionResult run_attention(const ModelConfig& c, const TensorParallel& tp,
                              const ops::LinearPrecision& lin) {
  const int64_t T = 12, D = c.hidden_size;
  ParamStore full_ps, ps;
  MlaAttention full(c, full_ps, "a.", lin);  // only for the full shapes
  MlaAttention attn(c, ps, "a.", lin, ops::Format::F32, tp);
  ps.allocate();
  uint32_t seed = 10;
  for (Weight& w : ps.weights()) {
    const Weight& fw = weight(full_ps, w.name);
    const int64_t R = fw.value.size(0), C = fw.value.ndim > 1 ? fw.value.size(1) : 1;
    const std::vector<float> v = random_values(R * C, seed++);
    const int64_t r = w.value.size(0), cols = w.value.ndim > 1 ? w.value.size(1) : 1;
    copy_block(v, C, r == R ? 0 : tp.part * r, r, cols == C ? 0 : tp.part * cols, cols,
               w.value.f32());
    if (!w.name.ends_with("norm.weight")) ops::scale_inplace(w.value, 1.0 / 64);
  }
  ps.mark_updated();
  ps.zero_grads();
  Arena act(16 << 20), scratch(16 << 20);
  Workspace ws{act, scratch, 1, T};
  attn.plan(ws);
  const int64_t R2 = c.qk_rope_head_dim / 2;
  std::vector<float> cs(size_t(T * R2)), sn(cs.size());
  RopeCache rope{Tensor(cs.data(), DType::F32, {T, R2}), Tensor(sn.data(), DType::F32, {T, R2}),
                 attention_softmax_scale(c)};
  fill_rope_tables(c, rope.cos_TR2, rope.sin_TR2);
  std::vector<float> x = random_values(T * D, 7), dy = random_values(T * D, 8);
  AttentionResult out;
  out.y.assign(size_t(T * D), 0.f);
  out.dx.assign(size_t(T * D), 0.f);
  Tensor x_ND(x.data(), DType::F32, {T, D}), dy_ND(dy.data(), DType::F32, {T, D}),
      y_ND(out.y.data(), DType::F32, {T, D}), dx_ND(out.dx.data(), DType::F32, {T, D});
  attn.forward(x_ND, y_ND, rope);
  attn.backward(dy_ND, x_ND, dx_ND, rope);
  for (Weight& w : ps.weights())
    out.grads[w.name].assign(w.grad.f32(), w.grad.f32() + w.grad.numel());
  return out;
}

TEST(TensorParallel, AttentionHeadsSplitEqualOneProcessBitwise) {
  const ModelConfig c =
      parse_model_config(read_text_file(kRoot + "/configs/tiny.json"), "tiny.json");
  for (const ops::LinearPrecision& lin : {kF32, kBF16}) {
    const AttentionResult one = run_attention(c, {.invariant = true}, lin);
    for (const Layout& l : layouts(true)) {
      SCOPED_TRACE(std::string(ops::format_name(lin.fprop)) + " parts " +
                   std::to_string(l.tp.parts));
      const AttentionResult got = run_attention(c, l.tp, lin);
      EXPECT_TRUE(same_bits(got.y, one.y));
      EXPECT_TRUE(same_bits(got.dx, one.dx));
      ASSERT_EQ(got.grads.size(), one.grads.size());
      for (const auto& [name, g] : got.grads) {
        const std::vector<float>& all = one.grads.at(name);
        std::vector<float> want(g.size());
        if (g.size() == all.size()) {
          want = all;  // replicated: every part computes the whole gradient
        } else if (name.find("o_proj") != std::string::npos) {
          const int64_t D = c.hidden_size, C = int64_t(all.size()) / D, cl = C / l.tp.parts;
          copy_block(all, C, 0, D, l.tp.part * cl, cl, want.data());
        } else {
          std::copy_n(all.begin() + l.tp.part * int64_t(g.size()), g.size(), want.begin());
        }
        EXPECT_TRUE(same_bits(g, want)) << name;
      }
    }
  }
}

// The output layer with the vocabulary split: the loss, the input gradient, the norm's gradient
// and this part's rows of the projection's gradient; the gathered logits; and the embedding.
// 160 rows of a 131072-word vocabulary run as two chunks of the LM head.
struct HeadResult {
  double loss = 0;
  std::vector<float> dh, dproj, dnorm, logits, embedded, dtable;
};

HeadResult run_head(const TensorParallel& tp, const ops::LinearPrecision& lin, bool fused) {
  const int64_t N = 160, D = 16, V = 131072, Vl = V / tp.parts;
  ParamStore ps;
  Weight* proj = ps.declare("lm_head.weight", {Vl, D}, Init::Normal, true);
  LmHead head(1e-6, D, ps, "model.norm.weight", proj, lin, tp);
  ps.allocate();
  const std::vector<float> table = random_values(V * D, 21), norm = random_values(D, 22);
  std::copy_n(table.begin() + tp.part * Vl * D, Vl * D, proj->value.f32());
  ops::scale_inplace(proj->value, 1.0 / 256);
  std::copy(norm.begin(), norm.end(), weight(ps, "model.norm.weight").value.f32());
  ps.mark_updated();
  ps.zero_grads();
  Arena act(64 << 20), scratch(int64_t(128) << 20);
  Workspace ws{act, scratch, 1, N};
  head.plan(ws);
  std::vector<float> h = random_values(N * D, 23);
  std::vector<int32_t> tgt(static_cast<size_t>(N));
  std::mt19937 g(5);
  for (int64_t n = 0; n < N; ++n) tgt[size_t(n)] = n % 9 == 4 ? -1 : int32_t(g() % V);
  HeadResult r;
  r.dh.assign(size_t(N * D), 0.f);
  Tensor h_ND(h.data(), DType::F32, {N, D}), t_N(tgt.data(), DType::I32, {N}),
      dh_ND(r.dh.data(), DType::F32, {N, D});
  r.loss = head.forward(h_ND, t_N, fused ? 0.5 : 0.0);
  head.backward(h_ND, t_N, 0.5, dh_ND, false);
  r.dproj.assign(proj->grad.f32(), proj->grad.f32() + proj->grad.numel());
  const Weight& nw = weight(ps, "model.norm.weight");
  r.dnorm.assign(nw.grad.f32(), nw.grad.f32() + D);
  r.logits.assign(size_t(N * V), 0.f);
  Tensor logits(r.logits.data(), DType::F32, {N, V});
  head.logits(logits);
  // the embedding over the same table (tokens: the targets' ids, the ignored ones as 0)
  std::vector<int32_t> tok = tgt;
  for (int32_t& t : tok) t = std::max(t, 0);
  Tensor tok_N(tok.data(), DType::I32, {N});
  r.embedded.assign(size_t(N * D), 0.f);
  Tensor e_ND(r.embedded.data(), DType::F32, {N, D});
  vocab_parallel_embedding_forward(tp, tok_N, proj->value, e_ND);
  ps.zero_grads();
  vocab_parallel_embedding_backward(tp, tok_N, dh_ND, proj->grad);
  r.dtable.assign(proj->grad.f32(), proj->grad.f32() + proj->grad.numel());
  return r;
}

std::vector<float> rows_of_part(const std::vector<float>& all, const TensorParallel& tp) {
  const size_t n = all.size() / size_t(tp.parts);
  return {all.begin() + tp.part * int64_t(n), all.begin() + (tp.part + 1) * int64_t(n)};
}

TEST(TensorParallel, VocabularySplitEqualsOneProcessBitwise) {
  for (const ops::LinearPrecision& lin : {kF32, kBF16})
    for (bool fused : {true, false}) {
      const HeadResult one = run_head({.invariant = true}, lin, fused);
      for (const Layout& l : layouts(true)) {
        SCOPED_TRACE(std::string(ops::format_name(lin.fprop)) + " parts " +
                     std::to_string(l.tp.parts) + (fused ? " fused" : " recomputed"));
        const HeadResult got = run_head(l.tp, lin, fused);
        EXPECT_EQ(std::memcmp(&got.loss, &one.loss, sizeof(double)), 0)
            << got.loss << " vs " << one.loss;
        EXPECT_TRUE(same_bits(got.dh, one.dh));
        EXPECT_TRUE(same_bits(got.dnorm, one.dnorm));
        EXPECT_TRUE(same_bits(got.dproj, rows_of_part(one.dproj, l.tp)));
        EXPECT_TRUE(same_bits(got.logits, one.logits));
        EXPECT_TRUE(same_bits(got.embedded, one.embedded));
        EXPECT_TRUE(same_bits(got.dtable, rows_of_part(one.dtable, l.tp)));
      }
    }
}

TEST(TensorParallel, VocabularySplitAgreesWithThePlainHead) {
  const HeadResult plain = run_head({}, kF32, true);
  EXPECT_GT(plain.loss, 1.0);
  for (const Layout& l : layouts(false)) {
    SCOPED_TRACE("parts " + std::to_string(l.tp.parts));
    const HeadResult got = run_head(l.tp, kF32, true);
    EXPECT_NEAR(got.loss, plain.loss, 1e-6 * plain.loss);
    EXPECT_LT(max_rel(got.dh, plain.dh), 1e-5);
    EXPECT_LT(max_rel(got.dproj, rows_of_part(plain.dproj, l.tp)), 1e-5);
    EXPECT_TRUE(same_bits(got.embedded, plain.embedded));
  }
}

// A whole model: tiny.json with dense layers only (MoE layers under TP need sequence
// parallelism's token split, not built) and a vocabulary of 256, with its MTP module. Each
// weight's gradient in the whole weight's coordinates (NaN where this part holds nothing).
struct ModelResult {
  LossBreakdown loss;
  std::map<std::string, std::vector<float>> grads;
};

ModelConfig dense_config() {
  ModelConfig c = parse_model_config(read_text_file(kRoot + "/configs/tiny.json"), "tiny.json");
  c.first_k_dense_replace = c.num_hidden_layers;
  c.vocab_size = 256;
  return c;
}

ModelResult run_model(const ModelConfig& c, const TensorParallel& tp, const std::string& recipe) {
  ModelSpec spec;
  spec.micro_batch = 2;
  spec.seq_len = 16;
  spec.precision = resolve_precision(recipe, 0);
  spec.tp = tp;
  Model m(c, spec);
  m.init_parameters(5);
  std::mt19937 g(3);
  std::vector<int32_t> tokens(size_t(spec.micro_batch * (spec.seq_len + 1)));
  for (int32_t& t : tokens) t = int32_t(g() % uint32_t(c.vocab_size));
  ModelResult r;
  m.params().zero_grads();
  r.loss = m.forward(tokens.data(), 1.0);
  m.backward(1.0);
  for (const Weight& w : m.params().weights()) {
    int64_t n = 1;
    for (int64_t d : w.whole_shape()) n *= d;
    std::vector<float>& out = r.grads[w.name];
    out.assign(size_t(n), std::nanf(""));
    w.for_each_run(0, w.grad.numel(), [&](int64_t local, int64_t whole, int64_t len) {
      std::copy_n(w.grad.f32() + local, len, out.begin() + whole);
    });
  }
  return r;
}

TEST(TensorParallel, WholeDenseModelEqualsOneProcessBitwise) {
  const ModelConfig c = dense_config();
  for (const std::string recipe : {"fp32", "bf16"}) {
    const ModelResult one = run_model(c, {.invariant = true}, recipe);
    EXPECT_GT(one.loss.mtp_loss, 0.0);
    for (const Layout& l : layouts(true)) {
      SCOPED_TRACE(recipe + " parts " + std::to_string(l.tp.parts));
      const ModelResult got = run_model(c, l.tp, recipe);
      EXPECT_EQ(std::memcmp(&got.loss.lm_loss, &one.loss.lm_loss, sizeof(double)), 0);
      EXPECT_EQ(std::memcmp(&got.loss.mtp_loss, &one.loss.mtp_loss, sizeof(double)), 0);
      ASSERT_EQ(got.grads.size(), one.grads.size());
      int64_t compared = 0;
      for (const auto& [name, g] : got.grads) {
        const std::vector<float>& want = one.grads.at(name);
        ASSERT_EQ(g.size(), want.size()) << name;
        int64_t differ = 0;
        for (size_t i = 0; i < g.size(); ++i) {
          if (std::isnan(g[i])) continue;  // another part's
          ++compared;
          differ += std::memcmp(&g[i], &want[i], sizeof(float)) != 0;
        }
        EXPECT_EQ(differ, 0) << name;
      }
      EXPECT_GT(compared, 0);
    }
  }
}

// Building c under spec throws moet::Error with `text` in its one line.
void expect_refusal(const ModelConfig& c, const ModelSpec& spec, const std::string& text) {
  try {
    Model m(c, spec);
    ADD_FAILURE() << "built a model that should be refused with: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(TensorParallel, MoeLayersAskForTheTokenSplit) {
  const ModelConfig c =
      parse_model_config(read_text_file(kRoot + "/configs/tiny.json"), "tiny.json");
  ModelSpec spec;
  spec.micro_batch = 1;
  spec.seq_len = 8;
  spec.tp = {.part = 0, .parts = 2};
  expect_refusal(c, spec, "vocabulary 257 does not divide over 2");
  ModelConfig even = c;
  even.vocab_size = 256;
  expect_refusal(even, spec, "MoE layers under --tp 2 need sequence parallelism");
}

TEST(TensorParallel, RefusesWhatDoesNotDivide) {
  ParamStore ps;
  const TensorParallel three{.part = 0, .parts = 3};
  try {
    SwiGluMlp mlp(kD, kF, ps, "mlp.", {}, three);
    FAIL() << "64 over 3 ranks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("intermediate size 64 does not divide over 3"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(SwiGluMlp(kD, 42, ps, "b.", {}, {.invariant = true}), Error);  // 42 / 4 pieces
}

}  // namespace
}  // namespace moet
