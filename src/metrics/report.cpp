#include "metrics/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "core/error.h"

namespace moet {
namespace {

using json = nlohmann::json;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string num(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A JSON number field as a double (NaN when absent or null).
double field(const json& r, const char* key) {
  auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : std::nan("");
}

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

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> xy;
  bool dots = false;  // points (sparse series such as held-out loss) rather than a line
};

const int kW = 520, kH = 260, kLeft = 64, kRight = 12, kTop = 44, kBottom = 40;

// A line chart as inline SVG; "" when no series has a point.
std::string line_chart(const std::string& title, const std::string& x_label,
                       const std::vector<Series>& series, bool percent = false) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : series)
    for (auto [x, y] : s.xy)
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!(x0 <= x1)) return "";
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= std::max(1e-12, std::fabs(y0) * 0.05), y1 += std::max(1e-12, y1 * 0.05);
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  std::string svg = "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(kW) + "\" height=\"" + std::to_string(kH) + "\">";
  svg += "<text x=\"" + std::to_string(kLeft) + "\" y=\"18\" class=\"title\">" + escape(title) +
         "</text>";
  svg += "<rect x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(kTop) + "\" width=\"" +
         num("%.0f", pw) + "\" height=\"" + num("%.0f", ph) + "\" class=\"frame\"/>";
  const double scale = percent ? 100 : 1;  // ticks at round percentages
  const AxisTicks yt = axis_ticks(y0 * scale, y1 * scale), xt = axis_ticks(x0, x1);
  for (double t : yt.values) {
    const double y = t / scale;
    svg += "<line x1=\"" + std::to_string(kLeft) + "\" x2=\"" + num("%.1f", kLeft + pw) +
           "\" y1=\"" + num("%.1f", py(y)) + "\" y2=\"" + num("%.1f", py(y)) +
           "\" class=\"grid\"/>";
    svg += "<text x=\"" + std::to_string(kLeft - 4) + "\" y=\"" + num("%.1f", py(y) + 4) +
           "\" class=\"ytick\">" + tick_label(t, yt.step) + (percent ? "%" : "") + "</text>";
  }
  for (double x : xt.values)
    svg += "<text x=\"" + num("%.1f", px(x)) + "\" y=\"" + std::to_string(kH - kBottom + 14) +
           "\" class=\"xtick\">" + tick_label(x, xt.step) + "</text>";
  svg += "<text x=\"" + num("%.0f", kLeft + pw / 2) + "\" y=\"" + std::to_string(kH - 6) +
         "\" class=\"xlabel\">" + escape(x_label) + "</text>";
  double legend_x = kLeft;  // a row under the title, left to right
  for (const Series& s : series) {
    if (s.xy.empty()) continue;
    if (s.dots) {
      for (auto [x, y] : s.xy)
        svg += "<circle cx=\"" + num("%.1f", px(x)) + "\" cy=\"" + num("%.1f", py(y)) +
               "\" r=\"3\" fill=\"" + s.color + "\"/>";
    } else {
      svg += "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" + s.color + "\" points=\"";
      for (auto [x, y] : s.xy) svg += num("%.1f", px(x)) + "," + num("%.1f", py(y)) + " ";
      svg += "\"/>";
    }
    svg += "<rect x=\"" + num("%.0f", legend_x) + "\" y=\"26\" width=\"10\" height=\"10\" fill=\"" +
           s.color + "\"/><text x=\"" + num("%.0f", legend_x + 13) +
           "\" y=\"35\" class=\"legend\">" + escape(s.name) + "</text>";
    legend_x += 6.5 * double(s.name.size()) + 26;
  }
  return svg + "</svg>";
}

// One series of (x key, y key) over the records that have both.
Series series(const std::vector<json>& records, const char* x_key, const char* y_key,
              const std::string& name, const std::string& color, double scale = 1) {
  Series s{name, color, {}, false};
  for (const json& r : records) {
    const double x = field(r, x_key), y = field(r, y_key);
    if (std::isfinite(x) && std::isfinite(y)) s.xy.emplace_back(x, y * scale);
  }
  return s;
}

// White at the mean load, dark red at the largest load / mean, blue towards no tokens.
std::string heat_color(double ratio, double top) {
  // over-loaded: 0..1 from the mean to the largest ratio; under-loaded: -1 (no tokens)..0
  const double t = ratio >= 1 ? (top > 1 ? std::min(1.0, (ratio - 1) / (top - 1)) : 0.0)
                              : std::max(-1.0, ratio - 1);
  int r = 255, g = 255, b = 255;
  if (t >= 0)
    g = b = int(std::lround(255 * (1 - t))), r = int(std::lround(255 - 80 * t));
  else
    r = g = int(std::lround(255 * (1 + t))), b = 255;  // under-loaded: blue
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

// Per MoE layer, experts (rows) × logged steps (columns), coloured by load / mean load.
std::string expert_heatmaps(const std::vector<json>& records) {
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
    const double w = std::max(380.0, 70 + cell_w * double(cols.size()) + 10),
                 h = 30 + cell_h * double(experts) + 34;
    std::string svg = "<svg class=\"chart heatmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                      num("%.0f", w) + "\" height=\"" + num("%.0f", h) + "\">";
    svg += "<text x=\"70\" y=\"18\" class=\"title\">layer " + layers[li].dump() +
           ": tokens per expert / mean (max " + num("%.2f", top) + ")</text>";
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
    svg += "<text x=\"70\" y=\"" + num("%.0f", h - 18) + "\" class=\"xlabel-left\">step " +
           std::to_string(cols.front().first) + " → " + std::to_string(cols.back().first) + " (" +
           std::to_string(cols.size()) + " records)</text>";
    html += svg + "</svg>";
  }
  return html;
}

