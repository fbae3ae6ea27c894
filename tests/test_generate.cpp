// Generation (docs/generate.md): decoding over the KV cache of MLA latents gives the logits of a
// full forward over the whole sequence, for several model shapes and prefill splits; the sampler
// (greedy, top-k, top-p, temperature, seeds); generate()'s stop token; the streamed text; and
// `moet eval`'s bits per byte against a hand computation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/byte_tokenizer.h"
#include "data/dataset.h"
#include "data/text_stream.h"
#include "kernels/ops.h"
#include "model/inference.h"
#include "model/model.h"
#include "model/sampling.h"
#include "train/evaluation.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

ModelConfig tiny() {
  ModelConfig c = load_model_config(kRoot + "/configs/tiny.json");
  c.initializer_range = 0.1;  // logits far from uniform, router scores far from ties
  return c;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint64_t seed) {
  CounterRng rng(seed, 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = int32_t(rng.below(uint64_t(i), uint64_t(V)));
  return t;
}

// Max |logit difference| / max |logit| between decoding `total` tokens over the cache — a
// prefill of the chunks' sizes in turn, then one token at a time — and one full forward.
double decode_vs_full(const ModelConfig& cfg, const std::vector<int64_t>& chunks, int64_t total) {
  const int64_t V = cfg.vocab_size;
  Model base(cfg, {.micro_batch = 1, .seq_len = 1});
  base.init_parameters(7);
  const std::vector<int32_t> tok = random_tokens(total + 1, V, 3);
  std::vector<float> inc(size_t(total * V)), full(size_t(total * V));
  Decoder dec(base, total);
  int64_t pos = 0;
  for (size_t i = 0; pos < total; ++i) {
    const int64_t n = i < chunks.size() ? chunks[i] : 1;
    Tensor out(inc.data() + pos * V, DType::F32, {n, V});
    dec.forward(tok.data() + pos, n, out);
    pos += n;
  }
  EXPECT_EQ(dec.cache().length(), total);
  Model whole(cfg, {.micro_batch = 1, .seq_len = total, .shared = &base});
  whole.forward(tok.data());
  Tensor full_NV(full.data(), DType::F32, {total, V});
  whole.logits(full_NV);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    diff = std::max(diff, double(std::abs(inc[i] - full[i])));
    scale = std::max(scale, double(std::abs(full[i])));
  }
  EXPECT_GT(scale, 0.1);
  std::printf("  %lld tokens: max |decode - full| / max |logit| = %.2e\n", (long long)total,
              diff / scale);
  return diff / scale;
}

constexpr double kTol = 1e-5;

TEST(KvCacheDecode, TinyYarnMoeEqualsFullForward) {
  ModelConfig c = tiny();
  ASSERT_TRUE(c.rope_scaling.yarn);
  EXPECT_LT(decode_vs_full(c, {5}, 24), kTol);        // prefill 5, then 19 single tokens
  EXPECT_LT(decode_vs_full(c, {1}, 12), kTol);        // one token at a time from the start
  EXPECT_LT(decode_vs_full(c, {3, 4, 2}, 16), kTol);  // prefill in pieces
  EXPECT_LT(decode_vs_full(c, {64}, 64), kTol);       // max_position_embeddings in one prefill
}

TEST(KvCacheDecode, VariantsEqualFullForward) {
  ModelConfig plain = tiny();
  plain.rope_scaling = RopeScaling{};
  EXPECT_LT(decode_vs_full(plain, {6}, 20), kTol);
  ModelConfig all_moe = tiny();
  all_moe.first_k_dense_replace = 0;
  all_moe.n_shared_experts = 0;
  all_moe.n_group = 1;
  all_moe.topk_group = 1;
  EXPECT_LT(decode_vs_full(all_moe, {4}, 20), kTol);
  ModelConfig dense = tiny();
  dense.first_k_dense_replace = dense.num_hidden_layers;
  dense.tie_word_embeddings = true;
  dense.num_nextn_predict_layers = 0;
  EXPECT_LT(decode_vs_full(dense, {7}, 20), kTol);
}

