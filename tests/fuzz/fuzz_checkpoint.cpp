// load_checkpoint on arbitrary bytes, into a small model with AdamW (whose
// state has the most parts). A malformed or mismatched file must be an
// IoError (a rumus::Error): any other exception, a crash, a leak or a
// sanitizer report is a finding.
#include <rumus/io/checkpoint.hpp>

#include "fuzz_input.hpp"
#include "fuzz_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static rumus_fuzz::InputFile file;
  rumus_fuzz::FuzzNet net;  // fresh each time: a load may have changed the last one
  rumus::optim::AdamW adamw(net.parameters());
  rumus::Generator generator(0);
  try {
    rumus::io::load_checkpoint(file.hold(data, size), net, adamw, generator);
  } catch (const rumus::Error&) {
  }
  return 0;
}
