// TensorBoard event encoding (TFRecord framing, masked CRC-32C, protobuf Events) against bytes
// worked out by hand, the expert-load and expert-bias histograms, the per-layer balance loss,
// and `moet report`'s reader, page (elapsed over resumes, resolved precision, data changes,
// heatmap scale) and comparison of several runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "error_of.h"
#include "metrics/report.h"
#include "metrics/tensorboard.h"
#include "train/run_info.h"

namespace fs = std::filesystem;
using namespace moet;

namespace {

std::string num_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(char(x));
  return s;
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("moet_tb_" + name + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(TensorBoard, MaskedCrcOfKnownBytes) {
  // CRC-32C("123456789") = 0xe3069283 (the standard check value), masked as TFRecord does.
  EXPECT_EQ(tensorboard::masked_crc32c("123456789", 9), 0xc78ab0e5u);
  EXPECT_EQ(tensorboard::masked_crc32c("", 0), 0xa282ead8u);
}

TEST(TensorBoard, RecordFraming) {
  const std::string rec = tensorboard::frame_record("");
  // u64 length 0, masked CRC of its 8 zero bytes (0x07980329), no data, masked CRC of nothing.
  EXPECT_EQ(rec, bytes({0, 0, 0, 0, 0, 0, 0, 0, 0x29, 0x03, 0x98, 0x07, 0xd8, 0xea, 0x82, 0xa2}));
  const std::string r2 = tensorboard::frame_record("123456789");
  ASSERT_EQ(r2.size(), 8u + 4 + 9 + 4);
  EXPECT_EQ(r2.substr(0, 8), bytes({9, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(r2.substr(12, 9), "123456789");
  EXPECT_EQ(r2.substr(21), bytes({0xe5, 0xb0, 0x8a, 0xc7}));
}

TEST(TensorBoard, FileVersionEvent) {
  // wall_time = 1 (fixed64 1.5), file_version = 3 ("brain.Event:2", 13 bytes)
  EXPECT_EQ(tensorboard::file_version_event(1.5),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x1a, 13}) + "brain.Event:2");
}

TEST(TensorBoard, ScalarEvent) {
  // Event{wall_time 2.0, step 3, summary{value{tag "a", simple_value 1.0f}}}
  EXPECT_EQ(tensorboard::scalars_event(2.0, 3, {{"a", 1.0f}}),
            bytes({0x09, 0,    0, 0,    0, 0,   0,    0, 0x40, 0x10, 3,   0x2a,
                   10,   0x0a, 8, 0x0a, 1, 'a', 0x15, 0, 0,    0x80, 0x3f}));
  // a step over 127 takes a two-byte varint
  const std::string e = tensorboard::scalars_event(0, 300, {});
  EXPECT_EQ(e.substr(9), bytes({0x10, 0xac, 0x02, 0x2a, 0}));
}

TEST(TensorBoard, SessionStartEvent) {
  // Event{wall_time 2.0, step 5, session_log = 7 {status = 1: START}}
  EXPECT_EQ(tensorboard::session_start_event(2.0, 5),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x10, 5, 0x3a, 2, 0x08, 1}));
}

TEST(TensorBoard, HistogramEvent) {
  const Histogram h = expert_load_histogram({3, 0, 5});
  EXPECT_EQ(h.num, 8);
  EXPECT_EQ(h.sum, 10);  // 3 x 0 + 5 x 2
  EXPECT_EQ(h.sum_squares, 20);
  EXPECT_EQ(h.min, 0);
  EXPECT_EQ(h.max, 2);
  EXPECT_EQ(h.bucket, (std::vector<double>{3, 0, 5}));
  EXPECT_EQ(h.bucket_limit, (std::vector<double>{0.5, 1.5, 2.5}));
  const std::string e = tensorboard::histogram_event(0, 1, "h", h);
  // ... summary{value{tag "h", histo = 5 {5 doubles (45 bytes), 2 packed fields of 3 doubles}}}
  const std::string histo_len = bytes({45 + 2 * 26});
  EXPECT_NE(e.find(bytes({0x0a, 1, 'h', 0x2a}) + histo_len), std::string::npos);
  EXPECT_NE(e.find(bytes({0x3a, 24, 0, 0, 0, 0, 0, 0, 0x08, 0x40})), std::string::npos);  // 3.0
}

TEST(TensorBoard, ScalarsMirrorTheMetrics) {
  StepMetrics m;
  m.step = 4;
  m.lm_loss = 5.123456789;
  m.lr = 3e-4;
  m.tokens = 4096;
  m.expert_load_layers = {1, 3};
  m.expert_load = {{2, 6}, {0, 0}};
  const auto s = tensorboard_scalars(m);
  auto find = [&](const std::string& tag) -> const float* {
    for (const auto& [t, v] : s)
      if (t == tag) return &v;
    return nullptr;
  };
  ASSERT_TRUE(find("lm loss"));
  EXPECT_EQ(*find("lm loss"), float(5.123456789));
  EXPECT_EQ(*find("learning-rate"), float(3e-4));
  EXPECT_EQ(*find("consumed-tokens"), 4096.0f);
  EXPECT_FALSE(find("grad-norm"));  // not measured: left out
  ASSERT_TRUE(find("moe/expert_load_imbalance_layer_1"));
  EXPECT_EQ(*find("moe/expert_load_imbalance_layer_1"), 1.5f);
  EXPECT_FALSE(find("moe/expert_load_imbalance_layer_3"));  // no tokens: no ratio
  const auto j = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_EQ(j["expert_load"], nlohmann::json::parse("[[2,6],[0,0]]"));
  EXPECT_EQ(j["expert_load_layers"], nlohmann::json::parse("[1,3]"));
  EXPECT_EQ(j["expert_load_imbalance"][0].get<double>(), 1.5);
  EXPECT_TRUE(j["expert_load_imbalance"][1].is_null());
}

TEST(TensorBoard, WriterMakesOneEventFile) {
  const fs::path d = temp_dir("writer") / "tb";
  {
    TensorBoardWriter w(d.string());
    StepMetrics m;
    m.step = 1;
    m.loss = 2;
    w.write(m);
  }
  int files = 0;
  for (const auto& f : fs::directory_iterator(d)) {
    ++files;
    EXPECT_NE(f.path().filename().string().find("events.out.tfevents."), std::string::npos);
    std::ifstream in(f.path(), std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string first = tensorboard::file_version_event(0);  // the wall time differs
    ASSERT_GT(all.size(), 12 + first.size() + 4);
    EXPECT_EQ(all.substr(12 + 9, first.size() - 9), first.substr(9));
  }
  EXPECT_EQ(files, 1);
  fs::remove_all(d.parent_path());
}

TEST(TensorBoard, RefusesAFile) {
  const fs::path d = temp_dir("file");
  const fs::path f = d / "not_a_dir";
  std::ofstream(f) << "keep me";
  EXPECT_NE(test::error_of([&] { TensorBoardWriter w(f.string()); }).find("not a directory"),
            std::string::npos);
  std::ifstream in(f);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "keep me");
  fs::remove_all(d);
}

TEST(Report, ReadsWhatIsThereAndDrawsIt) {
  const fs::path d = temp_dir("report");
  const fs::path m = d / "metrics.jsonl";
  std::ofstream(m) << "{\"step\":1,\"loss\":5,\"lm_loss\":5,\"lr\":0.001,\"tokens\":64,"
                      "\"expert_load_layers\":[1],\"expert_load\":[[1,3]]}\n"
                      "{\"step\":2,\"loss\":4,\"lm_loss\":4,\"lr\":0.001,\"tokens\":128,"
                      "\"eval_loss\":4.5,\"expert_load_layers\":[1],\"expert_load\":[[2,2]]}\n"
                      "{\"step\":3,\"lo";  // a line still being written
  const auto records = read_metrics_records(m.string());
  ASSERT_EQ(records.size(), 2u);
  const std::string html = report_html(records, nlohmann::json{{"command", "moet train <x>"}}, "r");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("heatmap"), std::string::npos);
  EXPECT_NE(html.find("moet train &lt;x&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("4.5000 (step 2)"), std::string::npos);
  fs::remove_all(d);
}

// Chart ticks sit at round numbers with short labels (not "1.101e+04", "10.75" on a 0.1 grid or
// a clipped "1.536e+"), on every axis of a page drawn from a realistic run.
TEST(Report, TicksAreRoundNumbersWithShortLabels) {
  AxisTicks t = axis_ticks(0, 11010);
  EXPECT_EQ(t.step, 2500);
  ASSERT_EQ(t.values.size(), 5u);
  EXPECT_EQ(tick_label(t.values[1], t.step), "2.5k");
  EXPECT_EQ(tick_label(t.values[4], t.step), "10k");
  t = axis_ticks(10.61, 10.93);
  EXPECT_DOUBLE_EQ(t.step, 0.1);
  EXPECT_EQ(tick_label(t.values[0], t.step), "10.7");
  EXPECT_EQ(tick_label(1.5e6, 5e5), "1.5M");
  EXPECT_EQ(tick_label(150000, 50000), "150k");
  EXPECT_EQ(tick_label(0.25, 0.25), "0.25");
  EXPECT_EQ(tick_label(2.5e-5, 5e-6), "2.5e-05");
  for (double lo : {-3.7, 0.0, 0.013, 10.6, 999.0, 1536.0})
    for (double span : {0.01, 0.37, 5.0, 1234.0, 2.5e6}) {
      const AxisTicks a = axis_ticks(lo, lo + span);
      ASSERT_GE(a.values.size(), 2u) << lo << " " << span;
      ASSERT_LE(a.values.size(), 6u) << lo << " " << span;
      const double m = a.step / std::pow(10.0, std::floor(std::log10(a.step) + 1e-12));
      EXPECT_TRUE(std::fabs(m - 1) < 1e-9 || std::fabs(m - 2) < 1e-9 || std::fabs(m - 2.5) < 1e-9 ||
                  std::fabs(m - 5) < 1e-9)
          << a.step;
      for (size_t i = 0; i < a.values.size(); ++i) {
        EXPECT_GE(a.values[i], lo - 1e-9 * span);
        EXPECT_LE(a.values[i], lo + span + 1e-9 * span);
        if (i) {
          EXPECT_NE(tick_label(a.values[i], a.step), tick_label(a.values[i - 1], a.step));
        }
      }
    }

  std::vector<nlohmann::json> records;
  for (int s = 1; s <= 40; ++s)
    records.push_back({{"step", s},
                       {"loss", 10.9 - 0.008 * s},
                       {"lm_loss", 10.9 - 0.008 * s},
                       {"tokens", 11010 * s},
                       {"lr", 3e-4 * s / 40},
                       {"tokens_per_s", 1536.0 + s},
                       {"mfu", 0.1075},
                       {"balance_loss", 1.0 + 0.001 * s},
                       {"z_loss", 22.0 + 0.05 * s}});
  const nlohmann::json run = {
      {"command", "moet train"},
      {"options", {{"optim", {{"balance_alpha", 1e-4}, {"z_loss_coef", 0.0}}}}}};
  const std::string html = report_html(records, run, "r");
  const std::regex tick("class=\"[xy]tick\">([^<]*)<");
  const std::regex round_label("-?[0-9]+(\\.[0-9]+)?([kMGT]|e-[0-9]+)?%?");
  int n = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), tick); it != std::sregex_iterator();
       ++it, ++n) {
    const std::string label = (*it)[1];
    if (label.rfind("expert", 0) == 0 || std::all_of(label.begin(), label.end(), ::isdigit))
      continue;
    EXPECT_TRUE(std::regex_match(label, round_label)) << label;
    EXPECT_LE(label.size(), 7u) << label;
  }
  EXPECT_GT(n, 20);
  // the z-loss, logged unweighted, on its own axis and saying it is not in the loss
  EXPECT_NE(html.find("router z-loss, unweighted (--z-loss 0: not in the loss)"),
            std::string::npos);
  EXPECT_NE(html.find("sequence-wise balance loss, unweighted (enters the loss x 0.0001)"),
            std::string::npos);
  EXPECT_NE(report_html(records, nlohmann::json(), "r").find("weight not recorded"),
            std::string::npos);
}

