# Compiles shaders/*.comp to SPIR-V with glslc and embeds the words in a
# generated .cpp, so the library carries its kernels and needs no files at run time.
include(RumusShaderCodes)

function(rumus_embed_shaders out_var)
  file(GLOB shader_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/shaders/*.comp)
  file(GLOB shader_includes CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/shaders/*.glsl ${PROJECT_SOURCE_DIR}/shaders/*.h)
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR}/shaders)
  file(MAKE_DIRECTORY ${gen_dir})
  rumus_write_shader_codes(${gen_dir}/rumus_codes.glsl)
  list(APPEND shader_includes ${gen_dir}/rumus_codes.glsl)
  set(words_files "")
  set(table "")
  # Shaders whose arithmetic type is REAL (shaders/common.glsl) are compiled a
  # second time with -DRUMUS_F64 as <name>_f64: double arithmetic for f64 tensors.
  set(f64_variants elementwise reduce softmax layer_norm conv pool random index_add scan sort lstm_cell)
  set(variants "")
  foreach(src IN LISTS shader_sources)
    get_filename_component(name ${src} NAME_WE)
    if(name MATCHES "^attention_(blocked|grid)")  # one build per head width, never generic
      foreach(width 32 64)
        list(APPEND variants "${name}${width}|${src}|-DBLOCKED_D=${width}")
      endforeach()
      continue()
    endif()
    list(APPEND variants "${name}|${src}|")
    if(name IN_LIST f64_variants)
      list(APPEND variants "${name}_f64|${src}|-DRUMUS_F64")
    endif()
    if(name STREQUAL "index_add")  # adds by compare-and-swap, for devices without float atomics
      list(APPEND variants "${name}_f64cas|${src}|-DRUMUS_F64_CAS")
      list(APPEND variants "${name}_cas|${src}|-DRUMUS_F32_CAS")
      # scatter_add: the same adds with an index per element (fault code 4)
      set(each "-DPER_ELEMENT,-DKERNEL_CODE=4u")
      list(APPEND variants "scatter_add|${src}|${each}" "scatter_add_f64|${src}|${each},-DRUMUS_F64"
                           "scatter_add_f64cas|${src}|${each},-DRUMUS_F64_CAS" "scatter_add_cas|${src}|${each},-DRUMUS_F32_CAS")
    endif()
    if(name STREQUAL "scan")  # running maxima and minima with their indices
      list(APPEND variants "cumextreme|${src}|-DEXTREME" "cumextreme_f64|${src}|-DEXTREME,-DRUMUS_F64")
    endif()
    if(name STREQUAL "index_select")  # gather: an index per element (fault code 3)
      list(APPEND variants "gather|${src}|-DPER_ELEMENT,-DKERNEL_CODE=3u")
    endif()
    if(name STREQUAL "layer_norm")  # rows summed by subgroups, for devices with subgroup arithmetic
      list(APPEND variants "${name}_sg|${src}|-DSUBGROUP_REDUCE")
    endif()
    if(name STREQUAL "attention_tiled")  # four invocations per row, for devices with subgroup quads
      list(APPEND variants "${name}_quad|${src}|-DRUMUS_QUAD")
    endif()
  endforeach()
  foreach(variant IN LISTS variants)
    string(REPLACE "|" ";" parts "${variant}")
    list(GET parts 0 name)
    list(GET parts 1 src)
    list(LENGTH parts nparts)
    set(defines "")
    if(nparts GREATER 2)
      list(GET parts 2 defines)
      string(REPLACE "," ";" defines "${defines}")  # several defines, comma-separated
    endif()
    set(words ${gen_dir}/${name}.spv.inc)
    # spirv-opt of Debian 12's shaderc (2022.4) crashes on the cooperative-matrix
    # shader; drivers optimise SPIR-V themselves, so it goes in unoptimised.
    set(optimise -O)
    if(name STREQUAL "gemm_coopmat")
      set(optimise "")
    endif()
    # -mfmt=num writes the SPIR-V as comma-separated 32-bit words, ready to #include.
    add_custom_command(
      OUTPUT ${words}
      COMMAND ${GLSLC_EXECUTABLE} --target-env=vulkan1.2 ${optimise} ${defines} -mfmt=num -I${PROJECT_SOURCE_DIR}/shaders -I${gen_dir} ${src} -o ${words}
      DEPENDS ${src} ${shader_includes}
      COMMENT "glslc ${name}"
      VERBATIM)
    list(APPEND words_files ${words})
    string(APPEND table "  {\"${name}\", []{ static const std::uint32_t w[] = {\n#include \"${name}.spv.inc\"\n  }; return std::span<const std::uint32_t>(w); }()},\n")
  endforeach()
  set(cpp ${gen_dir}/embedded_shaders.cpp)
  file(WRITE ${cpp}.in
"// Generated from shaders/*.comp; do not edit.
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

namespace rumus::vulkan {
extern const std::pair<std::string_view, std::span<const std::uint32_t>> kEmbeddedShaders[];
extern const std::size_t kEmbeddedShaderCount;
const std::pair<std::string_view, std::span<const std::uint32_t>> kEmbeddedShaders[] = {
${table}};
const std::size_t kEmbeddedShaderCount = sizeof(kEmbeddedShaders) / sizeof(kEmbeddedShaders[0]);
}  // namespace rumus::vulkan
")
  # Rewrite only on change so the generated file does not rebuild every configure.
  file(COPY_FILE ${cpp}.in ${cpp} ONLY_IF_DIFFERENT)
  set_source_files_properties(${cpp} PROPERTIES OBJECT_DEPENDS "${words_files}")
  # Listing the word files as sources makes the library target run their commands.
  set(${out_var} ${cpp} ${words_files} PARENT_SCOPE)
endfunction()
