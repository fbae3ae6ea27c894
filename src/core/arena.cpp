#include "core/arena.h"

#include <cstdlib>
#include <cstring>

namespace moet {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void Arena::Free::operator()(char* p) const { std::free(p); }

Arena::Arena(size_t capacity_bytes) : capacity_(round_up(capacity_bytes)) {
  char* p = static_cast<char*>(std::aligned_alloc(kAlign, capacity_ ? capacity_ : kAlign));
  MOET_CHECK(p, "out of memory allocating an arena of ", capacity_bytes, " bytes");
  std::memset(p, 0, capacity_);
  base_.reset(p);
}

void Arena::seek(size_t offset) {
  MOET_CHECK(!base_ || offset <= capacity_, "arena overflow: seek to ", offset, " bytes, have ",
             capacity_);
  used_ = offset;
}

Tensor Arena::alloc(DType t, std::initializer_list<int64_t> dims) {
  Tensor v(nullptr, t, dims);
  size_t n = round_up(v.bytes());
  if (base_) {
    MOET_CHECK(used_ + n <= capacity_, "arena overflow: need ", used_ + n, " bytes, have ",
               capacity_, " (planning and real pass disagree)");
    v.ptr = base_.get() + used_;
  }
  used_ += n;
  return v;
}

}  // namespace moet
