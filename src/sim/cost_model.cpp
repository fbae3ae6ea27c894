#include "sim/cost_model.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "model/recipe.h"
#include "sim/routing_fanout.h"

namespace moet::sim {

double activation_bytes(Recipe r) { return r == Recipe::FP32 ? 4 : 2; }

// Bytes per element of a quantized GEMM operand in format f, with its block scales: FP8 one
// (its scales, one per 32 or 128, left out as before), NVFP4 half a byte and an E4M3 scale per
// 16, MXFP4 half a byte and an E8M0 scale per 32.
double operand_bytes(ops::Format f) {
  if (f == ops::Format::NVFP4) return 0.5 + 1.0 / 16;
  if (f == ops::Format::MXFP4) return 0.5 + 1.0 / 32;
  return 1;
}

double gemm_efficiency(const SystemSpec& s, ops::Format f, double m, double n, double k,
                       int ranks) {
  const double d = s.gemm_half_dim(f, ranks);
  auto falloff = [d](double x) { return x / (x + d); };
  return s.gemm_max(f) * falloff(m) * falloff(n) * falloff(k);
}

namespace {

// Recompute groups of `--recompute selective` are moet train's modules (model/recompute.h,
// Megatron-Core's recompute_modules names): each module's work is redone in backward and what
// it keeps is not saved. `full` redoes the whole slot and saves only its input.

// Builds the cost of one slot op by op.
class SlotBuilder {
 public:
  // `peers`: the EP group's ranks in one NVLink domain
  SlotBuilder(const ModelConfig& c, const SimLayout& l, const SystemSpec& s, const Fanout& fan,
              int64_t peers)
      : c_(c), l_(l), s_(s), fan_(fan), a2a_eff_(s.a2a_nvlink_at(static_cast<double>(peers))) {
    a_ = activation_bytes(l.precision);
    low_ = gemm_format(l.precision);
    high_ = recipe_traits(l.precision).head;
    quantized_ = is_fp8_recipe(l.precision) || is_fp4_recipe(l.precision);
    qb_ = operand_bytes(low_);
    // the tokens to the experts: FP8 rows under FP8 recipes, E2M1 codes (half a byte) under the
    // FP4 recipes (moet's dispatch sends them so), the activations' bf16 under the others
    db_ = is_fp8_recipe(l.precision) ? 1 : is_fp4_recipe(l.precision) ? 0.5 : a_;
    // The ranks may share one machine's compute and memory (the `local` CPU system, and the
    // emulated cluster, whose nodes are namespaces of that one machine).
    share_ = s.compute_shared ? static_cast<int>(l.gpus) : 1;
    hbm_ = s.hbm_tbps * 1e12 * s.eff.hbm / share_;
    // this rank's tokens: under context parallelism 2 of the sequence's 2·CP chunks
    tokens_ = static_cast<double>(l.mbs * l.seq) / double(l.cp);
  }

  SlotCost embedding() {
    SlotCost w = start("embedding");
    mem(w, 2 * h() * tl(), 3 * h() * tl(), 1, 1);
    w.dense_params = double(c_.vocab_size) * h() / l_.tp;
    return w;
  }

  SlotCost decoder_layer(bool moe, const std::string& name) {
    SlotCost w = start(name);
    w.act_bytes += h() * tl() * a_;  // the layer input (the residual stream)
    if (l_.recompute == "full") {
      SlotCost inner = start(name);
      attention(inner);
      moe ? moe_block(inner) : dense_mlp(inner);
      merge_recomputed(w, inner, /*drop_saved=*/true, /*with_a2a=*/true);
      return w;
    }
    attention(w);
    moe ? moe_block(w) : dense_mlp(w);
    return w;
  }