TEST(RunSummary, NamesTheFiles) {
  RunSummary s;
  s.steps = 10;
  s.tokens = 2560;
  s.seconds = 2;
  s.best_eval_loss = 3.25;
  s.best_eval_step = 10;
  s.metrics_path = "m.jsonl";
  s.tensorboard_dir = "tb";
  s.run_dir = "run";
  const std::string t = format_run_summary(s);
  EXPECT_NE(t.find("2560 tokens"), std::string::npos);
  EXPECT_NE(t.find("1280 tokens/s"), std::string::npos);
  EXPECT_NE(t.find("best held-out loss 3.2500 (step 10)"), std::string::npos);
  EXPECT_NE(t.find("tensorboard --logdir tb"), std::string::npos);
  EXPECT_NE(t.find("moet report run"), std::string::npos);
}

// Routing you can study: each MoE layer's balance loss every step and its expert biases on
// --log-expert-load steps, in the JSONL and in TensorBoard (a scalar per layer, a histogram of
// the biases per layer).
TEST(TensorBoard, BalancePerLayerAndExpertBias) {
  StepMetrics m;
  m.step = 2;
  m.balance_loss = 3.0;
  m.balance_loss_layers = {1, 2, 3};
  m.balance_loss_per_layer = {1.25, 0.75, 1.0};
  m.expert_load_layers = {1, 2, 3};
  m.expert_load = {{2, 6}, {4, 4}, {1, 7}};
  m.expert_bias = {{0.01f, -0.01f}, {0.0f, 0.0f}, {0.03f, -0.02f}};
  const auto j = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_EQ(j["balance_loss_layers"], nlohmann::json::parse("[1,2,3]"));
  EXPECT_EQ(j["balance_loss_per_layer"], nlohmann::json::parse("[1.25,0.75,1.0]"));
  // each bias the shortest decimal of its float32 ("0.03", not 0.029999999329447746)
  EXPECT_EQ(j["expert_bias"].dump(), "[[0.01,-0.01],[0.0,0.0],[0.03,-0.02]]");
  EXPECT_EQ(float(j["expert_bias"][2][0].get<double>()), 0.03f);
  const auto s = tensorboard_scalars(m);
  auto find = [&](const std::string& tag) -> const float* {
    for (const auto& [t, v] : s)
      if (t == tag) return &v;
    return nullptr;
  };
  ASSERT_TRUE(find("moe/balance_loss_layer_1"));
  EXPECT_EQ(*find("moe/balance_loss_layer_1"), 1.25f);
  ASSERT_TRUE(find("moe/balance_loss_layer_3"));
  EXPECT_EQ(*find("moe/balance_loss_layer_3"), 1.0f);
  // the biases as a distribution of values: a bucket per distinct value, in order
  const Histogram h = expert_bias_histogram({0.02f, -0.01f, 0.02f, 0.0f});
  EXPECT_EQ(h.num, 4);
  EXPECT_EQ(h.min, double(-0.01f));
  EXPECT_EQ(h.max, double(0.02f));
  EXPECT_EQ(h.bucket, (std::vector<double>{1, 1, 2}));
  ASSERT_EQ(h.bucket_limit.size(), 3u);
  EXPECT_EQ(h.bucket_limit[0], (double(-0.01f) + 0.0) / 2);
  EXPECT_EQ(h.bucket_limit[1], (0.0 + double(0.02f)) / 2);
  EXPECT_EQ(h.bucket_limit[2], double(0.02f));
  EXPECT_DOUBLE_EQ(h.sum, 2 * double(0.02f) + double(-0.01f));
  // the writer adds a bias histogram per layer beside the load histograms
  const fs::path d = temp_dir("bias") / "tb";
  {
    TensorBoardWriter w(d.string());
    w.write(m);
  }
  for (const auto& f : fs::directory_iterator(d)) {
    std::ifstream in(f.path(), std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* tag : {"moe/expert_bias_layer_1", "moe/expert_bias_layer_3",
                            "moe/expert_load_layer_2", "moe/balance_loss_layer_2"})
      EXPECT_NE(all.find(tag), std::string::npos) << tag;
  }
  fs::remove_all(d.parent_path());
}

