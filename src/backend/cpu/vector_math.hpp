#pragma once
// glibc's vector math library (libmvec, linked through -lm) has SIMD forms of
// these functions (within 4 ulp; erf and tanh since glibc 2.35). Declared
// SIMD-callable, float loops that call them vectorise instead of calling once
// per element; double keeps the scalar functions, which gradchecks compare
// against. Only files compiled with -fno-math-errno (src/CMakeLists.txt) get
// the vector forms: with errno the compiler keeps the calls scalar.
#include <cmath>

#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__clang__)
#if __GLIBC_PREREQ(2, 35)
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float) noexcept;
__attribute__((simd("notinbranch"))) float logf(float) noexcept;
__attribute__((simd("notinbranch"))) float erff(float) noexcept;
__attribute__((simd("notinbranch"))) float tanhf(float) noexcept;
}
#endif
#endif