  SlotCost mtp_layer(int64_t depth) {
    SlotCost w = decoder_layer(c_.mtp_is_moe(), "mtp " + std::to_string(depth));
    // Embedding of the shifted tokens, two norms, concatenation and the eh projection.
    mem(w, 6 * h() * tl(), 9 * h() * tl(), 4, 4);
    // saved: the embedding, both norms' outputs and their concatenation (eh_proj's input)
    w.act_bytes += 5 * h() * tl() * a_;
    tp_collective(w, 1);
    gemm(w, tokens_, h() / l_.tp, 2 * h(), 1, true);
    w.dense_params += 2 * h() * h() / l_.tp + 2 * h();
    loss(w);
    return w;
  }

  SlotCost loss_slot() {
    SlotCost w = start("loss");
    loss(w);
    w.dense_params += double(c_.vocab_size) * h() / l_.tp + h();
    return w;
  }

 private:
  double h() const { return double(c_.hidden_size); }
  double tl() const { return tokens_ / l_.tp; }  // sequence-parallel tokens of this rank

  SlotCost start(const std::string& name) const {
    SlotCost w;
    w.name = name;
    return w;
  }

  double peak(ops::Format f) const { return s_.peak(f) * 1e12 / share_; }

  // Memory-bound kernels moving `ef`/`eb` elements forward/backward.
  void mem(SlotCost& w, double ef, double eb, int kernels_f, int kernels_b,
           double bytes_per_element = 0) {
    const double b = bytes_per_element > 0 ? bytes_per_element : a_;
    w.mem_f += ef * b / hbm_;
    w.mem_b += eb * b / hbm_;
    if (between_exchanges_) w.experts_f += ef * b / hbm_, w.experts_b += eb * b / hbm_;
    launch(w, kernels_f, kernels_b);
  }

  void launch(SlotCost& w, int kf, int kb) const {
    w.launch_f += kf * s_.eff.op_overhead_us * 1e-6;
    w.launch_b += kb * s_.eff.op_overhead_us * 1e-6;
    w.kernels_f += kf, w.kernels_b += kb;
    if (in_experts_) w.expert_kernels_f += kf, w.expert_kernels_b += kb;
    if (between_exchanges_)
      w.experts_f += kf * s_.eff.op_overhead_us * 1e-6,
          w.experts_b += kb * s_.eff.op_overhead_us * 1e-6;
  }
  bool in_experts_ = false;  // counting the MoE dispatch, experts and combine
  // building what runs between the dispatch and the combine (the experts, routed and shared)
  bool between_exchanges_ = false;

  // [m,k]·[k,n] with `count` copies (grouped GEMM of the local experts); backward is the data
  // gradient [m,n]·[n,k] and the weight gradient [k,m]·[m,n].
  void gemm(SlotCost& w, double m, double n, double k, double count, bool low_precision,
            bool save_input = true) {
    const ops::Format p = low_precision ? low_ : high_;
    const double pk = peak(p), flops = 2 * m * n * k * count, mr = m;
    auto t = [&](double x, double y, double z) {
      const double compute = flops / (pk * gemm_efficiency(s_, p, x, y, z, share_));
      const double eb = (low_precision && quantized_) ? qb_ : a_;
      const double bytes = count * (x * z + z * y) * eb + count * x * y * a_;
      return std::max(compute, bytes / hbm_);
    };
    const double tf = t(mr, n, k), tb = t(mr, k, n) + t(k, n, mr);
    w.gemm_f += tf;
    w.gemm_b += tb;
    const double kept = a_ + (low_precision && quantized_ ? qb_ : 0);  // bytes per element
    w.wgrad_copy += 2 * count * (m * k + m * n) * kept / hbm_;
    if (between_exchanges_) w.experts_f += tf, w.experts_b += tb;
    launch(w, 1, 2);
    if (low_precision && quantized_) {
      // Casts: the input row- and column-wise (for wgrad) in forward, the output gradient
      // both ways in backward, counted as a read at activation precision and a write of one
      // operand per element (FP8: 3 bytes, as calibrated); the quantized inputs are what is
      // saved. (NVFP4's 16-point transform of the wgrad copies is 32 flops per element inside
      // the cast: memory-bound like it.)
      mem(w, count * m * k * (a_ + qb_), count * m * n * (a_ + qb_), 1, 1, 1);
      if (save_input) w.act_bytes += count * m * k * qb_;
    } else if (save_input) {
      w.act_bytes += count * m * k * a_;
    }
  }

