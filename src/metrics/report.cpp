#include "metrics/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "core/error.h"
#include "metrics/progress.h"
#include "metrics/report_svg.h"

namespace moet {
namespace {

using json = nlohmann::json;

using report_page::escape;
using report_page::field;
using report_page::heat_color;
using report_page::line_chart;
using report_page::num;
using report_page::row;
using report_page::series;
using report_page::Series;

}  // namespace

AxisTicks axis_ticks(double lo, double hi, int target) {
  AxisTicks t;
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) return t;
  if (hi == lo) {
    t.values = {lo};
    return t;
  }
  // The step: 1, 2, 2.5 or 5 times a power of ten, the smallest giving at most `target` + 1 ticks.
  const double raw = (hi - lo) / std::max(1, target);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  t.step = 10 * p;
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * p >= raw * (1 - 1e-9)) {
      t.step = m * p;
      break;
    }
  for (double k = std::ceil(lo / t.step - 1e-9); k * t.step <= hi + t.step * 1e-9; k += 1)
    t.values.push_back(std::fabs(k) < 0.5 ? 0.0 : k * t.step);
  return t;
}

std::string tick_label(double v, double step) {
  if (v == 0) return "0";
  const double a = std::max(std::fabs(v), step);
  // Thousands and up with a suffix (12.5k, 1.5M), as few decimals as the step needs.
  static const std::pair<double, const char*> kUnits[] = {
      {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  double unit = 1;
  const char* suffix = "";
  for (const auto& [u, sfx] : kUnits)
    if (a >= u && step >= u / 100) {
      unit = u, suffix = sfx;
      break;
    }
  const double s = step / unit;
  if (unit == 1 && s < 1e-3) {  // tiny steps (learning rates): mantissa and exponent, 2.5e-05
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
  }
  // decimals: enough that v and v + step print differently (2.5 needs one more than 2 or 5)
  int decimals = std::max(0, int(std::ceil(-std::log10(s) - 1e-9)));
  if (std::fabs(s * std::pow(10.0, decimals) - std::round(s * std::pow(10.0, decimals))) > 1e-6)
    ++decimals;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v / unit);
  std::string out = buf;
  if (out.find('.') != std::string::npos) {  // 10.0k beside 7.5k reads as 10k
    out.erase(out.find_last_not_of('0') + 1);
    if (out.back() == '.') out.pop_back();
  }
  return out + suffix;
}

namespace {

// A MoE layer by its decoder index: the MTP modules' follow the num_hidden_layers main ones
// (run.json's model config; unknown: -1).
std::string moe_layer_name(const json& index, int64_t main_layers) {
  std::string name = "layer " + index.dump();
  if (main_layers >= 0 && index.is_number_integer() && index.get<int64_t>() >= main_layers)
    name += " (MTP module " + std::to_string(index.get<int64_t>() - main_layers + 1) + ")";
  return name;
}

int64_t main_layers_of(const json& run_info) {
  if (run_info.is_object() && run_info.contains("model") && run_info["model"].is_object() &&
      run_info["model"].contains("num_hidden_layers") &&
      run_info["model"]["num_hidden_layers"].is_number_integer())
    return run_info["model"]["num_hidden_layers"].get<int64_t>();
  return -1;
}

// The heatmaps' colour scale at (x, y): blue at no tokens, white at the mean, dark red at the
// largest load / mean `top`, with those three values written under it.
std::string heat_legend(double x, double y, double top) {
  const int kHalf = 12;
  const double slice = 10, bar = 2 * kHalf * slice;
  std::string g = "<g class=\"heat-legend\"><text x=\"" + num("%.0f", x - 6) + "\" y=\"" +
                  num("%.0f", y + 9) + "\" class=\"ytick\">load / mean</text>";
  for (int i = 0; i < 2 * kHalf; ++i) {
    // the left half from 0 to the mean, the right half from the mean to the largest
    const double t = (i + 0.5) / kHalf;
    const double ratio = i < kHalf ? t : 1 + (t - 1) * (top - 1);
    g += "<rect x=\"" + num("%.0f", x + slice * i) + "\" y=\"" + num("%.0f", y) + "\" width=\"" +
         num("%.0f", slice) + "\" height=\"10\" fill=\"" + heat_color(ratio, top) + "\"/>";
  }
  g += "<rect x=\"" + num("%.0f", x) + "\" y=\"" + num("%.0f", y) + "\" width=\"" +
       num("%.0f", bar) + "\" height=\"10\" fill=\"none\" stroke=\"#999\"/>";
  const std::pair<double, std::string> ticks[] = {
      {0, "0"}, {bar / 2, "1 (mean)"}, {bar, num("%.2f", top)}};
  for (const auto& [dx, label] : ticks)
    g += "<text x=\"" + num("%.0f", x + dx) + "\" y=\"" + num("%.0f", y + 22) +
         "\" class=\"xtick\">" + label + "</text>";
  return g + "</g>";
}

// The sequence-wise balance loss of each MoE layer against steps ("" when not logged).
std::string balance_per_layer_chart(const std::vector<json>& records, const json& run_info) {
  static const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  const int64_t main_layers = main_layers_of(run_info);
  std::vector<Series> layers;
  for (const json& r : records) {
    const auto per = r.find("balance_loss_per_layer"), idx = r.find("balance_loss_layers");
    if (per == r.end() || idx == r.end() || !per->is_array() || !idx->is_array() ||
        per->size() != idx->size())
      continue;
    for (size_t i = 0; i < per->size(); ++i) {
      if (layers.size() <= i) {
        layers.emplace_back();
        layers.back().name = moe_layer_name((*idx)[i], main_layers);
        layers.back().color = kColors[i % 10];
        if (i >= 10) layers.back().dash = "5,3";
      }
      if ((*per)[i].is_number())
        layers[i].xy.emplace_back(field(r, "step"), (*per)[i].get<double>());
    }
  }
  return line_chart("sequence-wise balance loss per MoE layer, unweighted", "step", layers);
}

// Per MoE layer, experts (rows) × logged steps (columns), coloured by load / mean load.
std::string expert_heatmaps(const std::vector<json>& records, const json& run_info) {
  const int64_t main_layers = main_layers_of(run_info);
  std::vector<const json*> logged;
  for (const json& r : records)
    if (r.contains("expert_load") && r["expert_load"].is_array() &&
        r.contains("expert_load_layers"))
      logged.push_back(&r);
  if (logged.empty())
    return "<p class=\"none\">No expert-load records: train with --log-expert-load N.</p>";
  const json& layers = logged.back()->at("expert_load_layers");
  std::string html;
  for (size_t li = 0; li < layers.size(); ++li) {
    std::vector<std::pair<int64_t, std::vector<double>>> cols;  // step, ratio per expert
    double top = 1;
    size_t experts = 0;
    for (const json* r : logged) {
      const json& loads = r->at("expert_load");
      if (li >= loads.size() || !loads[li].is_array()) continue;
      std::vector<double> load;
      double sum = 0;
      for (const json& v : loads[li])
        load.push_back(v.is_number() ? v.get<double>() : 0), sum += load.back();
      if (load.empty()) continue;
      const double mean = sum / double(load.size());
      for (double& l : load) l = mean > 0 ? l / mean : 0, top = std::max(top, l);
      experts = std::max(experts, load.size());
      cols.emplace_back(r->value("step", int64_t(0)), std::move(load));
    }
    if (cols.empty()) continue;
    const double cell_w = std::max(2.0, std::min(24.0, 440.0 / double(cols.size())));
    const double cell_h = std::max(3.0, std::min(16.0, 320.0 / double(experts)));
    const double w = std::max(480.0, 70 + cell_w * double(cols.size()) + 10),
                 h = 30 + cell_h * double(experts) + 82;
    std::string svg = "<svg class=\"chart heatmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                      num("%.0f", w) + "\" height=\"" + num("%.0f", h) + "\">";
    svg += "<text x=\"70\" y=\"18\" class=\"title\">" +
           escape(moe_layer_name(layers[li], main_layers)) + ": tokens per expert / mean (max " +
           num("%.2f", top) + ")</text>";
    for (size_t c = 0; c < cols.size(); ++c)
      for (size_t e = 0; e < cols[c].second.size(); ++e)
        svg += "<rect x=\"" + num("%.1f", 70 + cell_w * double(c)) + "\" y=\"" +
               num("%.1f", 30 + cell_h * double(e)) + "\" width=\"" + num("%.2f", cell_w) +
               "\" height=\"" + num("%.2f", cell_h) + "\" fill=\"" +
               heat_color(cols[c].second[e], top) + "\"><title>step " +
               std::to_string(cols[c].first) + ", expert " + std::to_string(e) + ": " +
               num("%.3f", cols[c].second[e]) + " x mean</title></rect>";
    svg += "<text x=\"64\" y=\"" + num("%.0f", 30 + cell_h * 0.5 + 4) +
           "\" class=\"ytick\">expert 0</text>";
    svg += "<text x=\"64\" y=\"" + num("%.0f", 30 + cell_h * (double(experts) - 0.5) + 4) +
           "\" class=\"ytick\">" + std::to_string(experts - 1) + "</text>";
    const double map_end = 30 + cell_h * double(experts);
    svg += "<text x=\"70\" y=\"" + num("%.0f", map_end + 16) + "\" class=\"xlabel-left\">step " +
           std::to_string(cols.front().first) + " → " + std::to_string(cols.back().first) + " (" +
           std::to_string(cols.size()) + " records)</text>";
    svg += heat_legend(80, map_end + 28, top);
    html += svg + "</svg>";
  }
  return html;
}

// run.json "segments" (src/train/run_info.h): one row per start of the run, the data, split and
// precision it trained with, its command, and whether the data changed at it.
std::string segments_table(const json& segments) {
  std::string t =
      "<h3>starts of the run</h3><table><tr><th>start</th><th>from step</th><th>data</th>"
      "<th>split</th><th>precision</th><th>command</th></tr>";
  int i = 0;
  for (const json& seg : segments) {
    if (!seg.is_object()) continue;
    auto text = [&](const char* k) {
      return seg.contains(k) && seg[k].is_string() ? escape(seg[k].get<std::string>())
                                                   : std::string("—");
    };
    std::string what = i == 0 ? "first start" : "resume " + std::to_string(i);
    if (seg.contains("data_changed_from") && seg["data_changed_from"].is_object()) {
      const json& from = seg["data_changed_from"];
      what += "<br><b>data changed</b> (was " + escape(from.value("data", std::string())) +
              ", split " + escape(from.value("split", std::string())) + ")";
    }
    t += "<tr class=\"segment\"><td>" + what + "</td><td>" +
         std::to_string(seg.value("start_step", int64_t(0))) + "</td><td>" + text("data") +
         "</td><td>" + text("split") + "</td><td>" + text("precision") + "</td><td>" +
         text("command") + "</td></tr>";
    ++i;
  }
  return t + "</table>";
}

}  // namespace

std::vector<json> read_metrics_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MOET_CHECK(in.good(), "cannot open metrics file '", path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<int64_t, json> by_step;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // a line still being written
    json j = json::parse(text.begin() + std::ptrdiff_t(begin), text.begin() + std::ptrdiff_t(end),
                         nullptr, false);
    begin = end + 1;
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    const int64_t step = j["step"].get<int64_t>();  // before the move below
    by_step[step] = std::move(j);
  }
  std::vector<json> out;
  for (auto& [step, j] : by_step) out.push_back(std::move(j));
  return out;
}

