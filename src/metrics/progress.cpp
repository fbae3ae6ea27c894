#include "metrics/progress.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moet {
namespace {

bool has(double v) { return std::isfinite(v); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// 950 -> "950", 12345 -> "12.3k", 4.5e6 -> "4.50M".
std::string format_rate(double v) {
  if (v >= 1e9) return fmt("%.2fG", v / 1e9);
  if (v >= 1e6) return fmt("%.2fM", v / 1e6);
  if (v >= 1e4) return fmt("%.1fk", v / 1e3);
  return fmt("%.0f", v);
}

}  // namespace

std::string format_hms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--:--";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

std::string format_eval_line(const StepMetrics& m) {
  std::string s = "step " + std::to_string(m.step);
  if (m.total_steps > 0) s += "/" + std::to_string(m.total_steps);
  s += " | eval " + (has(m.eval_loss) ? fmt("%.4f", m.eval_loss) : std::string("nan"));
  if (has(m.eval_loss_se)) s += " ± " + fmt("%.4f", m.eval_loss_se);
  return s + " (held-out loss)";
}

std::string format_progress_line(const StepMetrics& m) {
  std::string s = "step ";
  if (m.total_steps > 0) {
    const std::string total = std::to_string(m.total_steps);
    std::string step = std::to_string(m.step);
    if (step.size() < total.size()) step.insert(0, total.size() - step.size(), ' ');
    s += step + "/" + total;
  } else {
    s += std::to_string(m.step);
  }
  const bool mpi = m.ranks > 1;
  const char* tok_unit = mpi ? " tok/s (global)" : " tok/s";
  const char* tflop_unit = mpi ? " TFLOP/s/rank" : " TFLOP/s";
  auto loss_text = [](double loss, double lm, double mtp) {
    std::string t = "loss " + (has(loss) ? fmt("%.4f", loss) : std::string("nan"));
    std::string parts;
    if (has(lm) && lm != loss) parts += "lm " + fmt("%.4f", lm);
    if (has(mtp)) parts += (parts.empty() ? "" : " ") + ("mtp " + fmt("%.4f", mtp));
    return parts.empty() ? t : t + " (" + parts + ")";
  };
  auto tflops_text = [&](double v) { return fmt(v < 10 ? "%.3f" : "%.1f", v) + tflop_unit; };
  const bool interval = m.interval_steps > 0;
  if (interval) {
    // the interval's means first, then what belongs to the logged step alone
    s += " | mean of " + std::to_string(m.interval_steps) +
         (m.interval_steps == 1 ? " step: " : " steps: ") +
         loss_text(m.interval_loss, m.interval_lm_loss, m.interval_mtp_loss);
    if (has(m.interval_tokens_per_s)) s += ", " + format_rate(m.interval_tokens_per_s) + tok_unit;
    if (has(m.interval_tflops)) s += ", " + tflops_text(m.interval_tflops);
    if (has(m.interval_mfu)) s += ", MFU " + fmt("%.1f", 100.0 * m.interval_mfu) + "%";
    if (has(m.interval_step_time_s)) s += ", " + fmt("%.2f", m.interval_step_time_s) + " s/step";
    s += " | step " + std::to_string(m.step) + ": " + loss_text(m.loss, m.lm_loss, m.mtp_loss);
  } else {
    s += " | " + loss_text(m.loss, m.lm_loss, m.mtp_loss);
  }
  if (has(m.eval_loss))
    s += " | eval " + fmt("%.4f", m.eval_loss) +
         (has(m.eval_loss_se) ? " ± " + fmt("%.4f", m.eval_loss_se) : "");
  if (has(m.lr)) s += " | lr " + fmt("%.2e", m.lr);
  if (has(m.grad_norm)) s += " | gnorm " + fmt("%.3f", m.grad_norm);
  if (!interval) {
    if (has(m.tokens_per_s)) s += " | " + format_rate(m.tokens_per_s) + tok_unit;
    if (has(m.tflops)) s += " | " + tflops_text(m.tflops);
    if (has(m.mfu)) s += " | MFU " + fmt("%.1f", 100.0 * m.mfu) + "%";
  }
  if (has(m.max_expert_load)) s += " | load max/mean " + fmt("%.2f", m.max_expert_load);
  if (!interval && has(m.step_time_s)) s += " | " + fmt("%.2f", m.step_time_s) + " s/step";
  // The data wait only where it shows (>= 1 ms): a step that waited for its batch.
  if (has(m.data_wait_s) && m.data_wait_s >= 1e-3)
    s += (interval ? " | " : " (") + ("data wait " + fmt("%.3f", m.data_wait_s) + " s") +
         (interval ? "" : ")");
  if (has(m.a2a_s)) {
    s += " | a2a " + fmt("%.3f", m.a2a_s) + " s, exposed comm " + fmt("%.3f", m.exposed_comm_s) +
         " s, grad sync " + fmt("%.3f", m.grad_sync_s) + " s, " + fmt("%.1f", m.comm_bytes / 1e6) +
         " MB sent";
    std::string parts;
    if (has(m.grad_sync_bytes)) parts = fmt("%.1f", m.grad_sync_bytes / 1e6) + " MB gradients";
    if (has(m.pp_bytes))
      parts += (parts.empty() ? "" : ", ") + fmt("%.1f", m.pp_bytes / 1e6) +
               " MB between pipeline stages (all ranks)";
    if (has(m.tp_bytes))
      parts += (parts.empty() ? "" : ", ") + fmt("%.1f", m.tp_bytes / 1e6) +
               " MB tensor-parallel in " + fmt("%.3f", m.tp_comm_s) + " s";
    if (!parts.empty()) s += " (" + parts + ")";
  } else if (has(m.pp_bytes)) {
    s += " | " + fmt("%.1f", m.pp_bytes / 1e6) + " MB sent between pipeline stages (all ranks)";
  }
  if (has(m.ep_load_imbalance)) s += ", rank load max/mean " + fmt("%.2f", m.ep_load_imbalance);
  if (has(m.comm_bytes_other_nodes))
    s += " (" + fmt("%.1f", m.comm_bytes_other_nodes / 1e6) + " MB across nodes)";
  if (!m.pp_idle_s.empty()) {
    // each pipeline rank's idle time (up to 8 ranks; min–max beyond), the schedule's formula
    s += " | pp idle ";
    const auto [lo, hi] = std::minmax_element(m.pp_idle_s.begin(), m.pp_idle_s.end());
    if (m.pp_idle_s.size() <= 8) {
      for (size_t r = 0; r < m.pp_idle_s.size(); ++r)
        s += (r ? " " : "") + fmt("%.3f", m.pp_idle_s[r]);
    } else {
      s += fmt("%.3f", *lo) + "–" + fmt("%.3f", *hi);
    }
    s += " s";
    if (has(m.pp_idle_formula_s)) s += " (formula " + fmt("%.3f", m.pp_idle_formula_s) + " s)";
  }
  if (has(m.eta_s)) s += " | ETA " + format_hms(m.eta_s);
  return s;
}

void IntervalMeans::add(const StepMetrics& m) {
  ++n_;
  loss_ += m.loss;
  lm_ += m.lm_loss;
  mtp_ += m.mtp_loss;  // NaN throughout for a model without MTP: the mean stays NaN (left out)
  seconds_ += m.step_time_s;
  tokens_ += m.tokens_per_s * m.step_time_s;
  tflop_ += m.tflops * m.step_time_s;
  mfu_s_ += m.mfu * m.step_time_s;
}

void IntervalMeans::fill(StepMetrics& m) {
  if (n_ == 0) return;
  const double n = double(n_);
  m.interval_steps = n_;
  m.interval_loss = loss_ / n;
  m.interval_lm_loss = lm_ / n;
  m.interval_mtp_loss = mtp_ / n;
  m.interval_step_time_s = seconds_ / n;
  if (seconds_ > 0) {
    m.interval_tokens_per_s = tokens_ / seconds_;
    m.interval_tflops = tflop_ / seconds_;
    m.interval_mfu = mfu_s_ / seconds_;
  }
  *this = IntervalMeans{};
}

MetricsWriter::MetricsWriter(const std::string& path, bool overwrite)
    : MetricsWriter(path, overwrite ? Mode::kOverwrite : Mode::kCreate) {}

MetricsWriter::MetricsWriter(const std::string& path, Mode mode) : path_(path) {
  MOET_CHECK(!path.empty(), "metrics file path is empty");
  // "x": exclusive create (fails if the file exists), so nothing is ever clobbered by accident.
  const char* how = mode == Mode::kCreate ? "wx" : mode == Mode::kOverwrite ? "w" : "a";
  file_ = std::fopen(path.c_str(), how);
  if (!file_) {
    const int err = errno;
    MOET_CHECK(!(mode == Mode::kCreate && err == EEXIST), "metrics file '", path,
               "' already exists; refusing to overwrite it (remove it, choose another path, or "
               "ask to overwrite)");
    MOET_FAIL("cannot open metrics file '", path, "': ", std::strerror(err));
  }
}

void MetricsWriter::keep_steps_up_to(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() > step)
      continue;
    kept += line + "\n";
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    MOET_CHECK(out.good(), "cannot write '", tmp, "'");
  }
  MOET_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot replace metrics file '", path,
             "': ", std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const StepMetrics& m) {
  const std::string line = metrics_json_line(m) + "\n";
  const bool ok =
      std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  MOET_CHECK(ok, "cannot write metrics file '", path_, "': ", std::strerror(errno));
}

}  // namespace moet
