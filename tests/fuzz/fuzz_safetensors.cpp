// load_safetensors on arbitrary bytes. A malformed file must be an IoError
// (a rumus::Error): any other exception, a crash, a leak or a sanitizer report
// is a finding.
#include <rumus/core/error.hpp>
#include <rumus/io/safetensors.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static rumus_fuzz::InputFile file;
  try {
    rumus::io::Metadata metadata;
    rumus::StateDict tensors = rumus::io::load_safetensors(file.hold(data, size), &metadata);
    (void)tensors.size();
  } catch (const rumus::Error&) {
  }
  return 0;
}
