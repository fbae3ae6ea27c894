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
      "report",
      "write a self-contained HTML report (charts as inline SVG) of a training run, or of "
      "several runs compared on one page");
  c->add_option("runs", a.runs,
                "run directory (moet train --out: its run.json names the metrics file) or a "
                "metrics JSONL file; several: one page comparing them")
      ->required();
  c->add_option("--out", a.out,
                "the HTML file (default: RUN_DIR/report.html, or FILE.html beside a metrics "
                "file FILE.jsonl; comparing several runs: compare.html in the current "
                "directory)");
  c->add_flag("--overwrite", a.overwrite, "replace an existing --out file");
  return c;
}

namespace {

// What one argument names: the metrics file, the run.json beside it (null when none), and
// whether it was a run directory.
struct RunSource {
  std::string metrics;
  nlohmann::json info;
  bool is_dir = false;
};

RunSource resolve(const std::string& run) {
  MOET_CHECK(fs::exists(run), "'", run, "' does not exist");
  RunSource s;
  s.is_dir = fs::is_directory(run);
  const fs::path dir = s.is_dir ? fs::path(run) : fs::path(run).parent_path();
  const fs::path info_path = dir / "run.json";
  if (fs::is_regular_file(info_path)) {
    s.info = nlohmann::json::parse(read_text_file(info_path.string()), nullptr, false);
    MOET_CHECK(s.info.is_object(), "'", info_path.string(), "' is not a JSON object");
  }
  s.metrics = run;
  if (s.is_dir) {
    s.metrics = (dir / "metrics.jsonl").string();
    if (s.info.is_object() && s.info.value("metrics", std::string()) != "")
      s.metrics = s.info["metrics"].get<std::string>();
    MOET_CHECK(fs::is_regular_file(s.metrics), "no metrics file for run directory '", run,
               "' (looked for ", s.metrics,
               "): train with --metrics FILE --out DIR, or pass the metrics file");
  }
  return s;
}

// The page to `out` through out.tmp, refusing to replace a file without --overwrite.
void write_page(const std::string& out, const std::string& html) {
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
}

// A run's name in the legends: its directory's name, or the metrics file's (its directory's
// when the file is the usual metrics.jsonl); runs that would share a name are told apart by as
// many of their parent directories as it takes ("a/run", "b/run").
std::vector<std::string> run_names(const std::vector<std::string>& args,
                                   const std::vector<RunSource>& sources) {
  std::vector<std::vector<std::string>> parts;  // each run's path components, the name last
  for (size_t i = 0; i < args.size(); ++i) {
    fs::path p = fs::absolute(args[i]).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();  // "runs/a/" -> "runs/a"
    if (!sources[i].is_dir)
      p = p.stem() == "metrics" ? p.parent_path() : p.parent_path() / p.stem();
    std::vector<std::string> c;
    for (const fs::path& q : p)
      if (!q.empty() && q != "/") c.push_back(q.string());
    parts.push_back(c.empty() ? std::vector<std::string>{args[i]} : c);
  }
  auto name = [&](size_t i, size_t depth) {
    const std::vector<std::string>& c = parts[i];
    std::string n;
    for (size_t k = c.size() - std::min(depth, c.size()); k < c.size(); ++k)
      n += (n.empty() ? "" : "/") + c[k];
    return n;
  };
  std::vector<size_t> depth(args.size(), 1);
  for (bool again = true; again;) {  // every run of a shared name one directory longer
    std::vector<bool> longer(args.size(), false);
    for (size_t i = 0; i < args.size(); ++i)
      for (size_t j = 0; j < args.size(); ++j)
        if (i != j && name(i, depth[i]) == name(j, depth[j]) && depth[i] < parts[i].size())
          longer[i] = true;
    again = false;
    for (size_t i = 0; i < args.size(); ++i)
      if (longer[i]) ++depth[i], again = true;
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < args.size(); ++i) names.push_back(name(i, depth[i]));
  return names;
}

void run_compare(const ReportArgs& a) {
  std::vector<RunSource> sources;
  std::vector<ReportRun> runs;
  for (size_t i = 0; i < a.runs.size(); ++i) {
    sources.push_back(resolve(a.runs[i]));
    for (size_t j = 0; j < i; ++j)
      MOET_CHECK(
          fs::weakly_canonical(sources[j].metrics) != fs::weakly_canonical(sources[i].metrics), "'",
          a.runs[j], "' and '", a.runs[i], "' are the same run (", sources[i].metrics, ")");
  }
  const std::vector<std::string> names = run_names(a.runs, sources);
  for (size_t i = 0; i < a.runs.size(); ++i) {
    ReportRun r;
    r.name = names[i];
    r.source = sources[i].metrics;
    r.records = read_metrics_records(sources[i].metrics);
    MOET_CHECK(!r.records.empty(), "'", sources[i].metrics,
               "' holds no step record yet (a metrics JSONL of moet train): nothing to compare");
    r.run_info = sources[i].info;
    runs.push_back(std::move(r));
  }
  const std::string out = a.out.empty() ? std::string("compare.html") : a.out;
  MOET_CHECK(a.overwrite || !fs::exists(out), "'", out,
             "' already exists; refusing to overwrite it (pass --overwrite or choose --out)");
  write_page(out, compare_html(runs));
  std::printf("report: %s (%zu runs:", out.c_str(), runs.size());
  for (const ReportRun& r : runs) std::printf(" %s", r.name.c_str());
  std::printf(")\n");
}

}  // namespace

void run_report(const ReportArgs& a) {
  MOET_CHECK(!a.runs.empty(), "moet report needs a run directory or a metrics file");
  if (a.runs.size() > 1) return run_compare(a);
  const std::string& run = a.runs[0];
  const RunSource s = resolve(run);
  // a run directory's report is RUN/report.html; a metrics file's is named after it
  const fs::path dir = s.is_dir ? fs::path(run) : fs::path(run).parent_path();
  const std::string out =
      !a.out.empty() ? a.out
      : s.is_dir
          ? (dir / "report.html").string()
          : (fs::path(run).parent_path() / (fs::path(run).stem().string() + ".html")).string();
  MOET_CHECK(a.overwrite || !fs::exists(out), "'", out,
             "' already exists; refusing to overwrite it (pass --overwrite or choose --out)");
  write_page(out, report_html(read_metrics_records(s.metrics), s.info, s.metrics));
  std::printf("report: %s (%s)\n", out.c_str(), s.metrics.c_str());
}

}  // namespace moet::cli
