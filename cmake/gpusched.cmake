# gpusched_library(NAME SRCS a.cc b.cc DEPS x y): one module = one static library.
function(gpusched_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# Every executable of a ThreadSanitizer build carries the absl::Mutex
# annotations (src/common/tsan_absl_mutex.cc).
function(gpusched_tsan_executable name)
  if(GPUSCHED_TSAN)
    target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src/common/tsan_absl_mutex.cc)
    target_link_libraries(${name} PRIVATE absl::synchronization ${CMAKE_DL_LIBS})
  endif()
endfunction()

# gpusched_test(NAME SRCS foo_test.cc DEPS lib [LABELS unit threads]): a unit
# test beside the code, labelled "unit"; tests of code with threads also say
# "threads" (the TSan build runs those).
function(gpusched_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  gpusched_tsan_executable(${name})
  set(labels unit)
  if(ARG_LABELS)
    set(labels ${ARG_LABELS})
  endif()
  add_test(NAME ${name} COMMAND ${name})
  # The `unit_tests` target builds every unit test and nothing else (the
  # ASan run needs no binary).
  set_property(GLOBAL APPEND PROPERTY GPUSCHED_UNIT_TESTS ${name})
  if("threads" IN_LIST labels)
    set_property(GLOBAL APPEND PROPERTY GPUSCHED_THREAD_TESTS ${name})
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}")
  # Tests read shipped fixtures (testdata/) through this path, never through env vars.
  target_compile_definitions(${name} PRIVATE GPUSCHED_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endfunction()