RunElapsed run_elapsed(const std::vector<json>& records, const json& run_info) {
  std::vector<int64_t> starts;  // run.json: the steps each start continued from
  if (run_info.is_object() && run_info.contains("segments") && run_info["segments"].is_array())
    for (const json& s : run_info["segments"])
      if (s.is_object() && s.contains("start_step") && s["start_step"].is_number_integer())
        starts.push_back(s["start_step"].get<int64_t>());
  RunElapsed out;
  double last = std::nan("");
  int64_t last_step = 0;
  for (const json& r : records) {
    const double e = field(r, "elapsed_s");
    if (!std::isfinite(e)) continue;
    const int64_t step = r.value("step", int64_t(0));
    bool begins = out.starts == 0 || e < last;
    for (int64_t s : starts) begins = begins || (last_step <= s && s < step);
    if (begins) {
      if (out.starts > 0) out.seconds += last;
      ++out.starts;
    }
    last = e, last_step = step;
  }
  if (out.starts == 0) return {std::nan(""), 0, std::nan("")};
  out.seconds += last;
  out.last_start_s = last;
  return out;
}

std::string precision_shown(const json& run_info) {
  if (!run_info.is_object()) return "";
  std::string asked, resolved;
  if (run_info.contains("precision") && run_info["precision"].is_string())
    resolved = run_info["precision"].get<std::string>();
  const json* o = run_info.contains("options") ? &run_info["options"] : nullptr;
  if (o && o->is_object() && o->contains("precision") && (*o)["precision"].is_object() &&
      (*o)["precision"].contains("precision") && (*o)["precision"]["precision"].is_string())
    asked = (*o)["precision"]["precision"].get<std::string>();
  if (asked.empty() || resolved.empty() || asked == resolved)
    return resolved.empty() ? asked : resolved;
  return asked + " → " + resolved;
}