// After a resume the metrics file holds every start's steps, each start's elapsed_s counting
// from its own first step: the report's elapsed time is the sum over the starts, not the last.
TEST(Report, ElapsedCoversEveryStart) {
  std::vector<nlohmann::json> records;
  const double elapsed[] = {10, 20, 30, 40, 5, 12};  // a resume after step 4
  for (int s = 1; s <= 6; ++s)
    records.push_back(
        {{"step", s}, {"loss", 5}, {"tokens", 64 * s}, {"elapsed_s", elapsed[s - 1]}});
  RunElapsed e = run_elapsed(records, nlohmann::json());
  EXPECT_EQ(e.starts, 2);
  EXPECT_DOUBLE_EQ(e.seconds, 52);
  EXPECT_DOUBLE_EQ(e.last_start_s, 12);
  const std::string html = report_html(records, nlohmann::json(), "r");
  EXPECT_NE(html.find("<th>elapsed</th><td>52.0 s (0:00:52) over 2 starts"), std::string::npos)
      << html.substr(0, 2000);
  // a resumed start whose first step took longer than the whole start before it: run.json's
  // segments say where it began
  records[4]["elapsed_s"] = 45.0, records[5]["elapsed_s"] = 50.0;
  const nlohmann::json run = {{"segments", {{{"start_step", 0}}, {{"start_step", 4}}}}};
  e = run_elapsed(records, run);
  EXPECT_EQ(e.starts, 2);
  EXPECT_DOUBLE_EQ(e.seconds, 90);
  EXPECT_DOUBLE_EQ(run_elapsed(records, nlohmann::json()).seconds, 50);  // unknowable without
  EXPECT_TRUE(std::isnan(run_elapsed({{{"step", 1}}}, nlohmann::json()).seconds));
}