TEST(KvCacheDecode, CausalSoftmaxRows) {
  // 2 heads x 3 queries at positions 4, 5, 6 over 8 cached positions
  const int64_t n = 3, R = 2 * n, S = 8, first = 4;
  std::vector<float> s(size_t(R * S));
  for (size_t i = 0; i < s.size(); ++i) s[i] = float(std::sin(0.7 * double(i)) * 3.0);
  const std::vector<float> x = s;
  Tensor t(s.data(), DType::F32, {R, S});
  ops::causal_softmax_rows(t, n, first, 0.5);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t last = first + r % n;
    double z = 0;
    for (int64_t c = 0; c <= last; ++c) z += std::exp(0.5 * x[r * S + c]);
    for (int64_t c = 0; c < S; ++c)
      EXPECT_NEAR(s[r * S + c], c <= last ? std::exp(0.5 * x[r * S + c]) / z : 0.0, 1e-6)
          << "row " << r << " col " << c;
  }
}

TEST(KvCacheDecode, SizesAndLimits) {
  const ModelConfig c = tiny();
  // per position: 3 layers x (24 latent + 8 rope) floats vs 3 x 4 heads x (24 key + 16 value)
  EXPECT_EQ(KvCache::bytes_per_token(c), 3 * 32 * 4);
  EXPECT_EQ(KvCache::expanded_bytes_per_token(c), 3 * 4 * 40 * 4);
  EXPECT_THROW(KvCache(c, c.max_position_embeddings + 1), Error);
  Model m(c, {.micro_batch = 1, .seq_len = 1});
  m.init_parameters(1);
  Decoder dec(m, 4);
  std::vector<float> lg(size_t(c.vocab_size));
  Tensor out(lg.data(), DType::F32, {1, c.vocab_size});
  const std::vector<int32_t> t = {1, 2, 3, 4, 5};
  dec.forward(t.data(), 4, out);
  EXPECT_THROW(dec.forward(t.data() + 4, 1, out), Error);  // the cache is full
}

std::vector<float> some_logits(int64_t V, uint64_t seed) {
  CounterRng rng(seed, 2);
  std::vector<float> l(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) l[v] = float(2.0 * rng.normal(uint64_t(v)));
  return l;
}

TEST(Sampling, GreedyTopK1AndTinyTopPAreArgmax) {
  for (uint64_t s = 0; s < 20; ++s) {
    const std::vector<float> l = some_logits(300, s);
    const int32_t best = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_EQ(argmax(l.data(), 300), best);
    EXPECT_EQ(Sampler({0.0, 0, 1.0, s}).sample(l.data(), 300, s), best);
    EXPECT_EQ(Sampler({1.0, 1, 1.0, s}).sample(l.data(), 300, s), best);
    EXPECT_EQ(Sampler({1.5, 0, 1e-9, s}).sample(l.data(), 300, s), best);
  }
  const std::vector<float> tie = {1, 3, 3, 2};
  EXPECT_EQ(argmax(tie.data(), 4), 1);  // ties: the lower index
  EXPECT_EQ(Sampler({1.0, 1, 1.0, 0}).sample(tie.data(), 4, 0), 1);
}

std::vector<int32_t> draws(const SamplingOptions& o, const std::vector<float>& l, int n) {
  Sampler s(o);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(l.data(), int64_t(l.size()), uint64_t(i)));
  return out;
}

TEST(Sampling, SeedsReproduceAndDiffer) {
  const std::vector<float> l = some_logits(50, 1);
  EXPECT_EQ(draws({1.0, 0, 1.0, 5}, l, 200), draws({1.0, 0, 1.0, 5}, l, 200));
  EXPECT_NE(draws({1.0, 0, 1.0, 5}, l, 200), draws({1.0, 0, 1.0, 6}, l, 200));
}