std::vector<DataChange> data_changes(const std::vector<json>& records, const json& run_info) {
  std::vector<DataChange> out;
  if (!run_info.is_object() || !run_info.contains("segments") || !run_info["segments"].is_array())
    return out;
  for (const json& seg : run_info["segments"]) {
    if (!seg.is_object() || !seg.contains("data_changed_from") ||
        !seg["data_changed_from"].is_object())
      continue;
    const json& from = seg["data_changed_from"];
    DataChange c;
    c.step = seg.value("start_step", int64_t(0));
    const std::string old_data = from.value("data", std::string()),
                      old_split = from.value("split", std::string()),
                      data = seg.value("data", std::string()),
                      split = seg.value("split", std::string());
    c.what = "data changed: " + (old_data.empty() ? std::string("(default)") : old_data);
    if (old_split != split) c.what += " (split " + old_split + ")";
    c.what += " → " + (data.empty() ? std::string("(default)") : data);
    if (old_split != split) c.what += " (split " + split + ")";
    // the tokens trained by step c.step: that step's record, else tokens are steps x batch
    c.tokens = std::nan("");
    for (const json& r : records) {
      const int64_t step = r.value("step", int64_t(0));
      const double tokens = field(r, "tokens");
      if (step <= 0 || !std::isfinite(tokens)) continue;
      c.tokens = tokens / double(step) * double(c.step);
      if (step >= c.step) break;
    }
    out.push_back(c);
  }
  return out;
}

