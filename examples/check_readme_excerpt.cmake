# Fails unless README contains, word for word, the part of SOURCE between the
# lines "// [readme excerpt begins]" and "// [readme excerpt ends]".
#   cmake -DSOURCE=examples/own_loop.cpp -DREADME=README.md -P check_readme_excerpt.cmake
file(READ ${SOURCE} source)
file(READ ${README} readme)
string(FIND "${source}" "// [readme excerpt begins]\n" begin)
string(FIND "${source}" "// [readme excerpt ends]\n" end)
if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
  message(FATAL_ERROR "${SOURCE}: the readme excerpt markers are missing")
endif()
string(LENGTH "// [readme excerpt begins]\n" marker)
math(EXPR begin "${begin} + ${marker}")
math(EXPR length "${end} - ${begin}")
string(SUBSTRING "${source}" ${begin} ${length} excerpt)
string(FIND "${readme}" "${excerpt}" found)
if(found EQUAL -1)
  message(FATAL_ERROR "${README} no longer shows the excerpt of ${SOURCE} between its readme markers: "
                      "copy it again into that page's code block")
endif()
message(STATUS "${README} shows the excerpt of ${SOURCE}")
