# Helper functions shared by every target of the project.
#
#   colibri_add_library(<name> SOURCES a.cc b.cc [DEPS lib ...] [PUBLIC_DEPS lib ...])
#     Builds colibri_<name> (static) with include/ as its public include directory.
#   colibri_add_executable(<name> SOURCES main.cc [DEPS ...])
#   colibri_add_test(<name> SOURCES x_test.cc [DEPS ...] [LABELS unit ...] [TIMEOUT s])
#     Builds a GoogleTest binary and registers its tests with CTest under the given labels.
include_guard(GLOBAL)

function(colibri_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(colibri_${name} STATIC ${ARG_SOURCES})
  target_include_directories(colibri_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_link_libraries(colibri_${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_DEPS})
  target_compile_options(colibri_${name} PRIVATE ${COLIBRI_WARNINGS})
  add_library(colibri::${name} ALIAS colibri_${name})
endfunction()

function(colibri_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_compile_options(${name} PRIVATE ${COLIBRI_WARNINGS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()

function(colibri_add_test name)
  if(NOT COLIBRI_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${COLIBRI_WARNINGS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
               SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
    DISCOVERY_TIMEOUT 60)
endfunction()