TEST(Sampling, TemperatureTopKTopP) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 1.0f, 0.0f};
  for (double temp : {0.5, 1.0, 2.0}) {  // the distribution is softmax(l / T)
    Sampler s({temp, 0, 1.0, 0});
    s.sample(l.data(), 5, 0);
    double z = 0;
    for (float x : l) z += std::exp(x / temp);
    for (const auto& [id, p] : s.last_distribution())
      EXPECT_NEAR(p, std::exp(l[id] / temp) / z, 1e-12) << "T " << temp << " id " << id;
    EXPECT_EQ(s.last_distribution().size(), 5u);
    EXPECT_EQ(s.last_distribution()[0].first, 1);
  }
  // top-k: only the k largest are ever drawn, renormalised
  std::set<int32_t> seen;
  for (int32_t t : draws({5.0, 2, 1.0, 3}, l, 300)) seen.insert(t);
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
  // top-p: probabilities 0.5, 0.3, 0.15, 0.05; p = 0.7 keeps the first two (0.8 >= 0.7)
  const std::vector<float> q = {float(std::log(0.15)), float(std::log(0.5)), float(std::log(0.05)),
                                float(std::log(0.3))};
  Sampler s({1.0, 0, 0.7, 0});
  s.sample(q.data(), 4, 0);
  ASSERT_EQ(s.last_distribution().size(), 2u);
  EXPECT_EQ(s.last_distribution()[0].first, 1);
  EXPECT_NEAR(s.last_distribution()[0].second, 0.625, 1e-6);
  EXPECT_EQ(s.last_distribution()[1].first, 3);
  EXPECT_NEAR(s.last_distribution()[1].second, 0.375, 1e-6);
  // bad options
  EXPECT_THROW(Sampler({-0.1, 0, 1.0, 0}), Error);
  EXPECT_THROW(Sampler({1.0, 0, 0.0, 0}), Error);
  EXPECT_THROW(Sampler({1.0, 0, 1.01, 0}), Error);
  EXPECT_THROW(Sampler({1.0, -1, 1.0, 0}), Error);
}

TEST(Generate, GreedyFollowsFullForwardAndStops) {
  const ModelConfig c = tiny();
  Model m(c, {.micro_batch = 1, .seq_len = 1});
  m.init_parameters(9);
  const std::vector<int32_t> prompt = {72, 101, 108, 108, 111};
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.sampling.temperature = 0;
  const GenerateResult r = generate(m, prompt, o);
  ASSERT_EQ(r.tokens.size(), 10u);
  // each greedy token is the argmax of a full forward over everything before it
  std::vector<int32_t> seq = prompt;
  for (int32_t t : r.tokens) {
    const int64_t T = int64_t(seq.size());
    Model whole(c, {.micro_batch = 1, .seq_len = T, .shared = &m});
    std::vector<int32_t> in = seq;
    in.push_back(0);
    whole.forward(in.data());
    std::vector<float> lg(size_t(T * c.vocab_size));
    Tensor lg_NV(lg.data(), DType::F32, {T, c.vocab_size});
    whole.logits(lg_NV);
    EXPECT_EQ(t, argmax(lg.data() + (T - 1) * c.vocab_size, c.vocab_size));
    seq.push_back(t);
  }
  // the stop token ends it, and is returned
  o.stop_id = r.tokens[2];
  const GenerateResult stopped = generate(m, prompt, o);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + 3));
  // sampling: one seed, one continuation
  o.stop_id = -1;
  o.sampling = {1.0, 0, 0.9, 42};
  EXPECT_EQ(generate(m, prompt, o).tokens, generate(m, prompt, o).tokens);
  o.max_new_tokens = c.max_position_embeddings;  // no room left after the prompt
  EXPECT_THROW(generate(m, prompt, o), Error);
}

