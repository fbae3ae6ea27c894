#include "cli/report_commands.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/file_io.h"
#include "metrics/report.h"

namespace moet::cli {

namespace fs = std::filesystem;

CLI::App* add_report_command(CLI::App& app, ReportArgs& a) {
  CLI::App* c = app.add_subcommand(
      "report", "write a self-contained HTML report (charts as inline SVG) of a training run");
  c->add_option("run", a.run,
                "run directory (moet train --out: its run.json names the metrics file) or a "
                "metrics JSONL file")
      ->required();
  c->add_option("--out", a.out,
                "the HTML file (default: RUN_DIR/report.html, or FILE.html beside a metrics "
                "file FILE.jsonl)");
  c->add_flag("--overwrite", a.overwrite, "replace an existing --out file");
  return c;
}

void run_report(const ReportArgs& a) {
  MOET_CHECK(fs::exists(a.run), "'", a.run, "' does not exist");
  const bool is_dir = fs::is_directory(a.run);
  const fs::path dir = is_dir ? fs::path(a.run) : fs::path(a.run).parent_path();
  nlohmann::json info;  // null: no run.json
  const fs::path info_path = dir / "run.json";
  if (fs::is_regular_file(info_path)) {
    info = nlohmann::json::parse(read_text_file(info_path.string()), nullptr, false);
    MOET_CHECK(info.is_object(), "'", info_path.string(), "' is not a JSON object");
  }
  std::string metrics = a.run;
  if (is_dir) {
    metrics = (dir / "metrics.jsonl").string();
    if (info.is_object() && info.value("metrics", std::string()) != "")
      metrics = info["metrics"].get<std::string>();
    MOET_CHECK(fs::is_regular_file(metrics), "no metrics file for run directory '", a.run,
               "' (looked for ", metrics,
               "): train with --metrics FILE --out DIR, or pass the metrics file");
  }
  // a run directory's report is RUN/report.html; a metrics file's is named after it
  const std::string out =
      !a.out.empty() ? a.out
      : is_dir
          ? (dir / "report.html").string()
          : (fs::path(a.run).parent_path() / (fs::path(a.run).stem().string() + ".html")).string();
  MOET_CHECK(a.overwrite || !fs::exists(out), "'", out,
             "' already exists; refusing to overwrite it (pass --overwrite or choose --out)");
  const std::string html = report_html(read_metrics_records(metrics), info, metrics);
  const std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MOET_CHECK(f.good(), "cannot write '", tmp, "': ", std::strerror(errno));
    f << html;
    MOET_CHECK(f.good(), "cannot write '", tmp, "'");
  }
  std::error_code ec;
  fs::rename(tmp, out, ec);
  MOET_CHECK(!ec, "cannot write '", out, "': ", ec.message());
  std::printf("report: %s (%s)\n", out.c_str(), metrics.c_str());
}

}  // namespace moet::cli
