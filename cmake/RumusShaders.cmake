# Compiles the shader builds listed in shaders/manifest.txt to SPIR-V with glslc
# and embeds the words in a generated .cpp, so the library carries its kernels
# and needs no files at run time. Also generates shader_ids.hpp: ShaderId, one
# id per build, with each build's name and f64 variant, so C++ launches by id.
include(RumusShaderCodes)

# Reads the manifest into `variants` (entries "id|source|defines|optimise",
# defines comma-separated) and `f64_of` (entries "id|id_f64"); fails on a
# malformed line, a missing source, a repeated id, or a .comp no line names.
function(rumus_read_shader_manifest manifest variants_var f64_var)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${manifest})
  file(GLOB comps CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/shaders/*.comp)
  file(READ ${manifest} text)
  if(text MATCHES "[][;]")
    message(FATAL_ERROR "shaders/manifest.txt: no `;`, `[` or `]`, even in comments (CMake lists split on them)")
  endif()
  file(STRINGS ${manifest} lines)
  set(variants "")
  set(f64_of "")
  set(ids "")
  set(used "")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    string(REGEX REPLACE "#.*" "" line "${line}")
    string(REGEX MATCHALL "[^ \t]+" tokens "${line}")
    if(NOT tokens)
      continue()
    endif()
    set(where "shaders/manifest.txt:${n}")
    list(LENGTH tokens count)
    if(count LESS 2)
      message(FATAL_ERROR "${where}: expected `id source.comp [-Ddefines] [flags]`, got `${line}`")
    endif()
    list(GET tokens 0 id)
    list(GET tokens 1 src)
    set(rest "")
    if(count GREATER 2)
      list(SUBLIST tokens 2 -1 rest)
    endif()
    if(NOT id MATCHES "^[a-z_][a-z0-9_]*$")
      message(FATAL_ERROR "${where}: `${id}` is not an id (lower case, digits and _; it becomes ShaderId::${id})")
    endif()
    if(NOT src MATCHES "\\.comp$" OR NOT EXISTS ${PROJECT_SOURCE_DIR}/shaders/${src})
      message(FATAL_ERROR "${where}: ${id} names shaders/${src}, which does not exist")
    endif()
    set(defines "")
    set(optimise 1)
    set(f64 OFF)
    foreach(token IN LISTS rest)
      if(token MATCHES "^-D[A-Za-z_][A-Za-z0-9_]*(=[^,]*)?$")
        list(APPEND defines ${token})
      elseif(token STREQUAL "f64")
        set(f64 ON)
      elseif(token STREQUAL "unoptimised")
        set(optimise 0)
      else()
        message(FATAL_ERROR "${where}: `${token}` is neither a define (-DNAME or -DNAME=value) nor a flag (f64, unoptimised)")
      endif()
    endforeach()
    set(builds ${id})
    if(f64)
      list(APPEND builds ${id}_f64)
      list(APPEND f64_of "${id}|${id}_f64")
    endif()
    foreach(build IN LISTS builds)
      if(build IN_LIST ids)
        message(FATAL_ERROR "${where}: ${build} is listed twice (an f64 flag makes <id>_f64 too)")
      endif()
      list(APPEND ids ${build})
      set(build_defines ${defines})
      if(build STREQUAL "${id}_f64" AND f64)
        list(APPEND build_defines -DRUMUS_F64)
      endif()
      string(REPLACE ";" "," build_defines "${build_defines}")
      list(APPEND variants "${build}|${PROJECT_SOURCE_DIR}/shaders/${src}|${build_defines}|${optimise}")
    endforeach()
    list(APPEND used ${PROJECT_SOURCE_DIR}/shaders/${src})
  endforeach()
  foreach(comp IN LISTS comps)
    if(NOT comp IN_LIST used)
      get_filename_component(file ${comp} NAME)
      message(FATAL_ERROR "shaders/${file} is in no line of shaders/manifest.txt: add one (id, source, defines, flags) "
                          "or remove the file")
    endif()
  endforeach()
  set(${variants_var} "${variants}" PARENT_SCOPE)
  set(${f64_var} "${f64_of}" PARENT_SCOPE)
endfunction()

# `out_var`: the sources to add to the library; `include_var`: the folder of
# the generated shader_ids.hpp.
function(rumus_embed_shaders out_var include_var)
  file(GLOB shader_includes CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/shaders/*.glsl ${PROJECT_SOURCE_DIR}/shaders/*.h)
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR}/shaders)
  file(MAKE_DIRECTORY ${gen_dir})
  rumus_write_shader_codes(${gen_dir}/rumus_codes.glsl)
  list(APPEND shader_includes ${gen_dir}/rumus_codes.glsl)
  rumus_read_shader_manifest(${PROJECT_SOURCE_DIR}/shaders/manifest.txt variants f64_of)
  set(words_files "")
  set(enum "")
  set(names "")
  set(f64_ids "")
  set(words "")
  set(spans "")
  foreach(variant IN LISTS variants)
    string(REPLACE "|" ";" parts "${variant}")
    list(GET parts 0 name)
    list(GET parts 1 src)
    list(GET parts 2 defines)
    list(GET parts 3 optimise)
    string(REPLACE "," ";" defines "${defines}")
    set(optimise_flag "")
    if(optimise)
      set(optimise_flag -O)
    endif()
    set(inc ${gen_dir}/${name}.spv.inc)
    # -mfmt=num writes the SPIR-V as comma-separated 32-bit words, ready to #include.
    add_custom_command(
      OUTPUT ${inc}
      COMMAND ${GLSLC_EXECUTABLE} --target-env=vulkan1.2 ${optimise_flag} ${defines} -mfmt=num -I${PROJECT_SOURCE_DIR}/shaders -I${gen_dir} ${src} -o ${inc}
      DEPENDS ${src} ${shader_includes}
      COMMENT "glslc ${name}"
      VERBATIM)
    list(APPEND words_files ${inc})
    string(APPEND enum "  ${name},\n")
    string(APPEND names "    \"${name}\",\n")
    set(f64 "std::nullopt")
    foreach(pair IN LISTS f64_of)
      if(pair MATCHES "^${name}\\|(.*)$")
        set(f64 "ShaderId::${CMAKE_MATCH_1}")
      endif()
    endforeach()
    string(APPEND f64_ids "    ${f64},  // ${name}\n")
    string(APPEND words "constexpr std::uint32_t ${name}_words[] = {\n#include \"${name}.spv.inc\"\n};\n")
    string(APPEND spans "    ${name}_words,\n")
  endforeach()
  list(LENGTH variants count)

  set(hpp ${gen_dir}/shader_ids.hpp)
  file(WRITE ${hpp}.in
"#pragma once
// Generated from shaders/manifest.txt by cmake/RumusShaders.cmake; do not edit.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace rumus::vulkan {

// One id per shader build of the manifest, in its order.
enum class ShaderId : std::uint32_t {
${enum}};
inline constexpr std::size_t kShaderCount = ${count};

// Each build's id as written in the manifest (pipeline statistics, profiles, errors).
inline constexpr std::array<std::string_view, kShaderCount> kShaderNames = {
${names}};

// The double-arithmetic build of each shader flagged f64, by the id of its float build.
inline constexpr std::array<std::optional<ShaderId>, kShaderCount> kShaderF64 = {
${f64_ids}};

// The SPIR-V of each build (embedded_shaders.cpp).
extern const std::array<std::span<const std::uint32_t>, kShaderCount> kShaderSpirv;

inline std::string_view shader_name(ShaderId id) { return kShaderNames[std::size_t(id)]; }

}  // namespace rumus::vulkan
")
  set(cpp ${gen_dir}/embedded_shaders.cpp)
  file(WRITE ${cpp}.in
"// Generated from shaders/manifest.txt by cmake/RumusShaders.cmake; do not edit.
#include \"shader_ids.hpp\"

namespace rumus::vulkan {
namespace {
${words}}  // namespace

const std::array<std::span<const std::uint32_t>, kShaderCount> kShaderSpirv = {
${spans}};

}  // namespace rumus::vulkan
")
  # Rewrite only on change so the generated files do not rebuild every configure.
  file(COPY_FILE ${hpp}.in ${hpp} ONLY_IF_DIFFERENT)
  file(COPY_FILE ${cpp}.in ${cpp} ONLY_IF_DIFFERENT)
  set_source_files_properties(${cpp} PROPERTIES OBJECT_DEPENDS "${words_files}")
  # Listing the word files as sources makes the library target run their commands.
  set(${out_var} ${cpp} ${words_files} PARENT_SCOPE)
  set(${include_var} ${gen_dir} PARENT_SCOPE)
endfunction()
