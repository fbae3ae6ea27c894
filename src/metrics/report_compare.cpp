// `moet report RUN_A RUN_B ...`: several runs on one page (compare_html, metrics/report.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "metrics/progress.h"
#include "metrics/report.h"
#include "metrics/report_svg.h"

namespace moet {
namespace {

using json = nlohmann::json;
using report_page::escape;
using report_page::field;
using report_page::line_chart;
using report_page::Marker;
using report_page::num;
using report_page::Series;

// One colour per run (matplotlib's tab10); after ten runs the colours repeat with dashed lines.
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
std::string color_of(size_t i) { return kColors[i % 10]; }
std::string dash_of(size_t i) { return i < 10 ? "" : i < 20 ? "6,3" : "2,2"; }

// Where a run's files went and how it prints: the same in every experiment, never a difference
// worth a row.
const std::set<std::string> kNotCompared = {"checkpoint.out",      "logging.metrics",
                                            "logging.tensorboard", "logging.trace",
                                            "logging.overwrite",   "logging.quiet"};

std::string text_of(const json& v) {
  if (v.is_string()) return v.get<std::string>().empty() ? "\"\"" : v.get<std::string>();
  return v.dump();
}

// run.json's options as "group.key" → value, --precision as asked and resolved ("auto → bf16"),
// and the model config's fields as "model config.key".
std::map<std::string, std::string> flat_options(const json& run_info) {
  std::map<std::string, std::string> out;
  if (!run_info.is_object()) return out;
  if (run_info.contains("options") && run_info["options"].is_object())
    for (const auto& [group, values] : run_info["options"].items()) {
      if (!values.is_object()) {
        out[group] = text_of(values);
        continue;
      }
      for (const auto& [key, v] : values.items())
        if (!kNotCompared.count(group + "." + key)) out[group + "." + key] = text_of(v);
    }
  const std::string precision = precision_shown(run_info);
  if (!precision.empty()) out["precision.precision"] = precision;
  if (run_info.contains("model") && run_info["model"].is_object())
    for (const auto& [key, v] : run_info["model"].items()) out["model config." + key] = text_of(v);
  return out;
}

Series run_series(const ReportRun& run, size_t i, const char* y_key, double scale = 1) {
  Series s = report_page::series(run.records, "tokens", y_key, run.name, color_of(i), scale);
  s.dash = dash_of(i);
  return s;
}

// The run's rate over its steps: Σ rate × step_time_s / Σ step_time_s (the rate at the mean step
// time, as the progress line's interval means), else the plain mean of the rate.
double mean_rate(const std::vector<json>& records, const char* key) {
  double weighted = 0, seconds = 0, plain = 0;
  int n = 0;
  for (const json& r : records) {
    const double v = field(r, key), t = field(r, "step_time_s");
    if (!std::isfinite(v)) continue;
    plain += v, ++n;
    if (std::isfinite(t) && t > 0) weighted += v * t, seconds += t;
  }
  if (seconds > 0) return weighted / seconds;
  return n > 0 ? plain / n : std::nan("");
}

// The last record with a finite `key`: (value, step), or NaN.
std::pair<double, int64_t> last_of(const std::vector<json>& records, const char* key) {
  for (auto it = records.rbegin(); it != records.rend(); ++it)
    if (std::isfinite(field(*it, key))) return {field(*it, key), it->value("step", int64_t(0))};
  return {std::nan(""), 0};
}

std::pair<double, int64_t> best_of(const std::vector<json>& records, const char* key) {
  std::pair<double, int64_t> best{std::nan(""), 0};
  for (const json& r : records) {
    const double v = field(r, key);
    if (std::isfinite(v) && !(v >= best.first)) best = {v, r.value("step", int64_t(0))};
  }
  return best;
}

std::string swatch(size_t i) {
  return "<span class=\"swatch\" style=\"background:" + color_of(i) + "\"></span>";
}

// A table with a column per run: its header row, then rows of cells (already HTML). `best`: the
// column to mark in each row (-1: none).
std::string run_table(const std::vector<ReportRun>& runs, const std::string& first_header,
                      const std::vector<std::pair<std::string, std::vector<std::string>>>& rows,
                      const std::vector<int>& best = {}) {
  std::string t = "<table><tr><th>" + escape(first_header) + "</th>";
  for (size_t i = 0; i < runs.size(); ++i) t += "<th>" + swatch(i) + escape(runs[i].name) + "</th>";
  t += "</tr>";
  for (size_t k = 0; k < rows.size(); ++k) {
    t += "<tr><th>" + escape(rows[k].first) + "</th>";
    for (size_t i = 0; i < rows[k].second.size(); ++i) {
      const bool mark = k < best.size() && best[k] == int(i);
      t += "<td class=\"num\">" + std::string(mark ? "<b>" : "") + rows[k].second[i] +
           (mark ? "</b>" : "") + "</td>";
    }
    t += "</tr>";
  }
  return t + "</table>";
}

// The column of the smallest (largest: sign -1) finite value, or -1 when fewer than two are or
// the best is shared.
int best_column(const std::vector<double>& v, double sign = 1) {
  int best = -1, finite = 0, ties = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) continue;
    ++finite;
    if (best < 0 || sign * v[i] < sign * v[size_t(best)])
      best = int(i), ties = 0;
    else if (v[i] == v[size_t(best)])
      ++ties;
  }
  return finite >= 2 && ties == 0 ? best : -1;
}

