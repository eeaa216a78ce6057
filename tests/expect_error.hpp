#pragma once
#include <gtest/gtest.h>

#include <string>

#include <rumus/rumus.hpp>

namespace rumus::testing {

// Runs f, which must throw E with `fragment` in its message.
template <class E, class F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing \"" << fragment << "\"";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  autograd::clear_tape();  // a failed op may leave its inputs' graph behind
}

}  // namespace rumus::testing
