#include "train/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "data/dataset.h"
#include "kernels/ops.h"
#include "kernels/profile.h"
#include "measure/recipe_choice.h"
#include "metrics/flops.h"
#include "model/model.h"
#include "train/train_step.h"

namespace moet {

OpProfile profile_training_step(const OpProfileOptions& o) {
  MOET_CHECK(!o.model_path.empty(), "--model CONFIG.json is required");
  MOET_CHECK(o.micro_batch > 0 && o.seq > 1 && o.steps > 0 && o.warmup >= 0,
             "--micro-batch, --seq and --steps must be positive");
  MOET_CHECK(o.threads >= 0, "--threads must be >= 0, got ", o.threads);
  const ModelConfig cfg = load_model_config(o.model_path);
  ops::set_num_threads(o.threads > 0 ? o.threads
                                     : std::max(1, int(std::thread::hardware_concurrency())));
  const RecipeChoice recipe =
      choose_recipe({o.precision.recipe, o.precision.bf16_layers, o.precision.bf16_end(),
                     model_gemm_shapes(cfg, o.micro_batch * o.seq), "", "", true});
  ops::set_gemm_operand_dtype(recipe.operands, recipe.operands_why);
  const PrecisionPolicy precision = recipe.policy;
  const int64_t B = o.micro_batch, T = o.seq;
  Model model(cfg, {.micro_batch = B, .seq_len = T, .precision = precision});
  model.init_parameters(1);
  LrSchedule sched;
  sched.max_lr = 1e-4;
  sched.warmup = 1;
  sched.total = o.warmup + o.steps;
  StepRunner runner(model, AdamWConfig{}, sched, 1e-3);
  MockDataset data(cfg.vocab_size, 1);
  std::vector<int32_t> tokens(B * (T + 1));
  const std::function<const int32_t*(int64_t)> batch = [&](int64_t) { return tokens.data(); };
  ops::OpProfiler prof;
  double seconds = 0;
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    data.next_batch(s, 0, B, T, tokens.data());
    const bool timed = s >= o.warmup;
    ops::set_op_profiler(timed ? &prof : nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    runner.run(s, 1, batch);
    if (timed)
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  ops::set_op_profiler(nullptr);

  OpProfile p;
  p.stream = measure_stream(stream_array_bytes());
  p.stream_activation = measure_stream(B * T * cfg.hidden_size * int64_t(sizeof(float)));
  p.model = o.model_path;
  p.precision = recipe_name(precision.recipe);
  const ops::Format main =
      precision.decoder(cfg.num_hidden_layers / 2, cfg.num_hidden_layers).fprop;
  p.kernels = ops::kernel_description(main);
  p.micro_batch = B, p.seq = T, p.threads = ops::num_threads();
  const double n = double(o.steps);
  p.step_s = seconds / n;
  p.tokens_per_s = double(B * T) / p.step_s;
  p.model_tflops =
      flops_per_token(cfg, T, cfg.num_nextn_predict_layers > 0) * p.tokens_per_s / 1e12;
  double in_ops = 0;
  for (const auto& [name, s] : prof.stats()) {
    OpProfileRow r;
    r.op = name;
    r.calls_per_step = double(s.calls) / n;
    r.ms_per_step = 1e3 * s.seconds / n;
    r.share = s.seconds / seconds;
    if (s.seconds > 0) r.gflops = s.flops / s.seconds / 1e9, r.gbps = s.bytes / s.seconds / 1e9;
    in_ops += s.seconds;
    p.rows.push_back(r);
  }
  OpProfileRow other;
  other.op = "other (outside ops)";
  other.ms_per_step = 1e3 * std::max(0.0, seconds - in_ops) / n;
  other.share = std::max(0.0, seconds - in_ops) / seconds;
  p.rows.push_back(other);
  std::sort(p.rows.begin(), p.rows.end(), [](const OpProfileRow& a, const OpProfileRow& b) {
    return a.ms_per_step > b.ms_per_step;
  });
  return p;
}

std::string op_profile_table(const OpProfile& p) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line,
                "%s, %s, micro-batch %lld x %lld, %lld threads | %s\n"
                "step %.3f s, %.0f tokens/s, %.3f model TFLOP/s\n\n",
                p.model.c_str(), p.precision.c_str(), (long long)p.micro_batch, (long long)p.seq,
                (long long)p.threads, p.kernels.c_str(), p.step_s, p.tokens_per_s, p.model_tflops);
  s += line;
  s += "memory: " + describe_stream(p.stream, int(p.threads)) +
       "; on one activation's size: " + describe_stream(p.stream_activation, int(p.threads)) +
       "\n\n";
  s += "| op | calls/step | ms/step | share | GFLOP/s | GB/s | % of STREAM triad |\n"
       "|---|---|---|---|---|---|---|\n";
  for (const OpProfileRow& r : p.rows) {
    char g[32] = "", b[32] = "", t[32] = "";
    if (r.gflops > 0) std::snprintf(g, sizeof g, "%.0f", r.gflops);
    if (r.memory_bound()) {
      std::snprintf(b, sizeof b, "%.1f", r.gbps);
      if (p.stream.triad_gbps > 0)
        std::snprintf(t, sizeof t, "%.0f%%", 100 * r.gbps / p.stream.triad_gbps);
    }
    std::snprintf(line, sizeof line, "| %s | %.0f | %.1f | %.1f%% | %s | %s | %s |\n", r.op.c_str(),
                  r.calls_per_step, r.ms_per_step, 100 * r.share, g, b, t);
    s += line;
  }
  return s;
}

std::string op_profile_json(const OpProfile& p) {
  nlohmann::json j;
  j["model"] = p.model;
  j["precision"] = p.precision;
  j["kernels"] = p.kernels;
  j["micro_batch"] = p.micro_batch;
  j["seq"] = p.seq;
  j["threads"] = p.threads;
  j["step_s"] = p.step_s;
  j["tokens_per_s"] = p.tokens_per_s;
  j["model_tflops"] = p.model_tflops;
  const auto stream_json = [](const StreamBandwidth& b) {
    return nlohmann::json{
        {"array_bytes", b.array_bytes}, {"copy_gbps", b.copy_gbps}, {"triad_gbps", b.triad_gbps}};
  };
  j["stream"] = stream_json(p.stream);
  j["stream_activation"] = stream_json(p.stream_activation);
  for (const OpProfileRow& r : p.rows)
    j["ops"].push_back({{"op", r.op},
                        {"calls_per_step", r.calls_per_step},
                        {"ms_per_step", r.ms_per_step},
                        {"share", r.share},
                        {"gflops", r.gflops},
                        {"gbps", r.gbps}});
  return j.dump(1) + "\n";
}

}  // namespace moet
