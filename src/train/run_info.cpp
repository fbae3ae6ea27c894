#include "train/run_info.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "metrics/progress.h"

namespace moet {
namespace {

std::string absolute(const std::string& path) {
  return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace

void write_run_info(const TrainOptions& o, const RunStart& start) {
  namespace fs = std::filesystem;
  nlohmann::ordered_json j;
  j["command"] = o.command_line;
  // every invocation of the run, the first first: a resumed run adds its own
  nlohmann::ordered_json commands = nlohmann::ordered_json::array();
  nlohmann::ordered_json segments = nlohmann::ordered_json::array();
  const fs::path previous = fs::path(o.checkpoint.out_dir) / "run.json";
  if (start.resuming && fs::is_regular_file(previous)) {
    const auto old =
        nlohmann::ordered_json::parse(read_text_file(previous.string()), nullptr, false);
    if (old.is_object() && old.contains("commands") && old["commands"].is_array())
      commands = old["commands"];
    else if (old.is_object() && old.contains("command") && old["command"].is_string())
      commands.push_back(old["command"]);
    // the earlier starts that reached this one's step (a resume from an older checkpoint
    // drops the starts after it)
    if (old.is_object() && old.contains("segments") && old["segments"].is_array())
      for (const auto& s : old["segments"])
        if (s.is_object() && s.value("start_step", int64_t(0)) < start.first_step)
          segments.push_back(s);
  }
  commands.push_back(o.command_line);
  j["commands"] = commands;
  nlohmann::ordered_json seg = {{"start_step", start.first_step},
                                {"command", o.command_line},
                                {"data", o.data.spec},
                                {"split", o.data.split.empty() ? "95,5" : o.data.split},
                                {"precision", start.precision}};
  if (start.data_changed_from)
    seg["data_changed_from"] = {{"data", start.data_changed_from->data},
                                {"split", start.data_changed_from->split}};
  segments.push_back(seg);
  j["segments"] = segments;
  if (!o.config_file.empty())
    j["config_file"] = {{"path", absolute(o.config_file)}, {"text", read_text_file(o.config_file)}};
  j["model_config"] = absolute(o.model_path);
  j["model"] = nlohmann::ordered_json::parse(read_text_file(o.model_path), nullptr, false);
  j["metrics"] = absolute(o.logging.metrics_path);
  j["tensorboard"] = absolute(o.logging.tensorboard_dir);
  j["tensorboard_file"] = absolute(start.tensorboard_file);
  j["precision"] = start.precision;
  if (!start.gemm_peaks.is_null()) j["gemm_peaks"] = start.gemm_peaks;
  j["options"] = to_json(o);  // grouped as TrainOptions (train_options.h)
  std::error_code ec;
  fs::create_directories(o.checkpoint.out_dir, ec);
  const fs::path path = fs::path(o.checkpoint.out_dir) / "run.json", tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << "\n";
    MOET_CHECK(out.good(), "cannot write '", tmp.string(), "'");
  }
  fs::rename(tmp, path, ec);
  MOET_CHECK(!ec, "cannot write '", path.string(), "': ", ec.message());
}

std::string format_run_summary(const RunSummary& s) {
  char buf[512];
  const double rate = s.seconds > 0 ? double(s.tokens) / s.seconds : 0;
  std::snprintf(buf, sizeof buf, "done: %lld steps, %lld tokens in %s, %.0f tokens/s on average",
                (long long)s.steps, (long long)s.tokens, format_hms(s.seconds).c_str(), rate);
  std::string out = buf;
  if (std::isfinite(s.best_eval_loss)) {
    std::snprintf(buf, sizeof buf, ", best held-out loss %.4f (step %lld)", s.best_eval_loss,
                  (long long)s.best_eval_step);
    out += buf;
  }
  out += "\n";
  if (!s.metrics_path.empty()) out += "metrics: " + s.metrics_path + "\n";
  if (!s.tensorboard_dir.empty())
    out +=
        "tensorboard: " + s.tensorboard_dir + " (tensorboard --logdir " + s.tensorboard_dir + ")\n";
  if (!s.checkpoint.empty()) out += "checkpoints: " + s.checkpoint + "\n";
  const std::string report_of = !s.run_dir.empty() ? s.run_dir : s.metrics_path;
  if (!report_of.empty()) out += "report: moet report " + report_of + "\n";
  return out;
}

}  // namespace moet
