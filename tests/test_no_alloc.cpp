// test_no_alloc.cpp — moet's code allocates nothing on the heap in a training step once warmed
// up: arenas are sized once, temporaries are grow-only thread-local buffers, weight operands
// live in an arena. Counted by replacing the global operator new for this test binary; calls
// made from inside libdnnl (oneDNN's sgemm allocates its own packing buffers) are not moet's
// and are not counted.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

#include "data/dataset.h"
#include "model/model.h"
#include "train/train_step.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

// Whether the code that called operator new lives in oneDNN's library.
bool called_from_onednn(void* caller) {
  Dl_info info;
  return dladdr(caller, &info) && info.dli_fname && std::strstr(info.dli_fname, "libdnnl");
}

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed) &&
      !called_from_onednn(__builtin_return_address(0)))
    g_allocations.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The replaced new and delete are malloc and free, a matched pair; GCC (-O1, as in the
// sanitizer builds) inlines this delete into GoogleTest's `new` and warns that free() gets
// memory from operator new.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The nothrow form too (std::stable_sort's buffer): by default it calls the replaced form, but
// where another library replaces it (AddressSanitizer's runtime replaces every form) its memory
// would come to the free() above from another allocator.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (...) {
    return nullptr;
  }
}
#pragma GCC diagnostic pop

namespace moet {
namespace {

int64_t allocations_in_steps(Recipe recipe, MomentDtypes moments = {}) {
  ModelConfig cfg = load_model_config(std::string(MOET_SOURCE_DIR) + "/configs/tiny.json");
  const int64_t B = 2, T = 16, A = 2;
  PrecisionPolicy precision;
  precision.recipe = recipe;
  precision.bf16_layers = 1;
  Model m(
      cfg,
      {.micro_batch = B, .seq_len = T, .loss_weights = {0.3, 1e-2, 1e-3}, .precision = precision});
  m.init_parameters(5);
  LrSchedule sched;
  sched.max_lr = 3e-3;
  sched.warmup = 1;
  sched.total = 6;
  AdamWConfig oc;
  oc.moments = moments;
  StepRunner runner(m, oc, sched, 1e-3);
  MockDataset ds(cfg.vocab_size, 3);
  std::vector<int32_t> tok(A * B * (T + 1));
  // built once, as the trainer does (a std::function made per step would allocate)
  const std::function<const int32_t*(int64_t)> micro_batch = [&](int64_t a) {
    return tok.data() + a * B * (T + 1);
  };
  auto step = [&](int64_t s) {
    for (int64_t a = 0; a < A; ++a) ds.next_batch(s, a, B, T, tok.data() + a * B * (T + 1));
    runner.run(s, A, micro_batch);
  };
  step(0);  // warm-up: thread-local buffers grow to their size
  step(1);
  g_allocations = 0;
  g_counting = true;
  for (int64_t s = 2; s < 5; ++s) step(s);
  g_counting = false;
  return g_allocations.load();
}

TEST(NoAllocation, TrainingStepsAllocateNothingOnceWarm) {
  for (const RecipeTraits& t : kRecipes) EXPECT_EQ(allocations_in_steps(t.recipe), 0) << t.name;
}

// The precision-aware optimizer: moments stored in bf16 (each alone and both).
TEST(NoAllocation, Bf16MomentsAllocateNothingOnceWarm) {
  for (MomentDtypes d : {MomentDtypes{DType::BF16, DType::BF16}, MomentDtypes{DType::BF16},
                         MomentDtypes{DType::F32, DType::BF16}})
    EXPECT_EQ(allocations_in_steps(Recipe::BF16, d), 0)
        << dtype_name(d.m) << " / " << dtype_name(d.v);
}

}  // namespace
}  // namespace moet
