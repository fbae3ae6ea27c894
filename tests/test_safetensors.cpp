// safetensors reader/writer: round trips, conversions, errors, atomic replacement.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "error_of.h"

namespace fs = std::filesystem;
using namespace moet;

namespace {

using test::error_of;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("moet_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file from a raw header and data bytes.
std::string make_raw(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  return s + header + data;
}

uint16_t bf16_bits(float f) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16); }

}  // namespace

TEST_F(SafetensorsTest, RoundTripAllDtypes) {
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.0f};
  const std::vector<double> f64 = {1.0 / 3.0, -2.5, 1e10};
  const std::vector<uint16_t> bf16 = {bf16_bits(1.0f), bf16_bits(-0.5f), bf16_bits(256.0f),
                                      bf16_bits(3.140625f)};
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x0001, 0x7BFF};  // 1, -2, 2^-24, 65504
  const std::vector<int32_t> i32 = {0, -1, 2147483647, -2147483647 - 1};
  const std::vector<int64_t> i64 = {5, -6, 70000, 256};
  const std::vector<uint8_t> u8 = {0, 255, 7};

  SafetensorsWriter w;
  w.add("a.f32", StDType::F32, {2, 3}, f32.data());
  w.add("b.f64", StDType::F64, {3}, f64.data());
  w.add("c.bf16", StDType::BF16, {2, 2}, bf16.data());
  w.add("d.f16", StDType::F16, {4}, f16.data());
  w.add("e.i32", StDType::I32, {4}, i32.data());
  w.add("f.i64", StDType::I64, {2, 1, 2}, i64.data());
  w.add("g.u8", StDType::U8, {3}, u8.data());
  w.add("h.empty", StDType::F32, {0, 4}, nullptr);
  w.add("i.scalar", StDType::F32, {}, f32.data());
  w.set_metadata("format", "pt");
  w.set_metadata("step", "42");
  const std::string path = file("all.safetensors");
  w.write(path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  SafetensorsReader r(path);
  EXPECT_EQ(r.size(), 9u);
  EXPECT_EQ(r.names().front(), "a.f32");
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.metadata().at("step"), "42");
  EXPECT_EQ(r.info("a.f32").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.info("f.i64").dtype, StDType::I64);
  EXPECT_EQ(r.info("i.scalar").shape.size(), 0u);
  EXPECT_EQ(r.info("i.scalar").numel(), 1);

  EXPECT_EQ(r.read_f32("a.f32"), f32);
  EXPECT_EQ(std::memcmp(r.raw("a.f32"), f32.data(), f32.size() * 4), 0);
  std::vector<double> d(3);
  r.read_f64("b.f64", d.data(), 3);
  EXPECT_EQ(d, f64);
  EXPECT_EQ(r.read_f32("c.bf16"), (std::vector<float>{1.0f, -0.5f, 256.0f, 3.140625f}));
  EXPECT_EQ(r.read_f32("d.f16"),
            (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f}));
  EXPECT_EQ(r.read_i32("e.i32"), i32);
  EXPECT_EQ(r.read_i32("f.i64"), (std::vector<int32_t>{5, -6, 70000, 256}));
  EXPECT_EQ(r.read_i32("g.u8"), (std::vector<int32_t>{0, 255, 7}));
  EXPECT_EQ(r.info("h.empty").numel(), 0);
  EXPECT_TRUE(r.read_f32("h.empty").empty());
  EXPECT_EQ(r.read_f32("i.scalar"), std::vector<float>{1.5f});
  // F64 narrowed to float.
  EXPECT_FLOAT_EQ(r.read_f32("b.f64")[0], 1.0f / 3.0f);
}

