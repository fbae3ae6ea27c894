// `moet report`: one self-contained HTML page (inline SVG, no script, nothing fetched) of a
// run's metrics JSONL: losses against tokens, learning rate, throughput and MFU, gradient
// norm, the expert-load heatmap, communication hidden vs exposed, and the run's command and
// config (docs/metrics.md).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moet {

// The metrics file's step records in order. Tolerates a run still writing: a last line
// without its newline, or any line that is not a JSON object with a "step", is skipped.
// A resumed run's file may repeat steps: the later record wins.
std::vector<nlohmann::json> read_metrics_records(const std::string& path);

// The page. run_info: run.json's object (command, model, options) or null when unknown;
// source: what the page was made from, for its heading.
std::string report_html(const std::vector<nlohmann::json>& records, const nlohmann::json& run_info,
                        const std::string& source);

// A chart axis's ticks: every multiple of a round step (1, 2, 2.5 or 5 times a power of ten) in
// [lo, hi], the step the smallest that gives at most target + 1 of them.
struct AxisTicks {
  std::vector<double> values;
  double step = 0;
};
AxisTicks axis_ticks(double lo, double hi, int target = 5);
// A tick's text: as few decimals as the step needs ("10.5", "0.25"), thousands and up with a
// suffix ("11k", "1.5M"), tiny steps as "2.5e-05"; never a clipped exponent.
std::string tick_label(double v, double step);

}  // namespace moet
