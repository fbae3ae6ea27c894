// `moet report RUN_DIR|METRICS.jsonl`: the run's HTML report; `moet report RUN_A RUN_B ...`:
// several runs compared on one page (src/metrics/report.h).
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace moet::cli {

struct ReportArgs {
  // run directories (--out of moet train) or metrics JSONL files: one for a run's report,
  // several for a comparison
  std::vector<std::string> runs;
  // default: one run: RUN_DIR/report.html (FILE.html beside a metrics file FILE.jsonl); several:
  // compare.html in the current directory
  std::string out;
  bool overwrite = false;
};

CLI::App* add_report_command(CLI::App& app, ReportArgs& a);
void run_report(const ReportArgs& a);

}  // namespace moet::cli