  void attention_core(SlotCost& w, double heads) {
    const double dqk = double(c_.qk_head_dim()), dv = double(c_.v_head_dim);
    // under context parallelism the load-balanced chunks give each rank 1/CP of the pairs
    const double flops =
        double(l_.mbs) * double(l_.seq) * double(l_.seq) * heads * (dqk + dv) / double(l_.cp);
    SlotCost g = start("");
    g.attn_f += flops / (peak(high_) * s_.eff.attention_fwd);
    g.attn_b += 2.5 * flops / (peak(high_) * s_.eff.attention_bwd);  // S = QKᵀ recomputed
    launch(g, 1, 1);
    g.act_bytes += tokens_ * heads * 4;  // log-sum-exp
    merge_group(w, g, RecomputeModule::kCoreAttn);
  }

  void tp_collective(SlotCost& w, int pairs) const {
    if (l_.tp == 1) return;
    // All-gather before and reduce-scatter after a TP region, forward and backward.
    const double bytes = tokens_ * h() * a_ * double(l_.tp - 1) / double(l_.tp);
    const double t = bytes / (s_.nvlink_gbps * 1e9 * s_.eff.collective_nvlink);
    w.tp_f += 2 * pairs * t;
    w.tp_b += 2 * pairs * t;
  }

  // Context parallelism: MLA's compressed KV latent (c_kv and the shared rope key, kv_lora_rank
  // + rope dims per token, not the heads' keys and values) all-gathered over the CP ranks in
  // forward, its gradient reduce-scattered in backward; over NVLink while TP·CP ranks fit a
  // domain, else over the scale-out NICs.
  void cp_collective(SlotCost& w, double width) const {
    if (l_.cp == 1) return;
    const double bytes = double(l_.mbs * l_.seq) * width * a_ * double(l_.cp - 1) / double(l_.cp);
    const bool nvlink = l_.tp * l_.cp <= s_.ranks_per_domain(static_cast<int>(l_.gpus));
    const double bw = nvlink ? s_.nvlink_gbps * 1e9 * s_.eff.collective_nvlink
                             : s_.scaleout_gbps * 1e9 * s_.eff.collective_scaleout;
    w.cp_f += bytes / bw;
    w.cp_b += bytes / bw;
  }

  // in_layer: the input and post-attention norms (`layernorm`), not MLA's latent norms
  void norm(SlotCost& w, double width, double tokens, bool in_layer = true) {
    SlotCost g = start("");
    mem(g, 2 * width * tokens, 3 * width * tokens, 1, 1);
    g.act_bytes += width * tokens * a_;  // its output, the next GEMM's input
    if (in_layer)
      merge_group(w, g, RecomputeModule::kLayernorm);
    else
      add(w, g);
  }

