#include "rumus/core/generator.hpp"

namespace rumus {

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace rumus
