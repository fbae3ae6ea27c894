// Expert and data parallelism under mpirun: dispatch∘combine is the identity; --ep 1/2/4 give
// bitwise-identical training; data parallelism equals one process to 1e-6 (a P-times larger
// micro-batch, or P accumulated micro-batches), and bit for bit with --deterministic, at every
// --ep (the experts' gradients kept apart per source rank).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "data/dataset.h"
#include "kernels/ops.h"
#include "model/local_dispatcher.h"
#include "model/model.h"
#include "mpi_dispatch_check.h"
#include "mpi_test_util.h"
#include "mpi_train_util.h"
#include "parallel/allgather_dispatcher.h"
#include "parallel/alltoall_dispatcher.h"
#include "parallel/data_parallel.h"
#include "train/train_step.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

TEST(ExpertParallel, DispatchThenCombineIsTheIdentity) {
  test::check_dispatch_identity_cases(test::DispatcherKind::kAllToAll);
}

using test::Split;
using test::TrainRun;

constexpr int64_t kT = 16;

// One process, no MPI: each step sees `parts` × B sequences of the global batch, as `parts`
// accumulated micro-batches of B (split) or one micro-batch of parts × B. With deterministic,
// `accum` micro-batches of parts × B sequences each, run one sequence at a time.
TrainRun train_single(int64_t B, int64_t parts, bool split, int steps, bool deterministic = false,
                      int64_t accum = 1) {
  ModelConfig cfg = load_model_config(kRoot + "/configs/tiny.json");
  const int64_t mb = split ? B : parts * B, A = split ? parts : accum;
  Model m(
      cfg,
      {.micro_batch = deterministic ? 1 : mb, .seq_len = kT, .loss_weights = {0.3, 1e-2, 1e-3}});
  m.init_parameters(7);
  LrSchedule sched;
  sched.max_lr = 3e-3;
  sched.min_lr = 3e-4;
  sched.warmup = 2;
  sched.total = steps;
  StepPlan plan;
  if (deterministic) plan.accumulation = deterministic_accumulation(m, mb, nullptr);
  StepRunner runner(m, AdamWConfig{}, sched, 1e-2, std::move(plan));
  MockDataset data(cfg.vocab_size, 3);
  std::vector<int32_t> tok(A * mb * (kT + 1));
  TrainRun out;
  for (int s = 0; s < steps; ++s) {
    if (split)
      data.fill_sequences(s, 0, 0, parts * B, kT, tok.data());
    else
      for (int64_t a = 0; a < A; ++a)
        data.fill_sequences(s, a, 0, mb, kT, tok.data() + a * mb * (kT + 1));
    StepResult r = runner.run(s, A, [&](int64_t a) { return tok.data() + a * mb * (kT + 1); });
    out.losses.push_back(r.losses.loss);
    out.norms.push_back(r.grad_norm);
  }
  test::keep_parameters(m.params(), out);
  return out;
}

TrainRun train(int ep, int64_t B, int64_t grad_accum, int steps, bool overlap = false,
               Split split = Split::kNone) {
  test::TrainSetup o;
  o.ep = ep;
  o.B = B;
  o.grad_accum = grad_accum;
  o.steps = steps;
  o.overlap = overlap;
  o.split = split;
  return test::train_tiny(o);
}

TEST(ExpertParallel, EpSizesGiveBitwiseIdenticalTraining) {
  const int P = test::world().size();
  TrainRun base = train(1, 2, 1, 20);
  for (int ep = 2; ep <= P; ep *= 2) {
    TrainRun r = train(ep, 2, 1, 20);
    for (size_t s = 0; s < base.losses.size(); ++s) {
      EXPECT_EQ(r.losses[s], base.losses[s]) << "ep " << ep << " step " << s;
      EXPECT_EQ(r.norms[s], base.norms[s]) << "ep " << ep << " step " << s;
    }
  }
}

