// `moet report`: one self-contained HTML page (inline SVG, no script, nothing fetched) of a
// run's metrics JSONL: losses against tokens, learning rate, throughput and MFU, gradient
// norm, the expert-load heatmap, communication hidden vs exposed, and the run's command and
// config (docs/metrics.md); or of several runs side by side (compare_html).
#pragma once
#include <cstdint>
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

// One run of a comparison: its name in the legends, what its records were read from, the
// records (read_metrics_records) and its run.json (null when none).
struct ReportRun {
  std::string name, source;
  std::vector<nlohmann::json> records;
  nlohmann::json run_info;
};
// The page of `moet report RUN_A RUN_B ...`: each run's LM loss, held-out loss, tokens/s, MFU,
// gradient norm and worst layer's max/mean expert load against tokens, overlaid in one colour
// per run; the final values of each run; the options (and resolved precision, model config)
// that differ between the runs' run.json files.
std::string compare_html(const std::vector<ReportRun>& runs);

// How long a run trained over all its starts. A resumed run continues its metrics file and
// each start's elapsed_s counts from that start's first step: the run's time is the sum of each
// start's last elapsed_s. A start begins where elapsed_s falls back or after a run.json
// segment's start_step.
struct RunElapsed {
  double seconds = 0;       // NaN when no record has elapsed_s
  int starts = 0;           // the starts the records show
  double last_start_s = 0;  // the newest start's part
};
RunElapsed run_elapsed(const std::vector<nlohmann::json>& records, const nlohmann::json& run_info);

// The recipe run.json records as the report shows it: "auto → bf16" (what --precision asked
// for, and what it resolved to), "fp32" when they are the same; "" when not recorded.
std::string precision_shown(const nlohmann::json& run_info);

// The starts of a run (run.json "segments") whose --data or --split differs from the start
// before: the step they continued from, the tokens trained by then (the loss charts' x; NaN
// when no record tells) and what changed, e.g. "data changed: mock → corpus.txt".
struct DataChange {
  int64_t step = 0;
  double tokens = 0;
  std::string what;
};
std::vector<DataChange> data_changes(const std::vector<nlohmann::json>& records,
                                     const nlohmann::json& run_info);

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
