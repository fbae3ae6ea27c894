// `moet report RUN_DIR|METRICS.jsonl`: the run's HTML report (src/metrics/report.h).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace moet::cli {

struct ReportArgs {
  std::string run;  // a run directory (--out of moet train) or a metrics JSONL file
  std::string out;  // default: RUN_DIR/report.html (FILE.html beside a metrics file FILE.jsonl)
  bool overwrite = false;
};

CLI::App* add_report_command(CLI::App& app, ReportArgs& a);
void run_report(const ReportArgs& a);

}  // namespace moet::cli