TEST_F(SafetensorsTest, LayoutIsContiguousAlignedAndSortedBySize) {
  const std::vector<uint16_t> a = {1, 2, 3};  // 6 bytes: would misalign what follows
  const std::vector<double> b = {1, 2};
  const std::vector<float> c = {3};
  write_safetensors(file("x.safetensors"), {{"a", StDType::BF16, {3}, a.data()},
                                            {"b", StDType::F64, {2}, b.data()},
                                            {"c", StDType::F32, {1}, c.data()}});
  const std::string bytes = slurp(file("x.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({0, 16}));
  EXPECT_EQ(header["c"]["data_offsets"], nlohmann::json({16, 20}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({20, 26}));
  EXPECT_EQ(bytes.size(), 8 + n + 26);
  EXPECT_FALSE(header.contains("__metadata__"));
}

TEST_F(SafetensorsTest, ReadIntoTensorChecksShapeAndConverts) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const std::vector<int64_t> tok = {1, 256, 3};
  write_safetensors(file("t.safetensors"), {{"w", StDType::F32, {2, 3}, w.data()},
                                            {"tok", StDType::I64, {1, 3}, tok.data()}});
  SafetensorsReader r(file("t.safetensors"));

  std::vector<float> buf(6);
  r.read_into("w", Tensor(buf.data(), DType::F32, {2, 3}));
  EXPECT_EQ(buf, w);
  std::vector<double> buf64(6);
  r.read_into("w", Tensor(buf64.data(), DType::F64, {2, 3}));
  EXPECT_EQ(buf64[5], 6.0);
  std::vector<uint16_t> bf(6);
  r.read_into("w", Tensor(bf.data(), DType::BF16, {2, 3}));
  EXPECT_EQ(bf[2], bf16_bits(3.0f));
  std::vector<int32_t> ti(3);
  r.read_into("tok", Tensor(ti.data(), DType::I32, {1, 3}));
  EXPECT_EQ(ti, (std::vector<int32_t>{1, 256, 3}));

  const std::string e = error_of([&] { r.read_into("w", Tensor(buf.data(), DType::F32, {3, 2})); });
  EXPECT_NE(e.find("expected shape [3, 2], found [2, 3]"), std::string::npos) << e;
  const std::string e2 = error_of([&] { r.read_into("w", Tensor(buf.data(), DType::F32, {6})); });
  EXPECT_NE(e2.find("expected shape [6], found [2, 3]"), std::string::npos) << e2;
  const std::string e3 = error_of([&] { r.read_into("w", Tensor(ti.data(), DType::I32, {2, 3})); });
  EXPECT_NE(e3.find("cannot read it as int32"), std::string::npos) << e3;
  const std::string e4 = error_of([&] { r.read_f32("tok", buf.data(), 3); });
  EXPECT_NE(e4.find("cannot read it as floating point"), std::string::npos) << e4;
  const std::string e5 = error_of([&] { r.read_f32("w", buf.data(), 5); });
  EXPECT_NE(e5.find("expected 5 elements, found 6"), std::string::npos) << e5;

  // The Tensor writer helper keeps dtype and shape.
  SafetensorsWriter wr;
  wr.add("x", Tensor(const_cast<float*>(w.data()), DType::F32, {3, 2}));
  wr.write(file("u.safetensors"));
  SafetensorsReader r2(file("u.safetensors"));
  EXPECT_EQ(r2.info("x").shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(r2.info("x").dtype, StDType::F32);
}

TEST_F(SafetensorsTest, I64OutOfInt32RangeIsAnError) {
  const std::vector<int64_t> big = {1, int64_t{1} << 40};
  write_safetensors(file("big.safetensors"), {{"big", StDType::I64, {2}, big.data()}});
  SafetensorsReader r(file("big.safetensors"));
  const std::string e = error_of([&] { r.read_i32("big"); });
  EXPECT_NE(e.find("does not fit in int32"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, MissingNameIsAClearError) {
  const std::vector<float> v = {1};
  write_safetensors(file("m.safetensors"), {{"present", StDType::F32, {1}, v.data()}});
  SafetensorsReader r(file("m.safetensors"));
  EXPECT_TRUE(r.contains("present"));
  EXPECT_FALSE(r.contains("absent"));
  const std::string e = error_of([&] { r.info("absent"); });
  EXPECT_NE(e.find("tensor 'absent' not found"), std::string::npos) << e;
  EXPECT_NE(e.find("m.safetensors"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, MissingTruncatedAndCorruptFilesAreErrors) {
  auto expect_error = [&](const std::string& bytes, const std::string& fragment) {
    const std::string p = file("bad.safetensors");
    spit(p, bytes);
    const std::string e = error_of([&] { SafetensorsReader r(p); });
    EXPECT_NE(e.find(fragment), std::string::npos) << "got: " << e;
  };
  EXPECT_NE(error_of([&] { SafetensorsReader r(file("nope.safetensors")); }).find("cannot open"),
            std::string::npos);
  expect_error("", "truncated");
  expect_error("abc", "truncated");
  // Header length beyond the end of the file.
  expect_error(make_raw("{}", "").substr(0, 9), "truncated");
  expect_error(make_raw("{not json", ""), "corrupt JSON header");
  expect_error(make_raw("[1, 2]", ""), "expected a JSON object");
  expect_error(make_raw(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "1234"),
               "truncated");
  expect_error(
      make_raw(R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", "12345678"),
      "needs 12");
  expect_error(make_raw(R"({"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}})", "1234"),
               "unsupported safetensors dtype 'Q7'");
  expect_error(
      make_raw(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "1234"),
      "non-negative");
  expect_error(make_raw(R"({"x": {"dtype": "F32", "shape": [1]}})", "1234"), "data_offsets");
  expect_error(make_raw(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                        R"( "y": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
                        "12345678"),
               "overlap");
  expect_error(make_raw(R"({"__metadata__": {"a": 1}})", ""), "must be a string");

  // A valid file cut short loses its tail: reported as truncated.
  const std::vector<float> v(16, 1.0f);
  write_safetensors(file("ok.safetensors"), {{"v", StDType::F32, {16}, v.data()}});
  const std::string good = slurp(file("ok.safetensors"));
  expect_error(good.substr(0, good.size() - 1), "truncated");
  EXPECT_NO_THROW(SafetensorsReader r(file("ok.safetensors")));
}

TEST_F(SafetensorsTest, FailedWriteLeavesExistingFileIntact) {
  const std::vector<float> old_v = {1, 2, 3};
  const std::string path = file("ckpt.safetensors");
  write_safetensors(path, {{"v", StDType::F32, {3}, old_v.data()}}, {{"gen", "old"}});
  const std::string before = slurp(path);
  const std::vector<float> new_v = {9, 9, 9, 9};

  // Bad input: rejected before anything is written.
  EXPECT_THROW(write_safetensors(path, {{"v", StDType::F32, {4}, new_v.data()},
                                        {"v", StDType::F32, {4}, new_v.data()}}),
               Error);
  EXPECT_THROW(write_safetensors(path, {{"v", StDType::F32, {4}, nullptr}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"v", StDType::F32, {-4}, new_v.data()}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", StDType::F32, {4}, new_v.data()}}), Error);
  EXPECT_EQ(slurp(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // The temporary file cannot be created (a directory stands in its place).
  fs::create_directory(path + ".tmp");
  const std::string e = error_of([&] {
    write_safetensors(path, {{"v", StDType::F32, {4}, new_v.data()}});
  });
  EXPECT_NE(e.find("cannot create"), std::string::npos) << e;
  EXPECT_EQ(slurp(path), before);
  fs::remove(path + ".tmp");

  // The directory is not writable (meaningful only when not running as root).
  if (::geteuid() != 0) {
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(write_safetensors(path, {{"v", StDType::F32, {4}, new_v.data()}}), Error);
    fs::permissions(dir_, fs::perms::owner_all);
    EXPECT_EQ(slurp(path), before);
  }

  // The directory does not exist.
  EXPECT_THROW(write_safetensors(file("no/such/dir/x.safetensors"),
                                 {{"v", StDType::F32, {4}, new_v.data()}}),
               Error);

  // A successful write replaces the file.
  write_safetensors(path, {{"v", StDType::F32, {4}, new_v.data()}});
  SafetensorsReader r(path);
  EXPECT_EQ(r.read_f32("v"), new_v);
  EXPECT_TRUE(r.metadata().empty());
}

TEST_F(SafetensorsTest, ReaderIsMovable) {
  const std::vector<float> v = {4, 5};
  write_safetensors(file("mv.safetensors"), {{"v", StDType::F32, {2}, v.data()}});
  SafetensorsReader a(file("mv.safetensors"));
  SafetensorsReader b(std::move(a));
  EXPECT_EQ(b.read_f32("v"), v);
  std::vector<SafetensorsReader> readers;
  readers.push_back(std::move(b));
  EXPECT_EQ(readers[0].read_f32("v"), v);
}