std::string final_values(const std::vector<ReportRun>& runs) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows(8);
  rows[0].first = "steps";
  rows[1].first = "tokens";
  rows[2].first = "final LM loss";
  rows[3].first = "best held-out loss";
  rows[4].first = "mean tokens/s";
  rows[5].first = "mean MFU";
  rows[6].first = "elapsed";
  rows[7].first = "precision";
  std::vector<double> lm, held, rate;
  for (const ReportRun& run : runs) {
    if (run.records.empty()) {
      for (auto& r : rows) r.second.push_back("—");
      lm.push_back(std::nan("")), held.push_back(std::nan("")), rate.push_back(std::nan(""));
      continue;
    }
    const json& last = run.records.back();
    const int64_t total = last.value("total_steps", int64_t(0));
    rows[0].second.push_back(std::to_string(last.value("step", int64_t(0))) +
                             (total > 0 ? " of " + std::to_string(total) : std::string()));
    rows[1].second.push_back(std::to_string(last.value("tokens", int64_t(0))));
    const double loss = last_of(run.records, "lm_loss").first;
    lm.push_back(loss);
    rows[2].second.push_back(std::isfinite(loss) ? num("%.4f", loss) : "—");
    const auto [best, best_step] = best_of(run.records, "eval_loss");
    held.push_back(best);
    rows[3].second.push_back(std::isfinite(best)
                                 ? num("%.4f", best) + " (step " + std::to_string(best_step) + ")"
                                 : "—");
    const double tps = mean_rate(run.records, "tokens_per_s"), mfu = mean_rate(run.records, "mfu");
    rate.push_back(tps);
    rows[4].second.push_back(std::isfinite(tps) ? num("%.0f", tps) : "—");
    rows[5].second.push_back(std::isfinite(mfu) ? num("%.2f%%", 100 * mfu) : "—");
    const RunElapsed e = run_elapsed(run.records, run.run_info);
    rows[6].second.push_back(
        e.starts == 0
            ? "—"
            : (e.seconds < 60 ? num("%.2f s", e.seconds) : escape(format_hms(e.seconds))) +
                  (e.starts > 1 ? " (" + std::to_string(e.starts) + " starts)" : ""));
    const std::string p = precision_shown(run.run_info);
    rows[7].second.push_back(p.empty() ? "—" : escape(p));
  }
  return run_table(runs, "", rows,
                   {-1, -1, best_column(lm), best_column(held), best_column(rate, -1)});
}