std::string row(const std::string& k, const std::string& v) {
  return "<tr><th>" + escape(k) + "</th><td>" + escape(v) + "</td></tr>";
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

std::string report_html(const std::vector<json>& records, const json& run_info,
                        const std::string& source) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<link rel=\"icon\" href=\"data:,\"><title>moet report: " +
      escape(source) +
      "</title><style>"
      "body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
      "h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
      ".charts{display:flex;flex-wrap:wrap;gap:12px}"
      ".chart{background:#fafafa;border:1px solid #ddd}"
      ".title{font-size:13px;font-weight:bold;fill:#222}"
      ".frame{fill:#fff;stroke:#999}.grid{stroke:#eee}"
      ".ytick{font-size:10px;text-anchor:end;fill:#555}"
      ".xtick{font-size:10px;text-anchor:middle;fill:#555}"
      ".xlabel{font-size:11px;text-anchor:middle;fill:#333}"
      ".xlabel-left{font-size:11px;fill:#333}.legend{font-size:11px;fill:#333}"
      "table{border-collapse:collapse}th,td{text-align:left;padding:2px 10px;"
      "border-bottom:1px solid #eee;font-size:13px}"
      "pre{background:#f4f4f4;padding:8px;font-size:12px;white-space:pre-wrap}"
      ".none{color:#777}"
      "</style></head><body>\n<h1>moet report: " +
      escape(source) + "</h1>\n";
  // Summary
  h += "<table>";
  if (records.empty()) {
    h += row("records", "none yet");
  } else {
    const json& last = records.back();
    h += row("steps", std::to_string(last.value("step", int64_t(0))) +
                          (last.contains("total_steps")
                               ? " of " + std::to_string(last.value("total_steps", int64_t(0)))
                               : std::string()));
    h += row("tokens", std::to_string(last.value("tokens", int64_t(0))));
    if (std::isfinite(field(last, "loss"))) h += row("last loss", num("%.4f", field(last, "loss")));
    double best = INFINITY;
    int64_t best_step = 0;
    for (const json& r : records)
      if (field(r, "eval_loss") < best)
        best = field(r, "eval_loss"), best_step = r.value("step", 0);
    if (std::isfinite(best))
      h += row("best held-out loss",
               num("%.4f", best) + " (step " + std::to_string(best_step) + ")");
    if (std::isfinite(field(last, "elapsed_s")))
      h += row("elapsed", num("%.1f s", field(last, "elapsed_s")));
  }
  h += "</table>\n";

  h += "<h2>Loss</h2><div class=\"charts\">";
  h += line_chart("loss against tokens", "tokens",
                  {series(records, "tokens", "lm_loss", "lm loss", "#1f77b4"),
                   series(records, "tokens", "mtp_loss", "mtp loss", "#aec7e8"), [&] {
                     Series s = series(records, "tokens", "eval_loss", "held-out", "#d62728");
                     s.dots = true;
                     return s;
                   }()});
  // The balance and z losses are logged unweighted and differ by orders of magnitude (~1 and
  // ~20): each on its own axis, titled with the weight it enters the loss with.
  auto weight_of = [&](const char* key, const char* flag) -> std::string {
    // run.json's options.optim (train/train_options.h)
    const nlohmann::json* optim = nullptr;
    if (run_info.is_object() && run_info.contains("options") && run_info["options"].is_object() &&
        run_info["options"].contains("optim") && run_info["options"]["optim"].is_object())
      optim = &run_info["options"]["optim"];
    if (!optim || !optim->contains(key) || !(*optim)[key].is_number()) return "weight not recorded";
    const double w = (*optim)[key].get<double>();
    return w == 0 ? std::string(flag) + " 0: not in the loss" : num("enters the loss x %g", w);
  };
  h += line_chart("sequence-wise balance loss, unweighted (" +
                      weight_of("balance_alpha", "--balance-alpha") + ")",
                  "step", {series(records, "step", "balance_loss", "balance", "#9467bd")});
  h += line_chart("router z-loss, unweighted (" + weight_of("z_loss_coef", "--z-loss") + ")",
                  "step", {series(records, "step", "z_loss", "z", "#8c564b")});
  h += "</div>\n<h2>Optimisation</h2><div class=\"charts\">";
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
  h += "</div><div class=\"charts\">" + expert_heatmaps(records) + "</div>\n";
  h += "<h2>Communication</h2><div class=\"charts\">";
  Series hidden{"all-to-all hidden", "#2ca02c", {}, false};
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
  h += comm.empty() ? "<p class=\"none\">No communication measured (one process).</p>" : comm;
  h += "</div>\n<h2>Run</h2>";
  if (run_info.is_object()) {
    h += "<table>";
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
    for (const char* k : {"metrics", "tensorboard", "model_config"})
      if (run_info.contains(k) && run_info[k].is_string() &&
          !run_info[k].get<std::string>().empty())
        h += row(k, run_info[k].get<std::string>());
    h += "</table>";
    if (run_info.contains("options"))
      h += "<h3>options</h3><pre>" + escape(run_info["options"].dump(2)) + "</pre>";
    if (run_info.contains("model"))
      h += "<h3>model config</h3><pre>" + escape(run_info["model"].dump(2)) + "</pre>";
  } else {
    h += "<p class=\"none\">No run.json found (it is written into the --out run directory): the "
         "command and config are unknown.</p>";
  }
  return h + "\n</body></html>\n";
}

}  // namespace moet
