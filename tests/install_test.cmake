# Installs into PREFIX and simulates an installed example plan with the installed binary.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${PREFIX}" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
execute_process(COMMAND "${PREFIX}/bin/gpipe-plan" simulate "${PREFIX}/share/gpipe-plan/profiles/plans/tiny-gpt-gpipe.json"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "step time")
  message(FATAL_ERROR "the installed gpipe-plan failed (${rc}):\n${out}")
endif()
