#include "cli/checkpoint_commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_diff.h"
#include "train/checkpointing.h"

namespace moet::cli {

CLI::App* add_checkpoint_command(CLI::App& app, CheckpointArgs& a) {
  CLI::App* c = app.add_subcommand("checkpoint", "work with checkpoints");
  c->require_subcommand(1);
  CLI::App* inspect = c->add_subcommand("inspect",
                                        "step, layout, tensors and bytes of a checkpoint; verifies "
                                        "every checksum");
  inspect->add_option("PATH", a.path, "a run directory (its latest checkpoint) or a step directory")
      ->required();
  inspect->add_flag("--tensors", a.tensors, "list every tensor with its shape and pieces");
  inspect->add_flag("--no-verify", a.no_verify, "do not read the data to verify checksums");
  CLI::App* diff = c->add_subcommand(
      "diff",
      "compare two checkpoints tensor by tensor, whatever layouts wrote them; exit 0 "
      "when every tensor is bitwise equal, 1 otherwise");
  diff->add_option("A", a.path, "a run or step directory")->required();
  diff->add_option("B", a.other, "a run or step directory")->required();
  return c;
}

namespace {

int run_diff(const CheckpointArgs& a) {
  const CheckpointReader ra(resolve_checkpoint_dir(a.path)), rb(resolve_checkpoint_dir(a.other));
  const CheckpointDiff d = diff_checkpoints(ra, rb);
  const size_t shown = std::min<size_t>(d.differences.size(), 20);
  for (size_t i = 0; i < shown; ++i) std::printf("%s\n", d.differences[i].c_str());
  if (shown < d.differences.size())
    std::printf("... and %zu more differences\n", d.differences.size() - shown);
  if (!d.layout_notes.empty()) {
    std::string notes;
    for (const std::string& n : d.layout_notes) notes += (notes.empty() ? "" : ", ") + n;
    std::printf("layouts differ (%s): compared as global tensors\n", notes.c_str());
  }
  std::printf("%s: %lld tensors compared, %zu differences (%s vs %s)\n",
              d.identical() ? "identical" : "different", (long long)d.tensors_compared,
              d.differences.size(), ra.dir().c_str(), rb.dir().c_str());
  return d.identical() ? 0 : 1;
}

}  // namespace

int run_checkpoint(const CheckpointArgs& a) {
  if (!a.other.empty()) return run_diff(a);
  const std::string dir = resolve_checkpoint_dir(a.path);
  CheckpointReader reader(dir);
  const CheckpointIndex& ix = reader.index();
  const nlohmann::json& run = ix.run;
  auto field = [&](const char* k) { return run.contains(k) ? run[k].dump() : std::string("?"); };
  std::printf("checkpoint: %s\n", dir.c_str());
  std::printf("step %lld | consumed samples %lld | tokens %lld | data cursor %lld | seed %llu\n",
              (long long)ix.step, (long long)ix.consumed_samples, (long long)ix.tokens,
              (long long)ix.data_cursor, (unsigned long long)ix.seed);
  if (const std::optional<TrainOptions> o =
          checkpoint_run_options(run, dir + "/checkpoint.json run")) {
    const char* yes_no[2] = {"false", "true"};
    std::printf(
        "layout: ranks %s, ep %lld, zero1 %s, deterministic %s | batch %lld x %lld accum, seq "
        "%lld | precision %s\n",
        field("ranks").c_str(), (long long)o->parallel.ep, yes_no[o->parallel.zero1],
        yes_no[o->parallel.deterministic], (long long)o->data.micro_batch,
        (long long)o->data.grad_accum, (long long)o->data.seq, field("precision").c_str());
  }
  if (run.contains("command_line") && run["command_line"].is_string())
    std::printf("command: %s\n", run["command_line"].get<std::string>().c_str());
  std::map<std::string, std::pair<int64_t, int64_t>> kinds;  // prefix -> tensors, elements
  std::map<std::string, bool> bf16;                          // prefix -> stored in bf16
  int64_t pieces = 0;
  for (const auto& [name, t] : ix.tensors) {
    const std::string kind = name.substr(0, name.find('/'));
    kinds[kind].first += 1;
    kinds[kind].second += shape_numel(t.shape);
    bf16[kind] = t.bf16;
    pieces += int64_t(t.pieces.size());
  }
  std::printf("tensors: %zu in %lld pieces over %zu files, %.1f MB", ix.tensors.size(),
              (long long)pieces, ix.files.size(), double(ix.total_bytes()) / 1e6);
  for (const auto& [kind, c] : kinds)
    std::printf(" | %s: %lld tensors, %.2fM values %s", kind.c_str(), (long long)c.first,
                double(c.second) / 1e6, bf16[kind] ? "bf16" : "fp32");
  std::printf("\n");
  if (a.tensors)
    for (const auto& [name, t] : ix.tensors) {
      std::string shape;
      for (size_t i = 0; i < t.shape.size(); ++i)
        shape += (i ? "x" : "") + std::to_string(t.shape[i]);
      std::printf("  %-60s %-16s %zu piece%s\n", name.c_str(), shape.c_str(), t.pieces.size(),
                  t.pieces.size() == 1 ? "" : "s");
    }
  if (a.no_verify) {
    std::printf("checksums: not verified (--no-verify)\n");
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t bytes = reader.verify_all();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("checksums: all %lld pieces verified (CRC-32C, %.1f MB in %.2f s)\n",
              (long long)pieces, double(bytes) / 1e6, s);
  return 0;
}

}  // namespace moet::cli