// The same in every precision: FP8 tokens (codes and scales) or bf16 rows travel, quantized the
// same way whatever the layout; NVFP4's experts quantize each source's rows with their own global
// scale and draw their stochastic rounding by the rows' content, so no layout changes a bit.
TEST(ExpertParallel, EpSizesGiveBitwiseIdenticalTrainingInEveryPrecision) {
  const int P = test::world().size();
  for (Recipe recipe : {Recipe::BF16, Recipe::MXFP8, Recipe::FP8Blockwise, Recipe::NVFP4}) {
    test::TrainSetup o;
    o.steps = 6;
    o.precision.recipe = recipe;
    o.ep = 1;
    TrainRun base = test::train_tiny(o);
    for (int ep = 2; ep <= P; ep *= 2) {
      o.ep = ep;
      for (auto kind : {test::DispatcherKind::kAllToAll, test::DispatcherKind::kAllGather}) {
        o.dispatcher = kind;
        test::expect_same_training(test::train_tiny(o), base,
                                   std::string(recipe_name(recipe)) + " ep " + std::to_string(ep),
                                   false);
      }
    }
  }
}

// Tokens travel to the experts packed in the dispatch format: the expert rows are the
// quantized rows bit for bit, and the bytes sent are those of the packed rows.
TEST(ExpertParallel, PayloadFormatsTravelPackedAndLossless) {
  Communicator& world = test::world();
  const int64_t P = world.size(), N = 12, K = 2, D = 160, E = 2 * P, r = world.rank();
  for (ops::Format f :
       {ops::Format::F32, ops::Format::BF16, ops::Format::MXFP8, ops::Format::FP8Block}) {
    Arena act(8 << 20), scratch(8 << 20);
    Workspace ws{act, scratch, 1, N};
    AllToAllDispatcher d(world, E);
    d.set_payload_formats(f, ops::Format::BF16);
    d.plan(ws, D, K);
    Tensor x = act.alloc_f32({N, D}), xq = act.alloc_f32({N, D}), idx = act.alloc_i32({N, K});
    for (int64_t i = 0; i < N * D; ++i)
      x.f32()[i] = std::sin(float(i + 7 * r)) * std::exp2(float(i % 23) - 11.0f);
    ops::quantize(x, f, ops::BlockAxis::Rows, xq);
    for (int64_t n = 0; n < N;
         ++n)  // token n of rank r goes to experts (n + r) % E, (n + r + 1) % E
      for (int64_t k = 0; k < K; ++k) idx.i32()[n * K + k] = int32_t((n + r + k) % E);
    d.dispatch(xq, idx);
    // every received row equals some sender's quantized row: check by recomputing the
    // senders' rows (all ranks use the same formula)
    Tensor xp = d.expert_rows(), off = d.expert_offsets();
    int64_t rows_to_others = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) rows_to_others += ((n + r + k) % E) / (E / P) != r;
    EXPECT_EQ(d.bytes_sent(), rows_to_others * ops::wire_row_bytes(D, f)) << ops::format_name(f);
    for (int64_t l = 0; l < d.num_local_experts(); ++l)
      for (int64_t p = 0; p < P; ++p) {
        int64_t m = off.i32()[l * P + p];
        const int64_t e = d.first_local_expert() + l;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < K; ++k) {
            if ((n + p + k) % E != e) continue;
            std::vector<float> src(D), srcq(D);
            for (int64_t j = 0; j < D; ++j)
              src[j] =
                  std::sin(float(n * D + j + 7 * p)) * std::exp2(float((n * D + j) % 23) - 11.0f);
            Tensor st(src.data(), DType::F32, {1, D}), sq(srcq.data(), DType::F32, {1, D});
            ops::quantize(st, f, ops::BlockAxis::Rows, sq);
            ASSERT_EQ(std::memcmp(xp.f32() + m * D, srcq.data(), D * sizeof(float)), 0)
                << ops::format_name(f) << " expert " << e << " source " << p << " token " << n;
            ++m;
          }
      }
  }
}

