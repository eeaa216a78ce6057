# rumus.pc for pkg-config users:
#   c++ app.cpp $(pkg-config --cflags --libs rumus)            (shared librumus)
#   c++ app.cpp $(pkg-config --static --cflags --libs rumus)   (static librumus.a)
# Cflags carry -std=c++20 (the headers need it); no public header uses OpenMP,
# so -fopenmp is only a static link's business (Libs.private). The paths are
# relative to the .pc file, so an install moved with --prefix or DESTDIR works.
function(rumus_write_pkg_config out)
  set(pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(RUMUS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
    set(RUMUS_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
    set(RUMUS_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
  else()
    # From <prefix>/<libdir>/pkgconfig back up to <prefix>.
    file(RELATIVE_PATH up /p/${pc_dir} /p)
    string(REGEX REPLACE "/$" "" up "${up}")
    set(RUMUS_PC_PREFIX "\${pcfiledir}/${up}")
    set(RUMUS_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
    set(RUMUS_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
  endif()

  # A shared librumus records its own dependencies; a static one hands them on.
  set(RUMUS_PC_REQUIRES_PRIVATE "")
  set(RUMUS_PC_LIBS_PRIVATE "")
  get_target_property(type rumus TYPE)
  if(type STREQUAL "STATIC_LIBRARY")
    set(requires zlib openblas)
    if(RUMUS_VULKAN)
      list(APPEND requires vulkan)
    endif()
    list(JOIN requires ", " RUMUS_PC_REQUIRES_PRIVATE)
    # oneDNN ships no .pc file. libgomp is named before rumus_openmp_defaults
    # so that the loader loads the defaults after it (src/runtime/openmp_defaults.cpp).
    set(libs -ldnnl ${OpenMP_CXX_FLAGS} -lgomp -lrumus_openmp_defaults ${CMAKE_THREAD_LIBS_INIT})
    list(JOIN libs " " RUMUS_PC_LIBS_PRIVATE)
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/rumus.pc.in ${out} @ONLY)
endfunction()
