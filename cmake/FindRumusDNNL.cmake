# Finds oneDNN (Debian: libdnnl-dev) and provides the imported target
# RumusDNNL::DNNL.
#
# Debian's dnnl-config.cmake also demands the OpenCL development files, which
# the CPU engine rumus uses never needs, so the header and library are found here.
find_path(RumusDNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(RumusDNNL_LIBRARY NAMES dnnl)
mark_as_advanced(RumusDNNL_INCLUDE_DIR RumusDNNL_LIBRARY)

if(RumusDNNL_INCLUDE_DIR AND EXISTS "${RumusDNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
  file(STRINGS "${RumusDNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _rumus_dnnl_v REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" RumusDNNL_VERSION "${_rumus_dnnl_v}")
  unset(_rumus_dnnl_v)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(RumusDNNL
  REQUIRED_VARS RumusDNNL_LIBRARY RumusDNNL_INCLUDE_DIR
  VERSION_VAR RumusDNNL_VERSION
  REASON_FAILURE_MESSAGE "rumus needs oneDNN: apt-get install libdnnl-dev")

if(RumusDNNL_FOUND AND NOT TARGET RumusDNNL::DNNL)
  add_library(RumusDNNL::DNNL UNKNOWN IMPORTED)
  set_target_properties(RumusDNNL::DNNL PROPERTIES
    IMPORTED_LOCATION "${RumusDNNL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${RumusDNNL_INCLUDE_DIR}")
endif()