// The FP4 recipes' tokens: each (expert, source) segment quantized on its own — NVFP4 under the
// segment's amax — by the source and sent as E2M1 codes with their scales (all-to-all), or
// quantized on arrival (all-gather): either way the expert rows and amaxes are those of the
// segment quantized alone, and the all-to-all sends D/2 + D/b bytes a row.
TEST(ExpertParallel, Fp4SegmentsTravelAsCodesQuantizedAlone) {
  Communicator& world = test::world();
  const int64_t P = world.size(), N = 12, K = 2, D = 96, E = 2 * P, r = world.rank();
  auto token = [&](int64_t p, int64_t n, float* row) {  // rank p's token n, bf16 values
    for (int64_t j = 0; j < D; ++j)
      row[j] = round_bf16(std::sin(float(n * D + j + 7 * p)) *
                          std::exp2(float((n * D + j) % 29) - 14.0f + float(p)));
  };
  for (ops::Format f : {ops::Format::NVFP4, ops::Format::MXFP4}) {
    for (bool gather : {false, true}) {
      Arena act(8 << 20), scratch(8 << 20);
      Workspace ws{act, scratch, 1, N};
      std::unique_ptr<ExpertExchangeDispatcher> d;
      if (gather)
        d = std::make_unique<AllGatherDispatcher>(world, E);
      else
        d = std::make_unique<AllToAllDispatcher>(world, E);
      d->set_payload_formats(f, ops::Format::BF16);
      d->plan(ws, D, K);
      Tensor x = act.alloc_f32({N, D}), idx = act.alloc_i32({N, K});
      for (int64_t n = 0; n < N; ++n) {
        token(r, n, x.f32() + n * D);
        for (int64_t k = 0; k < K; ++k) idx.i32()[n * K + k] = int32_t((n * n + r + 3 * k) % E);
      }
      d->dispatch(x, idx);
      const std::string what = std::string(ops::format_name(f)) + (gather ? " all-gather" : "");
      if (!gather) {
        int64_t rows_to_others = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < K; ++k)
            rows_to_others += ((n * n + r + 3 * k) % E) / (E / P) != r;
        EXPECT_EQ(d->bytes_sent(), rows_to_others * ops::wire_row_bytes(D, f)) << what;
      }
      const Tensor xp = d->expert_rows(), off = d->expert_offsets();
      ASSERT_NE(d->segment_amax(), nullptr) << what;
      for (int64_t l = 0; l < d->num_local_experts(); ++l)
        for (int64_t p = 0; p < P; ++p) {
          const int64_t g = l * P + p, e = d->first_local_expert() + l;
          std::vector<float> seg;  // source p's rows to expert e, in token order
          for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k)
              if ((n * n + p + 3 * k) % E == e) {
                seg.resize(seg.size() + size_t(D));
                token(p, n, seg.data() + seg.size() - size_t(D));
              }
          const int64_t rows = int64_t(seg.size()) / D;
          ASSERT_EQ(off.i32()[g + 1] - off.i32()[g], rows) << what;
          if (rows == 0) continue;
          std::vector<float> want(seg.size());
          const ops::Fp4Result res = ops::quantize_fp4(
              Tensor(seg.data(), DType::F32, {rows, D}), f, ops::BlockAxis::Rows,
              {.values = Tensor(want.data(), DType::F32, {rows, D}), .codes = {}, .scales = {}});
          EXPECT_EQ(d->segment_amax()[g], f == ops::Format::NVFP4 ? res.amax : 0.0f) << what;
          ASSERT_EQ(std::memcmp(xp.f32() + off.i32()[g] * D, want.data(), want.size() * 4), 0)
              << what << " expert " << e << " source " << p;
        }
    }
  }
}

TEST(ExpertParallel, OverlapOnAndOffGiveBitwiseIdenticalTraining) {
  const int P = test::world().size();
  TrainRun off = train(P, 2, 2, 8, false), on = train(P, 2, 2, 8, true);
  for (size_t s = 0; s < off.losses.size(); ++s) {
    EXPECT_EQ(on.losses[s], off.losses[s]) << "step " << s;
    EXPECT_EQ(on.norms[s], off.norms[s]) << "step " << s;
  }
}

