# Runs a trainer for one epoch with its progress on a pipe (plain lines) and
# checks that the last progress line labels its loss as the epoch's mean and
# that it is the train loss of the epoch's summary.
#   cmake -P check_progress_loss.cmake -- <command> [args...]
include(${CMAKE_CURRENT_LIST_DIR}/command_after_dashes.cmake)
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT status STREQUAL "0")
  message(FATAL_ERROR "exit status ${status}:\n${output}${errors}")
endif()
string(REGEX MATCHALL "train loss [0-9.]+ \\(epoch mean\\)" shown "${errors}")
if(NOT shown)
  message(FATAL_ERROR "no progress line shows 'train loss <x> (epoch mean)':\n${errors}")
endif()
list(GET shown -1 last_shown)
string(REGEX MATCH "epoch 1: train loss [0-9.]+" summary "${output}")
string(REGEX REPLACE "[^0-9.]*([0-9.]+).*" "\\1" shown_loss "${last_shown}")
string(REGEX REPLACE "epoch 1: train loss " "" summary_loss "${summary}")
if(NOT shown_loss STREQUAL summary_loss)
  message(FATAL_ERROR "the last progress line shows train loss '${shown_loss}', the summary '${summary_loss}':\n"
                      "${errors}${output}")
endif()
message(STATUS "progress and summary agree: train loss ${shown_loss}")