// run.json's options say "auto"; the report shows what it resolved to.
TEST(Report, ShowsTheResolvedPrecision) {
  const std::vector<nlohmann::json> records = {{{"step", 1}, {"loss", 5}, {"tokens", 64}}};
  nlohmann::json run = {{"command", "moet train"},
                        {"precision", "bf16"},
                        {"options", {{"precision", {{"precision", "auto"}, {"bf16_layers", 0}}}}}};
  EXPECT_EQ(precision_shown(run), "auto → bf16");
  const std::string html = report_html(records, run, "r");
  EXPECT_NE(html.find("<th>precision</th><td>auto → bf16</td>"), std::string::npos);
  EXPECT_NE(html.find("&quot;precision&quot;: &quot;auto → bf16&quot;"), std::string::npos);
  EXPECT_EQ(html.find("&quot;precision&quot;: &quot;auto&quot;"), std::string::npos);
  run["options"]["precision"]["precision"] = "bf16";
  EXPECT_EQ(precision_shown(run), "bf16");
  run.erase("precision");  // a run.json from before the resolved recipe was recorded
  EXPECT_EQ(precision_shown(run), "bf16");
}

// A resume that changed --data is marked on the loss chart and every start is listed.
TEST(Report, MarksDataChangesAndListsTheStarts) {
  std::vector<nlohmann::json> records;
  for (int s = 1; s <= 6; ++s)
    records.push_back({{"step", s},
                       {"loss", 5.0 - 0.1 * s},
                       {"lm_loss", 5.0 - 0.1 * s},
                       {"tokens", 64 * s},
                       {"elapsed_s", 1.0 * s}});
  const nlohmann::json run = {{"command", "moet train --data b.txt --resume auto"},
                              {"segments",
                               {{{"start_step", 0},
                                 {"command", "moet train --data mock"},
                                 {"data", "mock"},
                                 {"split", "95,5"},
                                 {"precision", "fp32"}},
                                {{"start_step", 2},
                                 {"command", "moet train --resume auto"},
                                 {"data", "mock"},
                                 {"split", "95,5"},
                                 {"precision", "fp32"}},
                                {{"start_step", 4},
                                 {"command", "moet train --data b.txt --resume auto"},
                                 {"data", "b.txt"},
                                 {"split", "95,5"},
                                 {"precision", "fp32"},
                                 {"data_changed_from", {{"data", "mock"}, {"split", "95,5"}}}}}}};
  const auto changes = data_changes(records, run);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].step, 4);
  EXPECT_EQ(changes[0].tokens, 256);
  EXPECT_EQ(changes[0].what, "data changed: mock → b.txt");
  const std::string html = report_html(records, run, "r");
  EXPECT_EQ(std::count(html.begin(), html.end(), '\n') > 0, true);
  size_t markers = 0;
  for (size_t at = html.find("marker-line"); at != std::string::npos;
       at = html.find("marker-line", at + 1))
    ++markers;
  EXPECT_EQ(markers, 1u);
  EXPECT_NE(html.find(">data changed</text>"), std::string::npos);
  EXPECT_NE(html.find("<th>starts</th><td>3 (resumed at step 2, 4); at step 4 data changed: "
                      "mock → b.txt</td>"),
            std::string::npos);
  size_t rows = 0;
  for (size_t at = html.find("<tr class=\"segment\">"); at != std::string::npos;
       at = html.find("<tr class=\"segment\">", at + 1))
    ++rows;
  EXPECT_EQ(rows, 3u);
  EXPECT_NE(html.find("<b>data changed</b> (was mock, split 95,5)"), std::string::npos);
}