// With n_group = the number of nodes, group-limited routing is node-limited routing: a token's
// experts sit on at most topk_group nodes; bytes that leave the node are counted apart.
TEST(ExpertParallel, GroupLimitedRoutingLimitsTheNodesATokenReaches) {
  Communicator& world = test::world();
  const int P = world.size();
  ParallelLayout layout = make_parallel_layout(world, P);
  for (int64_t topk_group : {1, 2}) {
    ModelConfig cfg = load_model_config(kRoot + "/configs/tiny.json");
    cfg.n_group = 2;  // two "nodes" of P/2 ranks each hold one group of experts
    cfg.topk_group = topk_group;
    std::vector<AllToAllDispatcher*> ds;
    DispatcherFactory factory = [&](int64_t E) -> std::unique_ptr<TokenDispatcher> {
      auto d = std::make_unique<AllToAllDispatcher>(*layout.ep_group, E);
      d->set_ranks_per_node(P / 2);
      ds.push_back(d.get());
      return d;
    };
    const int64_t B = 2;
    Model m(cfg, {.micro_batch = B, .seq_len = kT, .dispatchers = factory});
    m.init_parameters(5);
    MockDataset data(cfg.vocab_size, 9);
    std::vector<int32_t> tok(B * (kT + 1));
    data.fill_sequences(0, 0, world.rank() * B, B, kT, tok.data());
    m.forward(tok.data());
    m.backward(1.0);
    for (AllToAllDispatcher* d : ds) {
      EXPECT_LE(d->max_nodes_per_token(), topk_group);
      EXPECT_LE(d->bytes_sent_other_nodes(), d->bytes_sent());
      if (P > 2) {
        EXPECT_LT(d->bytes_sent_other_nodes(), d->bytes_sent()) << "some stay on the node";
      }
    }
    if (topk_group == 2) {
      int64_t most = 0;
      for (AllToAllDispatcher* d : ds) most = std::max(most, d->max_nodes_per_token());
      EXPECT_EQ(most, 2) << "with two groups kept, some token reaches both nodes";
    }
  }
}

// --a2a-overlap: the interleaved lanes compute exactly what lane-by-lane does, and what one
// unsplit micro-batch does up to the order in which the two halves add into the gradients.
TEST(ExpertParallel, SplitMicroBatchOverlapIsExact) {
  const int P = test::world().size();
  TrainRun inter = train(P, 4, 2, 6, true, Split::kInterleaved);
  TrainRun lanes = train(P, 4, 2, 6, true, Split::kLaneByLane);
  TrainRun whole = train(P, 4, 2, 6, true, Split::kNone);
  for (size_t s = 0; s < inter.losses.size(); ++s) {
    EXPECT_EQ(inter.losses[s], lanes.losses[s]) << "step " << s;
    EXPECT_EQ(inter.norms[s], lanes.norms[s]) << "step " << s;
    EXPECT_NEAR(inter.losses[s], whole.losses[s], 1e-6 * std::abs(whole.losses[s])) << s;
  }
}

TEST(DataParallel, EqualsOneProcess) {
  const int P = test::world().size();
  TrainRun dp = train(1, 2, 1, 10);
  TrainRun big = train_single(2, P, false, 10);  // one micro-batch of P × 2 sequences
  for (size_t s = 0; s < dp.losses.size(); ++s)
    EXPECT_NEAR(dp.losses[s], big.losses[s], 1e-6 * std::abs(big.losses[s])) << "step " << s;
  // and one process accumulating P micro-batches (GEMMs accumulate into the gradient with
  // beta = 1, so this is close, not bitwise)
  TrainRun accum = train_single(2, P, true, 10);
  for (size_t s = 0; s < dp.losses.size(); ++s)
    EXPECT_NEAR(dp.losses[s], accum.losses[s], 1e-6 * std::abs(accum.losses[s])) << "step " << s;
}

// --deterministic: P ranks of B sequences = one process of P × B sequences, bit for bit (losses,
// gradient norms, every parameter), with and without gradient accumulation and ZeRO-1, for
// every expert-parallel size. (Without --deterministic the same comparison differs in the last
// bits: DataParallel.EqualsOneProcess.)
TEST(DataParallel, DeterministicEqualsOneProcessBitwise) {
  const int P = test::world().size();
  for (int64_t accum : {1, 2}) {
    TrainRun one = train_single(2, P, false, 6, true, accum);
    for (int ep = 1; ep <= P; ep *= 2) {
      test::TrainSetup o;
      o.ep = ep;
      o.B = 2;
      o.grad_accum = accum;
      o.steps = 6;
      o.deterministic = true;
      const std::string what = "ep " + std::to_string(ep) + " accum " + std::to_string(accum);
      test::expect_same_training(test::train_tiny(o), one, what, true);
      o.zero1 = true;
      o.overlap = true;
      test::expect_same_training(test::train_tiny(o), one, "zero1 " + what, true);
    }
  }
}

