# Checks a file a test wrote: its text must match the regular expression
# EXPECT and, when REJECT is given, must not match REJECT.
#   cmake -DFILE=<path> -DEXPECT=<regex> [-DREJECT=<regex>] -P check_file.cmake
if(NOT EXISTS "${FILE}")
  message(FATAL_ERROR "check_file.cmake: '${FILE}' does not exist")
endif()
file(READ "${FILE}" text)
if(NOT text MATCHES "${EXPECT}")
  message(FATAL_ERROR "'${FILE}' does not match '${EXPECT}':\n${text}")
endif()
if(DEFINED REJECT AND text MATCHES "${REJECT}")
  message(FATAL_ERROR "'${FILE}' matches '${REJECT}', which it must not:\n${text}")
endif()
message(STATUS "'${FILE}' matches '${EXPECT}'")