// The expert-load heatmaps have a colour scale with its values and name the MTP module's layer.
TEST(Report, HeatmapsHaveAScaleAndNameTheMtpLayer) {
  std::vector<nlohmann::json> records;
  for (int s = 1; s <= 2; ++s)
    records.push_back({{"step", s},
                       {"loss", 5},
                       {"tokens", 64 * s},
                       {"expert_load_layers", {1, 2}},
                       {"expert_load", {{1, 3}, {2, 2}}},
                       {"balance_loss_layers", {1, 2}},
                       {"balance_loss_per_layer", {1.1, 0.9}}});
  const nlohmann::json run = {{"command", "moet train"}, {"model", {{"num_hidden_layers", 2}}}};
  const std::string html = report_html(records, run, "r");
  EXPECT_NE(html.find(">layer 1: tokens per expert / mean (max 1.50)<"), std::string::npos);
  EXPECT_NE(html.find(">layer 2 (MTP module 1): tokens per expert / mean"), std::string::npos);
  size_t legends = 0;
  for (size_t at = html.find("class=\"heat-legend\""); at != std::string::npos;
       at = html.find("class=\"heat-legend\"", at + 1))
    ++legends;
  EXPECT_EQ(legends, 2u);
  EXPECT_NE(html.find("class=\"xtick\">1 (mean)</text>"), std::string::npos);
  EXPECT_NE(html.find("class=\"xtick\">1.50</text>"), std::string::npos);
  // the balance loss per layer, a line each
  EXPECT_NE(html.find("sequence-wise balance loss per MoE layer"), std::string::npos);
  EXPECT_NE(html.find(">layer 2 (MTP module 1)</text>"), std::string::npos);
}