  void attention(SlotCost& w) {
    const double n = double(c_.num_attention_heads) / l_.tp, dqk = double(c_.qk_head_dim());
    const double dn = double(c_.qk_nope_head_dim), dr = double(c_.qk_rope_head_dim);
    const double dv = double(c_.v_head_dim), rq = double(c_.q_lora_rank);
    const double rkv = double(c_.kv_lora_rank), t = tokens_;
    norm(w, h(), tl());
    tp_collective(w, 1);
    SlotCost up = start("");
    // the latents' norms belong to the up-projections (Megatron fuses them: TE's norm-linear)
    if (rq > 0) {
      gemm(w, t, rq, h(), 1, true);  // q_a (replicated over TP)
      norm(up, rq, t, false);
      gemm(up, t, n * dqk, rq, 1, true, false);
    } else {
      gemm(up, t, n * dqk, h(), 1, true, false);
    }
    gemm(w, t, rkv + dr, h(), 1, true);  // kv_a (replicated over TP)
    // context parallelism: every rank's latents gathered, the keys and values of the whole
    // sequence made from them here (tk rows; t without CP)
    cp_collective(w, rkv + dr);
    const double tk = t * double(l_.cp);
    norm(up, rkv, tk, false);
    gemm(up, tk, n * (dn + dv), rkv, 1, true, false);
    // RoPE and assembling per-head q, k (shared rope key broadcast) and contiguous v.
    const double qkv = t * n * dqk + tk * n * (dqk + dv);
    mem(up, 2 * qkv, 3 * qkv, 3, 3);
    up.act_bytes += qkv * a_;  // q, k, v for attention's backward
    merge_group(w, up, RecomputeModule::kMlaUpProj);
    attention_core(w, n);
    // o_proj: its input is the attention output, saved with core attention's
    SlotCost o = start("");
    gemm(o, t, h(), n * dv, 1, true);
    const double o_saved = o.act_bytes;
    o.act_bytes = 0;
    add(w, o);
    if (l_.selective_modules().has(RecomputeModule::kCoreAttn))
      w.redo_bytes += o_saved;
    else
      w.act_bytes += o_saved;
    mem(w, 3 * h() * tl(), 3 * h() * tl(), 1, 1);  // residual add
    // q_a and kv_a (and their norms) are replicated over TP; the rest is split (n is per rank).
    w.dense_params += (rq > 0 ? h() * rq + rq + rq * n * dqk : h() * n * dqk) + h() * (rkv + dr) +
                      rkv + rkv * n * (dn + dv) + n * dv * h() + h();
  }

  // routed: the experts' (`moe_act`); else a dense MLP's or the shared expert's (recomputed with
  // `mlp` or `shared_experts`, as a whole)
  void swiglu(SlotCost& w, double width, double rows_total, bool save_output, bool routed) {
    SlotCost g = start("");
    mem(g, 3 * width * rows_total, 5 * width * rows_total, 1, 1);
    if (save_output) g.act_bytes += width * rows_total * a_;
    if (routed)
      merge_group(w, g, RecomputeModule::kMoeAct);
    else
      add(w, g);
  }

  void dense_mlp(SlotCost& w) {
    const double f = double(c_.intermediate_size) / l_.tp, t = tokens_;
    norm(w, h(), tl());
    tp_collective(w, 1);
    SlotCost g = start("");
    gemm(g, t, 2 * f, h(), 1, true, false);
    g.act_bytes += t * 2 * f * a_;  // the gate/up output, for SwiGLU's backward
    swiglu(g, f, t, true, false);
    gemm(g, t, h(), f, 1, true, false);
    merge_group(w, g, RecomputeModule::kMlp);
    mem(w, 3 * h() * tl(), 3 * h() * tl(), 1, 1);
    w.dense_params += 3 * h() * f + h();
  }

