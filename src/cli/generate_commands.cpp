#include "cli/generate_commands.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "cli/checkpoint_run.h"
#include "cli/flag_validators.h"
#include "core/error.h"
#include "core/flag_check.h"
#include "data/text_stream.h"
#include "data/tokenizer.h"
#include "kernels/ops.h"
#include "model/inference.h"

namespace moet::cli {

namespace {

std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab_size) {
  std::string s = text;
  std::replace(s.begin(), s.end(), ',', ' ');
  std::istringstream in(s);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MOET_CHECK(used == word.size() && v >= 0 && v < vocab_size, "--prompt-ids: '", word,
               "' is not a token id in [0, ", vocab_size, ")");
    ids.push_back(int32_t(v));
  }
  return ids;
}

std::string kilobytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KB", double(bytes) / 1e3);
  return buf;
}

}  // namespace

CLI::App* add_generate_command(CLI::App& app, GenerateArgs& a) {
  CLI::App* c = app.add_subcommand(
      "generate", "continue a prompt with a checkpoint's model (KV-cached decoding, streamed)");
  c->add_option("--checkpoint", a.checkpoint, "a run directory or a step directory")->required();
  auto* text = c->add_option("--prompt", a.prompt, "the text to continue");
  auto* ids = c->add_option("--prompt-ids", a.prompt_ids,
                            "the prompt as token ids instead, e.g. \"1 2 3\"");
  text->excludes(ids);
  ids->excludes(text);
  c->add_option("--tokenizer", a.tokenizer,
                "'byte' or a tokenizer.json (default: tokenizer.json in the step or run "
                "directory, else bytes)");
  c->add_option("--max-new-tokens", a.max_new_tokens,
                "tokens to generate at most, positive (default min(128, max_position_embeddings - "
                "prompt))");
  c->add_option("--temperature", a.temperature,
                "softmax temperature of sampling; 0: greedy (default: greedy, as transformers' "
                "generate, or 1 when --top-k or --top-p is given)");
  c->add_option("--top-k", a.top_k, "sample among the k most likely tokens (0: all)");
  c->add_option("--top-p", a.top_p,
                "sample within the nucleus of this probability mass, (0, 1] (default 1)");
  c->add_option("--seed", a.seed, "seed of the sampling")
      ->check(unsigned_integer())
      ->capture_default_str();
  c->add_option("--threads", a.threads, "threads (default: all cores)");
  c->add_flag("--print-ids", a.print_ids,
              "print the new token ids (one line, space-separated) instead of text");
  c->add_flag("--no-echo", a.no_echo,
              "print the continuation only (default: the prompt, then its continuation, as "
              "transformers' text-generation pipeline)");
  return c;
}

void run_generate(const GenerateArgs& a) {
  check_flag_threads(a.threads);
  if (a.max_new_tokens) check_flag_positive("--max-new-tokens", *a.max_new_tokens);
  GenerateOptions o;
  const bool sampling_asked = a.top_k || a.top_p;
  o.sampling = {a.temperature.value_or(sampling_asked ? 1.0 : 0.0), a.top_k.value_or(0),
                a.top_p.value_or(1.0), a.seed};
  Sampler check(o.sampling);  // bad sampling flags fail before the weights load
  if (a.threads > 0) ops::set_num_threads(a.threads);
  const std::string step = resolve_checkpoint_dir(a.checkpoint);
  const ModelConfig cfg = load_model_config(step + "/config.json");
  const auto tok =
      checkpoint_tokenizer(a.tokenizer, step, "", cfg.vocab_size, "moet generate").tokenizer;
  const std::vector<int32_t> prompt =
      a.prompt_ids.empty() ? tok->encode(a.prompt) : parse_ids(a.prompt_ids, cfg.vocab_size);
  MOET_CHECK(!prompt.empty(), "the prompt is empty: give --prompt TEXT or --prompt-ids IDS");
  const int64_t room = cfg.max_position_embeddings - int64_t(prompt.size());
  MOET_CHECK(room > 0, "the prompt's ", prompt.size(),
             " tokens leave no room within max_position_embeddings (", cfg.max_position_embeddings,
             ")");
  o.max_new_tokens = a.max_new_tokens.value_or(std::min<int64_t>(128, room));
  o.stop_id = tok->eod_id();
  check_generate_options(cfg, int64_t(prompt.size()), o);  // before the weights load
  Model model(cfg, {.micro_batch = 1, .seq_len = 1});
  load_checkpoint_weights(step, model.params());

  // Said first, on stderr: how the tokens are chosen (greedy is transformers' default too).
  if (o.sampling.temperature == 0)
    std::fprintf(stderr,
                 "moet generate: greedy decoding (transformers' default); --temperature T "
                 "samples\n");
  else
    std::fprintf(stderr,
                 "moet generate: sampling at temperature %g, top-k %lld, top-p %g, seed %llu\n",
                 o.sampling.temperature, (long long)o.sampling.top_k, o.sampling.top_p,
                 (unsigned long long)o.sampling.seed);
  TextStream stream(*tok, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  // The prompt first, as its tokens decode (transformers' pipeline returns the full text).
  if (!a.print_ids && !a.no_echo)
    for (int32_t id : prompt) stream.push(id);
  std::vector<int32_t> out;
  const GenerateResult r = generate(model, prompt, o, [&](int32_t id) {
    if (a.print_ids)
      out.push_back(id);
    else if (id != o.stop_id)  // the end of the text, not text
      stream.push(id);
  });
  if (a.print_ids) {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? " " : "", out[i]);
  } else {
    stream.finish();
  }
  std::printf("\n");
  std::fflush(stdout);
  const int64_t steps = int64_t(r.tokens.size()) - 1;  // one-token forwards after the prefill
  std::fprintf(stderr,
               "moet generate: prefill %zu tokens in %.3f s (%.1f tokens/s), decode %lld tokens "
               "in %.3f s (%.1f tokens/s); KV cache %s per token (expanded K/V: %s); tokenizer: "
               "%s\n",
               prompt.size(), r.prefill_seconds, double(prompt.size()) / r.prefill_seconds,
               (long long)steps, r.decode_seconds,
               steps > 0 ? double(steps) / r.decode_seconds : 0.0,
               kilobytes(KvCache::bytes_per_token(cfg)).c_str(),
               kilobytes(KvCache::expanded_bytes_per_token(cfg)).c_str(), tok->describe().c_str());
}

}  // namespace moet::cli
