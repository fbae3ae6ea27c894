// Checks of numeric command-line values: each refusal is one moet::Error line that names the
// flag and the value ("--grad-clip must be a finite number >= 0, got nan"). Floating-point
// values must also be finite (NaN and Inf are refused wherever a number is asked for).
#pragma once
#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/error.h"

namespace moet {

namespace detail {
template <typename T>
bool flag_finite(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isfinite(v);
  else
    return true;
}
template <typename T>
const char* flag_kind() {
  return std::is_floating_point_v<T> ? "a finite number " : "";
}
}  // namespace detail

// v >= min: "--flag must be >= min, got v".
template <typename T, typename U>
void check_flag_at_least(std::string_view flag, T v, U min) {
  MOET_CHECK(detail::flag_finite(v) && v >= T(min), flag, " must be ", detail::flag_kind<T>(),
             ">= ", min, ", got ", v);
}

// v > 0: "--flag must be positive, got v".
template <typename T>
void check_flag_positive(std::string_view flag, T v) {
  MOET_CHECK(detail::flag_finite(v) && v > T(0), flag, " must be ",
             std::is_floating_point_v<T> ? "a finite positive number" : "positive", ", got ", v);
}

// lo <= v <= hi: "--flag must be in [lo, hi], got v".
template <typename T, typename U>
void check_flag_in_range(std::string_view flag, T v, U lo, U hi) {
  MOET_CHECK(detail::flag_finite(v) && v >= T(lo) && v <= T(hi), flag, " must be ",
             detail::flag_kind<T>(), "in [", lo, ", ", hi, "], got ", v);
}

// --threads: 0 (all cores) to kMaxThreads; above the cores this process may use, a one-line
// warning (moet::warn) that the threads will share them.
inline constexpr int kMaxThreads = 4096;
void check_flag_threads(int v);

// v is one of the choices: "--flag 'v' is not one of a, b, c".
void check_flag_choice(std::string_view flag, const std::string& v,
                       std::initializer_list<std::string_view> choices);

}  // namespace moet
