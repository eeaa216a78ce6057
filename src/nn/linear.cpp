#include "rumus/nn/linear.hpp"

#include <fmt/format.h>

#include "rumus/nn/init.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::nn {
namespace {
void check_positive(const char* layer, const char* what, std::int64_t v) {
  if (v < 1) throw Error(fmt::format("{}: expected {} >= 1, got {}", layer, what, v));
}
}  // namespace

Linear::Linear(std::int64_t in, std::int64_t out, bool with_bias) {
  check_positive("Linear", "in_features", in);
  check_positive("Linear", "out_features", out);
  weight = register_parameter("weight", empty({out, in}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  init::default_linear_(weight, bias);
}

}  // namespace rumus::nn