  void moe_block(SlotCost& w) {
    const double E = double(c_.n_routed_experts), K = double(c_.num_experts_per_tok);
    const double ep = double(l_.ep), local = E / ep, fe = double(c_.moe_intermediate_size) / l_.etp;
    // Token-expert rows the busiest GPU computes (balanced: tokens × k).
    const double arrivals = tl() * K * l_.expert_imbalance;
    const double per_expert = arrivals / local;
    norm(w, h(), tl());
    // `moe`: all that follows (the exchanges too) redone in backward, nothing of it saved
    SlotCost body = start("");
    inside_moe_ = l_.selective_modules().has(RecomputeModule::kMoe);
    // Router: scores, sigmoid, group-limited top-k.
    gemm(body, tl(), E, h(), 1, false);
    mem(body, 4 * E * tl(), 4 * E * tl(), 3, 3, 4);
    // Shared expert, TP-split.
    between_exchanges_ = true;  // Megatron's combined 1F1B runs the shared expert there too
    if (c_.n_shared_experts > 0) {
      SlotCost sh = start("");
      const double fs = double(c_.shared_intermediate_size()) / l_.tp;
      tp_collective(sh, 1);
      gemm(sh, tokens_, 2 * fs, h(), 1, true, false);
      sh.act_bytes += tokens_ * 2 * fs * a_;
      swiglu(sh, fs, tokens_, true, false);
      gemm(sh, tokens_, h(), fs, 1, true, false);
      merge_group(body, sh, RecomputeModule::kSharedExperts);
      body.dense_params += 3 * h() * fs;
    }
    // Dispatch: pack per destination (FP8 cast first when quantized), unpack and permute into
    // expert-major order; combine: weight, pack, unpack and sum the k rows of each token.
    const double fanout = fan_.ranks_same_domain + fan_.ranks_other_domains;
    const double db = db_;
    in_experts_ = true;
    mem(body, (1 + fanout) * h() * tl() * db + 2 * arrivals * h() * db,
        (1 + fanout) * h() * tl() * a_ + 2 * arrivals * h() * a_, 2, 2, 1);
    gemm(body, per_expert, 2 * fe, h(), local, true);
    body.act_bytes += arrivals * 2 * fe * a_;
    swiglu(body, fe, arrivals, false, true);
    // fc2 and its input, from SwiGLU (`moe_act`). Megatron weights the activation by the probs
    // and keeps no expert output; moet weights at the combine and keeps the outputs for the
    // probs' gradient, so on its stack `moe_act` makes them again with fc2's forward.
    SlotCost act = start("");
    act.act_bytes += arrivals * fe * (quantized_ ? qb_ : a_);
    if (s_.compute_shared) {
      gemm(act, per_expert, h(), fe, local, true, false);
      act.act_bytes += arrivals * h() * a_;
    } else {
      gemm(body, per_expert, h(), fe, local, true, false);
    }
    merge_group(body, act, RecomputeModule::kMoeAct);
    mem(body, (2 * arrivals + (1 + fanout) * tl()) * h(),
        (4 * arrivals + (1 + fanout) * tl()) * h(), 2, 3);
    in_experts_ = false;
    between_exchanges_ = false;
    // the permuted rows are fc1's input, saved above; the routing of each row: prob and index
    body.act_bytes += arrivals * 8;
    a2a(body, db);
    body.dense_params += E * h() + h();
    body.expert_params += local * 3 * h() * fe;
    inside_moe_ = false;
    merge_group(w, body, RecomputeModule::kMoe);
    mem(w, 3 * h() * tl(), 3 * h() * tl(), 1, 1);  // residual add
  }

