// The moet command on bad input: one clear line on stderr, a non-zero exit, nothing on disk
// lost or overwritten.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace {

const std::string kRoot = MOET_SOURCE_DIR;
const std::string kMoet = std::string(MOET_BINARY_DIR) + "/moet";

struct CliResult {
  int code;
  std::string err;
};

CliResult moet(const std::string& args) {
  std::string cmd = kMoet + " " + args + " 2>&1 >/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 512> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

void expect_one_line_error(const std::string& args, const std::string& needle) {
  CliResult r = moet(args);
  EXPECT_NE(r.code, 0) << args;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << " -> " << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
}

const std::string tiny = " --model " + kRoot + "/configs/tiny.json --micro-batch 1 --seq 8 ";

TEST(Cli, BadInputGetsOneClearLineAndNonZeroExit) {
  expect_one_line_error("train", "--model is required");
  expect_one_line_error("train --model /no/such.json", "cannot open model config");
  expect_one_line_error("train" + tiny + "--steps 0", "--steps must be positive");
  expect_one_line_error("train" + tiny + "--steps x", "--steps");
  expect_one_line_error("train" + tiny + "--precision fp8", "--precision 'fp8'");
  expect_one_line_error("train" + tiny + "--data /no/such.txt", "/no/such.txt");
  expect_one_line_error("train" + tiny + "--schedule linear", "--schedule 'linear'");
  expect_one_line_error("train --model " + kRoot + "/configs/tiny.json --seq 100000",
                        "max_position_embeddings");
  expect_one_line_error("train" + tiny + "--bogus-flag", "bogus");
  expect_one_line_error("fly", "fly");
}

TEST(Cli, ExistingMetricsFileIsNeverOverwritten) {
  std::string path = std::filesystem::temp_directory_path() / "moet_cli_metrics.jsonl";
  { std::ofstream(path) << "precious\n"; }
  expect_one_line_error("train" + tiny + "--data mock --steps 1 --metrics " + path, "exists");
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(content, "precious\n");
  std::filesystem::remove(path);
}

TEST(Cli, TrainsTinyOnMockData) {
  CliResult r = moet("train" + tiny + "--data mock --steps 2 --peak-tflops 0.1 --threads 1");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(Cli, WritesATraceAndNeverOverwritesOne) {
  std::string path = std::filesystem::temp_directory_path() / "moet_cli_trace.json";
  std::filesystem::remove(path);
  const std::string args = "train" + tiny + "--data mock --steps 2 --threads 1 --trace " + path;
  CliResult r = moet(args);
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(content.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(content.find("layer 0 forward"), std::string::npos);
  EXPECT_NE(content.find("layer 0 backward"), std::string::npos);
  EXPECT_NE(content.find("\"step\""), std::string::npos);
  expect_one_line_error(args, "already exists");
  std::filesystem::remove(path);
}

}  // namespace
