#include <fmt/format.h>

#include "rumus/nn/dropout.hpp"

namespace rumus::nn {

namespace {
double checked_p(const char* layer, double p) {
  if (!(p >= 0 && p <= 1)) throw ValueError(fmt::format("{}: expected 0 <= p <= 1, got {}", layer, p));
  return p;
}
}  // namespace

Dropout2d::Dropout2d(double p) : p(checked_p("Dropout2d", p)) {}
Dropout1d::Dropout1d(double p) : p(checked_p("Dropout1d", p)) {}
std::string Dropout2d::extra_repr() const { return fmt::format("p={}", p); }
std::string Dropout1d::extra_repr() const { return fmt::format("p={}", p); }

}  // namespace rumus::nn