  // Expert dispatch (payload `db` bytes per element) and combine, forward and backward. Tokens
  // crossing domains go once per destination domain over the NIC, then NVLink (DeepEP and
  // HybridEP); within a domain once per destination rank. NVLink runs at the efficiency measured
  // for the EP size's ranks per domain, dispatch and combine apart (a2a_eff_).
  void a2a(SlotCost& w, double db) {
    if (l_.ep == 1) return;
    // the block scales: FP8 (fp32 per 128, as blockwise, the larger), FP4 (a byte per block of
    // 16 or 32) and a segment's amax (negligible)
    const double h_ = h();
    const double scale = is_fp4_recipe(l_.precision) ? h_ / double(ops::format_block(low_))
                         : db < a_                   ? h_ / 128 * 4
                                                     : 0;
    const double dispatch = h_ * db + scale + c_.num_experts_per_tok * 8.0;
    const double combine = h_ * a_;
    const double nvl_rows = tl() * (fan_.ranks_same_domain + fan_.ranks_other_domains);
    const double nic_rows = tl() * fan_.other_domains;
    const double nic_bw = s_.scaleout_gbps * 1e9 * s_.eff.a2a_scaleout;
    auto t = [&](double bytes_per_row, double nvl_eff) {
      const double nvl_bw = s_.nvlink_gbps * 1e9 * nvl_eff / share_;
      return std::max(nvl_rows * bytes_per_row / nvl_bw, nic_rows * bytes_per_row / nic_bw);
    };
    // (FP4 codes at the FP8 dispatch's efficiency: no FP4 dispatch is measured)
    const double send = db < 2 ? a2a_eff_.dispatch_fp8 : a2a_eff_.dispatch_bf16;
    const double lat = 2 * s_.eff.op_overhead_us * 1e-6;
    w.a2a_f += t(dispatch, send) + t(combine, a2a_eff_.combine) + lat;
    w.dispatch_f += t(dispatch, send) + lat / 2;
    // gradients travel at activation precision: the combine's as a dispatch, the dispatch's as a
    // combine
    w.a2a_b += t(combine, a2a_eff_.dispatch_bf16) + t(combine, a2a_eff_.combine) + lat;
    w.a2a_bytes_nvlink += nvl_rows * (dispatch + 3 * combine);
    w.a2a_bytes_scaleout += nic_rows * (dispatch + 3 * combine);
  }

  void loss(SlotCost& w) {
    const double V = double(c_.vocab_size) / l_.tp;
    norm(w, h(), tl());
    tp_collective(w, 1);
    gemm(w, tokens_, V, h(), 1, false);
    // Cross-entropy over fp32 logits: softmax, loss, gradient.
    mem(w, 2 * tokens_ * V, 3 * tokens_ * V, 2, 2, 4);
    // Megatron keeps the fp32 logits for the loss's backward; moet (the stack of the systems
    // whose ranks share one machine) makes them a chunk of rows at a time, in temporaries
    // (model/lm_head.h), and keeps the log-sum-exp
    w.act_bytes += s_.compute_shared ? tokens_ * 4 : tokens_ * V * 4;
  }

  static void add(SlotCost& w, const SlotCost& g) {
    w.gemm_f += g.gemm_f, w.gemm_b += g.gemm_b, w.attn_f += g.attn_f, w.attn_b += g.attn_b;
    w.mem_f += g.mem_f, w.mem_b += g.mem_b, w.tp_f += g.tp_f, w.tp_b += g.tp_b;
    w.launch_f += g.launch_f, w.launch_b += g.launch_b, w.recompute += g.recompute;
    w.kernels_f += g.kernels_f, w.kernels_b += g.kernels_b;
    w.expert_kernels_f += g.expert_kernels_f, w.expert_kernels_b += g.expert_kernels_b;
    w.a2a_f += g.a2a_f, w.a2a_b += g.a2a_b, w.dispatch_f += g.dispatch_f;
    w.experts_f += g.experts_f, w.experts_b += g.experts_b;
    w.a2a_bytes_nvlink += g.a2a_bytes_nvlink, w.a2a_bytes_scaleout += g.a2a_bytes_scaleout;
    w.act_bytes += g.act_bytes, w.redo_bytes += g.redo_bytes, w.dense_params += g.dense_params;
    w.expert_params += g.expert_params, w.wgrad_copy += g.wgrad_copy;
  }

  // Group `g` is recomputed: its forward runs again in backward and it saves nothing.
  static void merge_recomputed(SlotCost& w, SlotCost g, bool drop_saved, bool with_a2a) {
    const double redo = g.fwd() + (with_a2a ? g.a2a_f : 0);
    g.gemm_b += g.gemm_f, g.attn_b += g.attn_f, g.mem_b += g.mem_f, g.tp_b += g.tp_f;
    g.launch_b += g.launch_f, g.experts_b += g.experts_f;
    g.kernels_b += g.kernels_f, g.expert_kernels_b += g.expert_kernels_f;
    if (with_a2a) g.a2a_b += g.a2a_f;
    g.recompute += redo;
    if (drop_saved) g.redo_bytes += g.act_bytes, g.act_bytes = 0;
    add(w, g);
  }

