// Arena: one contiguous, 64-byte aligned block handed out by bump allocation. Sized once
// (a planning pass records the sizes, then the real pass allocates), so a training step
// never allocates.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <memory>

#include "core/tensor.h"

namespace moet {

class Arena {
 public:
  // A planning arena only counts bytes; alloc returns tensors with a null pointer.
  static Arena planning() { return Arena(); }
  explicit Arena(size_t capacity_bytes);
  Arena(Arena&&) = default;
  Arena& operator=(Arena&&) = default;

  Tensor alloc(DType t, std::initializer_list<int64_t> dims);
  Tensor alloc_f32(std::initializer_list<int64_t> dims) { return alloc(DType::F32, dims); }
  Tensor alloc_i32(std::initializer_list<int64_t> dims) { return alloc(DType::I32, dims); }

  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  bool is_planning() const { return !base_; }
  char* base() const { return base_.get(); }
  void reset() { used_ = 0; }
  // Moves the bump pointer to `offset` (a used() seen earlier, or past it): buffers whose lifetimes
  // do not overlap are planned over the same bytes.
  void seek(size_t offset);

 private:
  Arena() = default;
  struct Free {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, Free> base_;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

}  // namespace moet
