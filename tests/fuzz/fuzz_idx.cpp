// read_idx on arbitrary bytes, raw or gzip (it tells them apart by content).
// A malformed file must be an IoError (a rumus::Error): any other exception,
// a crash, a leak or a sanitizer report is a finding.
#include <rumus/core/error.hpp>
#include <rumus/data/idx.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static rumus_fuzz::InputFile file;
  try {
    rumus::Tensor t = rumus::data::read_idx(file.hold(data, size));
    (void)t.numel();
  } catch (const rumus::Error&) {
  }
  return 0;
}