  // Module m's costs into w: redone in backward and not saved when selective recompute names it
  // (inside a recomputed MoE layer, its parts are simply part of it).
  void merge_group(SlotCost& w, const SlotCost& g, RecomputeModule m) const {
    const bool whole = m == RecomputeModule::kMoe;
    if ((whole || !inside_moe_) && l_.selective_modules().has(m))
      merge_recomputed(w, g, true, /*with_a2a=*/whole);
    else
      add(w, g);
  }

  const ModelConfig& c_;
  const SimLayout& l_;
  const SystemSpec& s_;
  Fanout fan_;
  A2aEfficiency a2a_eff_;
  double a_ = 2, hbm_ = 1, tokens_ = 1;
  int share_ = 1;
  // the formats of the recipe's low-precision GEMMs (the decoder linears') and of the others
  // (head, router, attention: bf16 unless fp32)
  ops::Format low_ = ops::Format::F32, high_ = ops::Format::F32;
  bool quantized_ = false;   // the decoder GEMMs take FP8 or FP4 operands
  double qb_ = 1, db_ = 2;   // bytes per element: their operands; the tokens to the experts
  bool inside_moe_ = false;  // building a recomputed MoE layer's parts
};

}  // namespace

// Kernels outside CUDA graphs are launched one by one by the host. The MoE dispatch waits for
// the token counts on the host (a device-to-host sync) in every layer, forward and backward, so
// the GPU's queue is empty when the dispatch, experts and combine are launched: those kernels
// run at the host's pace, each costing its launch (partial and none). Elsewhere the host runs
// ahead of the GPU and its launches cost only where they exceed the GPU's work for the same
// kernels (none: each slot's direction takes at least its launch time).
void add_host_launches(SlotCost& w, const SimLayout& l, const SystemSpec& s) {
  const double us = (s.eff.kernel_launch_us + s.eff.framework_host_us) * 1e-6;
  if (l.cuda_graphs == "full" || us <= 0) return;
  auto exposed = [&](double kernels, double expert_kernels, double gpu) {
    double t = expert_kernels * us;
    if (l.cuda_graphs == "none") t += std::max(0.0, (kernels - expert_kernels) * us - gpu);
    return t;
  };
  const double f = exposed(w.kernels_f, w.expert_kernels_f, w.fwd());
  const double b = exposed(w.kernels_b, w.expert_kernels_b, w.bwd());
  w.launch_f += f, w.launch_b += b;
  w.experts_f += w.expert_kernels_f * us, w.experts_b += w.expert_kernels_b * us;
}

std::vector<SlotCost> slot_costs(const ModelConfig& c, const SimLayout& l, const SystemSpec& s) {
  // Expert ranks are ordered etp-ep-edp-pp (Megatron's parallel folding): an EP group's
  // members have stride ETP, so a domain holds min(EP, ranks per domain / ETP) of them.
  const int64_t rpd = std::max<int64_t>(1, s.ranks_per_domain(static_cast<int>(l.gpus)) / l.etp);
  const int64_t peers = std::min<int64_t>(l.ep, rpd);
  const Fanout fan = routing_fanout(c, l.ep, peers);
  SlotBuilder b(c, l, s, fan, peers);
  std::vector<SlotCost> slots;
  slots.push_back(b.embedding());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const bool moe = c.is_moe_layer(i);
    slots.push_back(b.decoder_layer(moe, (moe ? "moe " : "dense ") + std::to_string(i)));
  }
  for (int64_t d = 0; d < mtp_depth(c, l); ++d) slots.push_back(b.mtp_layer(d));
  slots.push_back(b.loss_slot());
  for (SlotCost& w : slots) add_host_launches(w, l, s);
  return slots;
}

}  // namespace moet::sim
