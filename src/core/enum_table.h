// Tables with one row per value of an enum, in the enum's order (as ggml's type-traits table):
// the row of a value is table[value], and the order is checked at compile time.
#pragma once
#include <cstddef>

namespace moet {

// Whether rows[i].*key == i for every row: static_assert it where the table is defined.
template <class Row, size_t N, class E>
constexpr bool rows_in_enum_order(const Row (&rows)[N], E Row::*key) {
  for (size_t i = 0; i < N; ++i)
    if (static_cast<size_t>(rows[i].*key) != i) return false;
  return true;
}

}  // namespace moet
