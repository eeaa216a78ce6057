# Finds every RUMUS_KERNEL_FAMILY(kind, family) in the backend sources and
# generates the function that calls them (src/backend/kernel_registry.hpp), so
# a kernel family registers itself from its own file and nothing lists it.
#
# Included from src/CMakeLists.txt: rumus_kernel_families(<out_var> <sources>...)
# adds a build step that rescans whenever a source changes. Run as a script
# (cmake -DLIST=<file of sources> -DOUT=<cpp> -P) it does the scan.

if(CMAKE_SCRIPT_MODE_FILE)
  file(STRINGS ${LIST} sources)
  set(decls "")
  set(calls "")
  foreach(src IN LISTS sources)
    file(STRINGS ${src} lines REGEX "^RUMUS_KERNEL_FAMILY\\(")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^RUMUS_KERNEL_FAMILY\\( *([a-z0-9_]+) *, *([a-z0-9_]+) *\\).*" "register_\\1_\\2_kernels"
             fn "${line}")
      string(APPEND decls "void ${fn}();\n")
      string(APPEND calls "  ${fn}();\n")
    endforeach()
  endforeach()
  set(text "// Generated from the RUMUS_KERNEL_FAMILY definitions in src/backend; do not edit.
namespace rumus {
${decls}
void register_kernel_families() {
${calls}}
}  // namespace rumus
")
  if(EXISTS ${OUT})
    file(READ ${OUT} old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE ${OUT} "${text}")
  endif()
  return()
endif()

function(rumus_kernel_families out_var)
  set(gen ${CMAKE_CURRENT_BINARY_DIR}/kernel_families.cpp)
  set(list ${CMAKE_CURRENT_BINARY_DIR}/kernel_family_sources.txt)
  set(backend_sources "")
  foreach(src IN LISTS ARGN)
    if(src MATCHES "backend/(cpu|vulkan)/")
      list(APPEND backend_sources ${src})
    endif()
  endforeach()
  string(REPLACE ";" "\n" text "${backend_sources}")
  file(CONFIGURE OUTPUT ${list} CONTENT "${text}\n")
  add_custom_command(
    OUTPUT ${gen}
    COMMAND ${CMAKE_COMMAND} -DLIST=${list} -DOUT=${gen} -P ${PROJECT_SOURCE_DIR}/cmake/RumusKernelFamilies.cmake
    DEPENDS ${backend_sources} ${list} ${PROJECT_SOURCE_DIR}/cmake/RumusKernelFamilies.cmake
    COMMENT "kernel families"
    VERBATIM)
  set(${out_var} ${gen} PARENT_SCOPE)
endfunction()