// What makes that hold under expert parallelism: the experts' weight gradients of each source
// rank kept apart (MoeLayer::set_expert_grad_parts, as ExpertSourceTrees does) are, with one
// sequence per rank, bit for bit the gradients one process computes for each rank's sequence
// alone — the expert's rows of that sequence, in the same order, in the same GEMM.
TEST(ExpertParallel, SourcePartsOfExpertGradientsAreOneProcessPerSequence) {
  Communicator& world = test::world();
  const int P = world.size(), rank = world.rank();
  ParallelLayout layout = make_parallel_layout(world, P);
  ModelConfig cfg = load_model_config(kRoot + "/configs/tiny.json");
  const LossWeights lw{0.3, 1e-2, 1e-3};
  DispatcherFactory factory = [&](int64_t E) -> std::unique_ptr<TokenDispatcher> {
    return std::make_unique<AllToAllDispatcher>(*layout.ep_group, E);
  };
  Model ep(cfg, {.micro_batch = 1, .seq_len = kT, .loss_weights = lw, .dispatchers = factory});
  ep.init_parameters(7);
  std::vector<std::vector<float>> parts;  // per MoE layer: gate/up, down; [P, El, O, D] each
  for (MoeLayer* layer : ep.moe_layers()) {
    Tensor views[2];
    for (int i = 0; i < 2; ++i) {
      const Tensor& w = (i == 0 ? layer->experts_gate_up() : layer->experts_down())->value;
      std::vector<float>& buf = parts.emplace_back(size_t(P * w.numel()), 0.0f);
      views[i] = Tensor(buf.data(), DType::F32, {P, w.size(0), w.size(1), w.size(2)});
    }
    layer->set_expert_grad_parts(views[0], views[1]);
  }
  MockDataset data(cfg.vocab_size, 3);
  std::vector<int32_t> tok(kT + 1);
  data.fill_sequences(0, 0, rank, 1, kT, tok.data());  // rank p runs sequence p
  ep.params().zero_grads();
  ep.forward(tok.data(), 1.0);
  ep.backward(1.0);
  for (MoeLayer* layer : ep.moe_layers()) {
    for (const Weight* w : {layer->experts_gate_up(), layer->experts_down()})
      for (int64_t i = 0; i < w->grad.numel(); ++i)
        ASSERT_EQ(w->grad.f32()[i], 0.0f) << w->name << ": the parts took the gradient";
    layer->set_expert_grad_parts({}, {});
  }

  Model one(cfg, {.micro_batch = 1, .seq_len = kT, .loss_weights = lw});
  one.init_parameters(7);
  int64_t nonzero = 0;
  for (int p = 0; p < P; ++p) {
    data.fill_sequences(0, 0, p, 1, kT, tok.data());
    one.params().zero_grads();
    one.forward(tok.data(), 1.0);
    one.backward(1.0);
    size_t k = 0;
    for (MoeLayer* layer : one.moe_layers())
      for (const Weight* w : {layer->experts_gate_up(), layer->experts_down()}) {
        const std::vector<float>& part = parts[k++];
        const int64_t n = int64_t(part.size()) / P;  // this rank's experts: [rank·n, rank·n + n)
        const float* want = w->grad.f32() + rank * n;
        EXPECT_EQ(std::memcmp(part.data() + p * n, want, size_t(n) * sizeof(float)), 0)
            << w->name << " source " << p;
        for (int64_t i = 0; i < n; ++i) nonzero += want[i] != 0.0f;
      }
  }
  EXPECT_GT(nonzero, 0) << "some sequence reaches this rank's experts";
}

}  // namespace
}  // namespace moet
