#include "checkpoint/async_saver.h"

#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace moet {

namespace fs = std::filesystem;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

CheckpointSaver::CheckpointSaver(Options o) : o_(std::move(o)) {}

CheckpointSaver::~CheckpointSaver() {
  if (worker_.joinable()) worker_.join();
}

void CheckpointSaver::remove_partial_saves(const std::string& run_dir) {
  if (!fs::is_directory(run_dir)) return;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".tmp") == 0)
      fs::remove_all(e.path());
  }
}

void CheckpointSaver::wait() {
  if (worker_.joinable()) worker_.join();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

namespace {
// The fp32 slots of the snapshot a piece takes (a bf16 piece: half as many, rounded up, so every
// piece starts 4-byte aligned).
int64_t snapshot_slots(const StatePiece& p) { return int64_t((p.bytes() + 3) / 4); }
}  // namespace

void CheckpointSaver::reserve(const std::vector<StatePiece>& pieces) {
  int64_t total = 0;
  for (const StatePiece& p : pieces) total += snapshot_slots(p);
  if (int64_t(snapshot_.size()) < total) snapshot_.assign(size_t(total), 0.0f);
}

void CheckpointSaver::save(const std::vector<StatePiece>& pieces, const CheckpointIndex& meta) {
  const auto t0 = std::chrono::steady_clock::now();
  wait();
  int64_t total = 0;
  for (const StatePiece& p : pieces) total += snapshot_slots(p);
  if (int64_t(snapshot_.size()) < total) snapshot_.resize(size_t(total));
  pieces_ = pieces;
  int64_t at = 0;
  for (StatePiece& p : pieces_) {
    float* to = snapshot_.data() + at;
    std::memcpy(to, p.raw(), p.bytes());
    if (p.is_bf16())
      p.bf16 = reinterpret_cast<uint16_t*>(to);
    else
      p.data = to;
    at += snapshot_slots(p);
  }
  stall_s_ = seconds_since(t0);
  if (o_.async) {
    worker_ = std::thread([this, meta] {
      try {
        write(meta);
      } catch (...) {
        error_ = std::current_exception();
      }
    });
  } else {
    write(meta);
    stall_s_ = seconds_since(t0);
  }
}

void CheckpointSaver::write(CheckpointIndex meta) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string tmp = (fs::path(o_.run_dir) / (step_dir_name(meta.step) + ".tmp")).string();
  fs::create_directories(tmp);
  bytes_ = write_rank_shard(tmp, o_.rank, pieces_);
  if (o_.rank == 0) {
    const int64_t step = meta.step;
    seal_checkpoint(tmp, o_.ranks, std::move(meta), o_.config_json_path);
    published_ = publish_checkpoint(o_.run_dir, tmp, step, o_.keep_last);
  }
  write_s_ = seconds_since(t0);
}

}  // namespace moet
