# Writes rumus_codes.glsl: the X-macro lists of the C++ sources (dtypes and
# kernel codes) as GLSL constants numbered in list order, so the shaders and
# C++ share one numbering. Runs at configure time and again when a list changes.
function(rumus_write_shader_codes out_file)
  set(glsl "// Generated from include/rumus/core/dtype.hpp and src/backend/kernel_codes.hpp; do not edit.\n")
  set(lists
      "${PROJECT_SOURCE_DIR}/include/rumus/core/dtype.hpp|RUMUS_DTYPES|DT"
      "${PROJECT_SOURCE_DIR}/src/backend/kernel_codes.hpp|RUMUS_UNARY_OPS|UNARY"
      "${PROJECT_SOURCE_DIR}/src/backend/kernel_codes.hpp|RUMUS_BINARY_OPS|BINARY"
      "${PROJECT_SOURCE_DIR}/src/backend/kernel_codes.hpp|RUMUS_REDUCE_OPS|REDUCE"
      "${PROJECT_SOURCE_DIR}/src/backend/kernel_codes.hpp|RUMUS_RANDOM_KINDS|RANDOM"
      "${PROJECT_SOURCE_DIR}/src/backend/kernel_codes.hpp|RUMUS_POOL_KINDS|POOL"
      "${PROJECT_SOURCE_DIR}/src/backend/kernel_codes.hpp|RUMUS_POINTWISE_KINDS|POINTWISE"
      "${PROJECT_SOURCE_DIR}/src/backend/kernel_codes.hpp|RUMUS_OPTIMIZER_KINDS|OPTIMIZER")
  foreach(entry IN LISTS lists)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 file)
    list(GET parts 1 macro)
    list(GET parts 2 prefix)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
    file(READ ${file} text)
    # The list runs from "#define MACRO(X)" to the first line that does not end in a backslash.
    string(FIND "${text}" "#define ${macro}(X)" start)
    if(start EQUAL -1)
      message(FATAL_ERROR "${file} has no ${macro}(X) list")
    endif()
    string(SUBSTRING "${text}" ${start} -1 text)
    string(REGEX MATCH "^([^\n]*\\\\\n)*[^\n]*" body "${text}")
    string(LENGTH "#define ${macro}(X)" skip)
    string(SUBSTRING "${body}" ${skip} -1 body)
    string(REGEX MATCHALL "X\\(([a-z0-9_]+)\\)" items "${body}")
    set(code 0)
    foreach(item IN LISTS items)
      string(REGEX REPLACE "X\\(([a-z0-9_]+)\\)" "\\1" name "${item}")
      string(TOUPPER "${name}" upper)
      string(APPEND glsl "const uint ${prefix}_${upper} = ${code}u;\n")
      math(EXPR code "${code} + 1")
    endforeach()
    string(APPEND glsl "const uint ${prefix}_COUNT = ${code}u;\n")
  endforeach()
  file(WRITE ${out_file}.in "${glsl}")
  file(COPY_FILE ${out_file}.in ${out_file} ONLY_IF_DIFFERENT)
endfunction()