// `moet report RUN_A RUN_B`: one page overlaying the runs, their final values and the options
// that differ.
TEST(Report, ComparesRuns) {
  auto run = [](const std::string& name, double lr, double loss0, const std::string& precision) {
    ReportRun r;
    r.name = name;
    r.source = name + "/metrics.jsonl";
    for (int s = 1; s <= 4; ++s)
      r.records.push_back({{"step", s},
                           {"total_steps", 4},
                           {"loss", loss0 - 0.1 * s},
                           {"lm_loss", loss0 - 0.1 * s},
                           {"tokens", 128 * s},
                           {"tokens_per_s", 1000.0 * s},
                           {"step_time_s", 0.128 / s},
                           {"mfu", 0.01 * s},
                           {"grad_norm", 1.0},
                           {"max_expert_load", 1.5},
                           {"elapsed_s", 0.5 * s}});
    r.records[1]["eval_loss"] = loss0;
    r.records[3]["eval_loss"] = loss0 - 0.05;
    r.run_info = {{"command", "moet train --out " + name},
                  {"precision", precision},
                  {"model", {{"num_hidden_layers", 2}}},
                  {"options",
                   {{"optim", {{"lr", lr}, {"steps", 4}}},
                    {"precision", {{"precision", "auto"}}},
                    {"checkpoint", {{"out", name}}}}}};
    return r;
  };
  std::vector<ReportRun> runs = {run("baseline", 3e-4, 5.0, "bf16"),
                                 run("higher-lr", 1e-3, 4.5, "bf16")};
  runs[1].run_info["segments"] = {{{"start_step", 0}, {"data", "mock"}, {"split", "95,5"}},
                                  {{"start_step", 2},
                                   {"data", "b"},
                                   {"split", "95,5"},
                                   {"data_changed_from", {{"data", "mock"}, {"split", "95,5"}}}}};
  const std::string html = compare_html(runs);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("moet report: 2 runs"), std::string::npos);
  // the legend names each run, in every chart
  size_t legends = 0;
  for (size_t at = html.find("class=\"legend\">higher-lr<"); at != std::string::npos;
       at = html.find("class=\"legend\">higher-lr<", at + 1))
    ++legends;
  EXPECT_EQ(legends, 6u);
  for (const char* title :
       {">LM loss (training)<", ">held-out LM loss<", ">tokens/s (global)<", ">MFU<",
        ">gradient norm (before clipping)<", ">worst MoE layer: max / mean expert load<"})
    EXPECT_NE(html.find(title), std::string::npos) << title;
  // final values: the better run's in bold; tokens/s at the mean step time
  EXPECT_NE(html.find("<th>final LM loss</th><td class=\"num\">4.6000</td><td class=\"num\"><b>"
                      "4.1000</b></td>"),
            std::string::npos);
  EXPECT_NE(html.find("<b>4.4500 (step 4)</b>"), std::string::npos);
  // 4 steps of 128 tokens over 0.128 (1 + 1/2 + 1/3 + 1/4) s
  EXPECT_NE(html.find("<th>mean tokens/s</th><td class=\"num\">" +
                      num_text(512 / (0.128 * (1 + 0.5 + 1.0 / 3 + 0.25))) + "</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<th>precision</th><td class=\"num\">auto → bf16</td>"), std::string::npos);
  // the options that differ, and only those (output paths aside)
  EXPECT_NE(html.find("<th>optim.lr</th><td class=\"num\">0.0003</td><td class=\"num\">0.001</td>"),
            std::string::npos);
  EXPECT_EQ(html.find("<th>optim.steps</th>"), std::string::npos);
  EXPECT_EQ(html.find("<th>checkpoint.out</th>"), std::string::npos);
  // the second run's data change, marked in its colour on the loss charts
  EXPECT_NE(html.find(">data changed (higher-lr)</text>"), std::string::npos);
  // the same options everywhere: said so
  runs[1].run_info["options"]["optim"]["lr"] = 3e-4;
  EXPECT_NE(compare_html(runs).find("options and model configs are the same"), std::string::npos);
}
