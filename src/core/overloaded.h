// Overloaded{lambdas...}: one visitor made of several lambdas, for std::visit over a variant (as
// a table of fields visits its member pointers).
#pragma once

namespace moet {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};

}  // namespace moet