TEST(TextStream, HoldsBackIncompleteUtf8) {
  EXPECT_EQ(complete_utf8_prefix(""), 0u);
  EXPECT_EQ(complete_utf8_prefix("a\xC3"), 1u);
  EXPECT_EQ(complete_utf8_prefix("\xE6\x97"), 0u);
  EXPECT_EQ(complete_utf8_prefix("\xE6\x97\xA5"), 3u);
  EXPECT_EQ(complete_utf8_prefix("ab\xF0\x9F\x98"), 2u);
  const ByteTokenizer tok;
  std::vector<std::string> pieces;
  TextStream stream(tok, [&](std::string_view p) { pieces.emplace_back(p); });
  for (unsigned char c : std::string("caf\xC3\xA9 \xE6\x97\xA5!")) stream.push(c);
  stream.push(ByteTokenizer::kEod);  // no text
  stream.push(0xF0);                 // an emoji's first two bytes, never completed
  stream.push(0x9F);
  const std::vector<std::string> held = pieces;
  stream.finish();
  EXPECT_EQ(held, (std::vector<std::string>{"c", "a", "f", "\xC3\xA9", " ", "\xE6\x97\xA5", "!"}));
  ASSERT_EQ(pieces.size(), held.size() + 1);
  EXPECT_EQ(pieces.back(), "\xF0\x9F");  // the end writes what was held back
}

TEST(BitsPerByte, ByteTokenizerLengths) {
  const std::vector<int64_t> b = token_byte_lengths(ByteTokenizer(), 260);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(b[i], 1);
  EXPECT_EQ(b[256], 0);                    // end of document: no text
  EXPECT_EQ(b[257] + b[258] + b[259], 0);  // ids past the tokenizer's vocabulary
}

TEST(BitsPerByte, EqualsLossOverLn2WithoutEod) {
  const ModelConfig c = tiny();
  Model m(c, {.micro_batch = 2, .seq_len = 16});
  m.init_parameters(4);
  MockDataset ds(256, 1);  // byte ids only: every target is one byte
  const ByteTokenizer tok;
  const EvalResult r = evaluate_held_out(m, ds, 1, nullptr, &tok);
  EXPECT_EQ(r.bytes, 2 * 16);
  EXPECT_NEAR(r.bits_per_byte, r.loss / std::log(2.0), 1e-12 * r.loss);
}

TEST(BitsPerByte, HandComputationWithEod) {
  const std::string path = ::testing::TempDir() + "/bpb_docs.txt";
  {
    std::ofstream f(path);
    for (int d = 0; d < 40; ++d) {
      f << "document " << d << ": the quick brown fox jumps over the lazy dog, caf\xC3\xA9.\n";
      f << "%\n";
    }
  }
  const ModelConfig c = tiny();
  const int64_t B = 2, T = 16;
  Model m(c, {.micro_batch = B, .seq_len = T});
  m.init_parameters(4);
  TextDataset ds({path}, 1, 0.2);
  const ByteTokenizer tok;
  const EvalResult r = evaluate_held_out(m, ds, 100, nullptr, &tok);
  // by hand: Σ NLL = mean loss × targets per batch; bytes = targets that are not the EOD
  double nll = 0;
  int64_t bytes = 0, eods = 0;
  std::vector<int32_t> t(size_t(B * (T + 1)));
  for (int64_t i = 0; i < r.batches; ++i) {
    ds.eval_batch(i, B, T, t.data());
    nll += m.forward(t.data()).lm_loss * double(B * T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 1; k <= T; ++k) {
        const int32_t id = t[b * (T + 1) + k];
        (id == ByteTokenizer::kEod ? eods : bytes) += 1;
      }
  }
  ASSERT_GT(eods, 0);
  EXPECT_EQ(r.bytes, bytes);
  const double want = nll / std::log(2.0) / double(bytes);
  EXPECT_NEAR(r.bits_per_byte, want, 1e-12 * want);
  EXPECT_GT(r.bits_per_byte, r.loss / std::log(2.0));  // EODs cost loss but add no bytes
  std::remove(path.c_str());
}

}  // namespace
}  // namespace moet