namespace {

// Elapsed time over every start of the run (a resumed run's metrics continue the file), not just
// the last.
std::string elapsed_row(const std::vector<json>& records, const json& run_info) {
  const RunElapsed e = run_elapsed(records, run_info);
  const char* secs = e.seconds < 10 ? "%.2f s" : "%.1f s";
  if (e.starts == 1)
    return row("elapsed", num(secs, e.seconds) + " (" + format_hms(e.seconds) + ")");
  if (e.starts > 1)
    return row("elapsed", num(secs, e.seconds) + " (" + format_hms(e.seconds) + ") over " +
                              std::to_string(e.starts) + " starts, the last " +
                              num(secs, e.last_start_s) +
                              "; start-up and the time between starts not counted");
  return "";
}

// A resumed run's starts (run.json "segments"): how many, the steps it resumed at and the data
// changes; "" for a run of one start.
std::string starts_row(const std::vector<json>& records, const json& run_info) {
  if (!run_info.is_object() || !run_info.contains("segments") || !run_info["segments"].is_array() ||
      run_info["segments"].size() <= 1)
    return "";
  std::string resumes;
  for (const json& seg : run_info["segments"])
    if (seg.is_object() && seg.value("start_step", int64_t(0)) > 0)
      resumes +=
          (resumes.empty() ? "" : ", ") + std::to_string(seg.value("start_step", int64_t(0)));
  std::string text =
      std::to_string(run_info["segments"].size()) + " (resumed at step " + resumes + ")";
  for (const DataChange& c : data_changes(records, run_info))
    text += "; at step " + std::to_string(c.step) + " " + c.what;
  return row("starts", text);
}

// The summary table: steps, tokens, last loss, best held-out loss, elapsed time, starts.
// run.json's GEMM peaks: the machine's best beside the one MFU divides by (the recipe's)
std::string peaks_row(const json& run_info) {
  if (!run_info.is_object() || !run_info.contains("gemm_peaks") ||
      !run_info["gemm_peaks"].is_object())
    return "";
  const json& p = run_info["gemm_peaks"];
  const double mfu = p.value("mfu_divides_by", 0.0), best = p.value("best", 0.0);
  const std::string of = p.value("mfu_peak", std::string());
  if (of == "--peak-tflops")
    return row("MFU divides by", num("%.3f", mfu) + " TFLOP/s (--peak-tflops)");
  std::string v = num("%.3f", mfu) + " TFLOP/s, the " + of + " GEMM peak (the recipe's)";
  if (best > mfu) v += "; this machine's best: " + num("%.3f", best) + " TFLOP/s";
  for (const char* k : {"fp32", "bf16"})
    if (p.contains(k) && p[k].is_number())
      v += std::string(k == std::string("fp32") ? " (" : ", ") + k + " " +
           num("%.3f", p[k].get<double>());
  return row("MFU divides by", v + (p.contains("fp32") && p["fp32"].is_number() ? ")" : ""));
}

std::string summary_table(const std::vector<json>& records, const json& run_info) {
  if (records.empty()) return "<table>" + row("records", "none yet") + "</table>\n";
  const json& last = records.back();
  std::string h = "<table>";
  h += row("steps", std::to_string(last.value("step", int64_t(0))) +
                        (last.contains("total_steps")
                             ? " of " + std::to_string(last.value("total_steps", int64_t(0)))
                             : std::string()));
  h += row("tokens", std::to_string(last.value("tokens", int64_t(0))));
  if (std::isfinite(field(last, "loss"))) h += row("last loss", num("%.4f", field(last, "loss")));
  double best = INFINITY;
  int64_t best_step = 0;
  for (const json& r : records)
    if (field(r, "eval_loss") < best) best = field(r, "eval_loss"), best_step = r.value("step", 0);
  if (std::isfinite(best))
    h += row("best held-out loss", num("%.4f", best) + " (step " + std::to_string(best_step) + ")");
  return h + elapsed_row(records, run_info) + starts_row(records, run_info) + peaks_row(run_info) +
         "</table>\n";
}

// The weight a loss term enters the loss with, as run.json's options.optim records it
// (train/train_options.h), for its chart's title.
std::string loss_weight(const json& run_info, const char* key, const char* flag) {
  const json* optim = nullptr;
  if (run_info.is_object() && run_info.contains("options") && run_info["options"].is_object() &&
      run_info["options"].contains("optim") && run_info["options"]["optim"].is_object())
    optim = &run_info["options"]["optim"];
  if (!optim || !optim->contains(key) || !(*optim)[key].is_number()) return "weight not recorded";
  const double w = (*optim)[key].get<double>();
  return w == 0 ? std::string(flag) + " 0: not in the loss" : num("enters the loss x %g", w);
}

// Loss, held-out loss (with the resumes that changed the data) against tokens; the balance and z
// losses, logged unweighted and orders of magnitude apart (~1 and ~20), each on its own axis.
std::string loss_section(const std::vector<json>& records, const json& run_info) {
  std::string h = "<h2>Loss</h2><div class=\"charts\">";
  std::vector<report_page::Marker> changed;  // a resume that changed --data or --split
  for (const DataChange& c : data_changes(records, run_info))
    if (std::isfinite(c.tokens)) changed.push_back({c.tokens, "data changed", "#555"});
  Series held_out = series(records, "tokens", "eval_loss", "held-out", "#d62728");
  held_out.dots = true;
  h += line_chart("loss against tokens", "tokens",
                  {series(records, "tokens", "lm_loss", "lm loss", "#1f77b4"),
                   series(records, "tokens", "mtp_loss", "mtp loss", "#aec7e8"), held_out},
                  false, changed);
  h += line_chart("sequence-wise balance loss, unweighted (" +
                      loss_weight(run_info, "balance_alpha", "--balance-alpha") + ")",
                  "step", {series(records, "step", "balance_loss", "balance", "#9467bd")});
  h += line_chart(
      "router z-loss, unweighted (" + loss_weight(run_info, "z_loss_coef", "--z-loss") + ")",
      "step", {series(records, "step", "z_loss", "z", "#8c564b")});
  return h + balance_per_layer_chart(records, run_info) + "</div>\n";
}

// Learning rate and gradient norm; tokens/s, MFU and TFLOP/s; the worst layer's expert load and
// the heatmaps.
std::string training_sections(const std::vector<json>& records, const json& run_info) {
  std::string h = "<h2>Optimisation</h2><div class=\"charts\">";
  h += line_chart("learning rate", "step", {series(records, "step", "lr", "lr", "#2ca02c")});
  h += line_chart("gradient norm (before clipping)", "step",
                  {series(records, "step", "grad_norm", "grad norm", "#ff7f0e")});
  h += "</div>\n<h2>Throughput</h2><div class=\"charts\">";
  h += line_chart("tokens/s", "step",
                  {series(records, "step", "tokens_per_s", "tokens/s", "#17becf")});
  h += line_chart("MFU", "step", {series(records, "step", "mfu", "MFU", "#bcbd22")}, true);
  h += line_chart("model TFLOP/s per process", "step",
                  {series(records, "step", "tflops", "TFLOP/s", "#7f7f7f")});
  h += "</div>\n<h2>Expert load</h2><div class=\"charts\">";
  h += line_chart("worst layer: max / mean expert load", "step",
                  {series(records, "step", "max_expert_load", "max/mean", "#e377c2")});
  return h + "</div><div class=\"charts\">" + expert_heatmaps(records, run_info) + "</div>\n";
}

// All-to-all seconds hidden and exposed, and gradient sync, per step.
std::string communication_section(const std::vector<json>& records) {
  Series hidden;
  hidden.name = "all-to-all hidden";
  hidden.color = "#2ca02c";
  for (const json& r : records) {
    const double a = field(r, "a2a_s"), e = field(r, "a2a_exposed_s");
    // the exposed part is measured as waiting and can exceed the transfer's own time: 0 then
    if (std::isfinite(a) && std::isfinite(e))
      hidden.xy.emplace_back(field(r, "step"), std::max(0.0, a - e));
  }
  const std::string comm = line_chart(
      "communication seconds per step", "step",
      {hidden, series(records, "step", "exposed_comm_s", "exposed (a2a + grad sync)", "#d62728"),
       series(records, "step", "grad_sync_s", "grad sync", "#1f77b4")});
  return "<h2>Communication</h2><div class=\"charts\">" +
         (comm.empty() ? "<p class=\"none\">No communication measured (one process).</p>" : comm) +
         "</div>\n";
}

// The command lines of a run without run.json "segments" (whose table lists them).
std::string command_rows(const json& run_info) {
  std::string h;
  if (run_info.contains("commands") && run_info["commands"].is_array() &&
      !run_info["commands"].empty()) {
    const auto& cmds = run_info["commands"];
    for (size_t i = 0; i < cmds.size(); ++i)
      if (cmds[i].is_string())
        h += row(cmds.size() == 1 ? std::string("command")
                 : i == 0         ? std::string("command (first start)")
                                  : "command (resume " + std::to_string(i) + ")",
                 cmds[i].get<std::string>());
  } else if (run_info.contains("command") && run_info["command"].is_string()) {
    h += row("command", run_info["command"].get<std::string>());
  }
  return h;
}

// run.json: the commands (or the starts' table), outputs, precision, options and model config.
std::string run_section(const json& run_info) {
  std::string h = "<h2>Run</h2>";
  if (!run_info.is_object())
    return h +
           "<p class=\"none\">No run.json found (it is written into the --out run directory): the "
           "command and config are unknown.</p>";
  // run.json "segments": every start of the run (src/train/run_info.h), listed below
  const bool has_segments = run_info.contains("segments") && run_info["segments"].is_array() &&
                            !run_info["segments"].empty();
  h += "<table>";
  if (!has_segments) h += command_rows(run_info);
  for (const char* k : {"metrics", "tensorboard", "model_config"})
    if (run_info.contains(k) && run_info[k].is_string() && !run_info[k].get<std::string>().empty())
      h += row(k, run_info[k].get<std::string>());
  const std::string precision = precision_shown(run_info);
  if (!precision.empty()) h += row("precision", precision);
  h += "</table>";
  if (has_segments) h += segments_table(run_info["segments"]);
  if (run_info.contains("options")) {
    json options = run_info["options"];  // --precision as asked and as resolved
    if (options.is_object() && options.contains("precision") && options["precision"].is_object() &&
        !precision.empty())
      options["precision"]["precision"] = precision;
    h += "<h3>options</h3><pre>" + escape(options.dump(2)) + "</pre>";
  }
  if (run_info.contains("model"))
    h += "<h3>model config</h3><pre>" + escape(run_info["model"].dump(2)) + "</pre>";
  return h;
}

}  // namespace

std::string report_html(const std::vector<json>& records, const json& run_info,
                        const std::string& source) {
  return report_page::page_head("moet report: " + source) + summary_table(records, run_info) +
         loss_section(records, run_info) + training_sections(records, run_info) +
         communication_section(records) + run_section(run_info) + "\n</body></html>\n";
}

}  // namespace moet