std::string options_that_differ(const std::vector<ReportRun>& runs) {
  std::vector<std::map<std::string, std::string>> flat;
  std::set<std::string> keys;
  std::string unknown;
  for (const ReportRun& run : runs) {
    flat.push_back(flat_options(run.run_info));
    for (const auto& [k, v] : flat.back()) keys.insert(k);
    if (!run.run_info.is_object()) unknown += (unknown.empty() ? "" : ", ") + run.name;
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  for (const std::string& k : keys) {
    std::set<std::string> values;
    std::vector<std::string> cells;
    for (size_t i = 0; i < runs.size(); ++i) {
      auto it = flat[i].find(k);
      if (it != flat[i].end()) values.insert(it->second);
      cells.push_back(it != flat[i].end()            ? escape(it->second)
                      : runs[i].run_info.is_object() ? "(not recorded)"
                                                     : "?");
    }
    bool missing = false;  // recorded by some runs with run.json and not by others
    for (size_t i = 0; i < runs.size(); ++i)
      missing = missing || (runs[i].run_info.is_object() && !flat[i].count(k));
    if (values.size() > 1 || (missing && !values.empty())) rows.emplace_back(k, cells);
  }
  std::string html;
  if (!unknown.empty())
    html += "<p class=\"none\">No run.json for " + escape(unknown) +
            " (it is written into moet train's --out directory): its options are unknown (?).</p>";
  if (rows.empty())
    return html +
           "<p class=\"none\">The runs' options and model configs are the same (output "
           "paths aside).</p>";
  return html + run_table(runs, "option", rows);
}

}  // namespace

std::string compare_html(const std::vector<ReportRun>& runs) {
  std::string h = report_page::page_head("moet report: " + std::to_string(runs.size()) + " runs");
  h += "<h2>Runs</h2><table><tr><th>run</th><th>metrics</th><th>command (last start)</th></tr>";
  for (size_t i = 0; i < runs.size(); ++i) {
    const json& info = runs[i].run_info;
    std::string command = "(no run.json)";
    if (info.is_object() && info.contains("command") && info["command"].is_string())
      command = info["command"].get<std::string>();
    h += "<tr class=\"run\"><td style=\"white-space:nowrap\">" + swatch(i) + escape(runs[i].name) +
         "</td><td>" + escape(runs[i].source) + "</td><td>" + escape(command) + "</td></tr>";
  }
  h += "</table>\n<h2>Final values</h2>" + final_values(runs);

  auto each = [&](const char* key, bool dots = false, double scale = 1) {
    std::vector<Series> s;
    for (size_t i = 0; i < runs.size(); ++i) {
      s.push_back(run_series(runs[i], i, key, scale));
      s.back().dots = s.back().joined = dots;
    }
    return s;
  };
  std::vector<Marker> changed;  // each run's resumes that changed --data or --split
  for (size_t i = 0; i < runs.size(); ++i)
    for (const DataChange& c : data_changes(runs[i].records, runs[i].run_info))
      if (std::isfinite(c.tokens))
        changed.push_back({c.tokens, "data changed (" + runs[i].name + ")", color_of(i)});
  auto chart = [&](const std::string& title, std::vector<Series> s, bool percent = false,
                   const std::vector<Marker>& markers = {}) {
    const std::string c = line_chart(title, "tokens", s, percent, markers);
    return c.empty() ? "<p class=\"none\">" + escape(title) + ": no run has values.</p>" : c;
  };
  h += "\n<h2>Loss</h2><div class=\"charts\">";
  h += chart("LM loss (training)", each("lm_loss"), false, changed);
  h += chart("held-out LM loss", each("eval_loss", true), false, changed);
  h += "</div>\n<h2>Throughput</h2><div class=\"charts\">";
  h += chart("tokens/s (global)", each("tokens_per_s"));
  h += chart("MFU", each("mfu"), true);
  h += "</div>\n<h2>Optimisation and routing</h2><div class=\"charts\">";
  h += chart("gradient norm (before clipping)", each("grad_norm"));
  h += chart("worst MoE layer: max / mean expert load", each("max_expert_load"));
  h += "</div>\n<h2>Options that differ</h2>" + options_that_differ(runs);
  return h + "\n</body></html>\n";
}

}  // namespace moet
