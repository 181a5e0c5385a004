# Helpers that keep each module's CMakeLists.txt to one call.
include(GNUInstallDirs)

set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
set(CMAKE_ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)

# Compile options shared by every peerlab target.
add_library(peerlab_options INTERFACE)
# Warnings apply to peerlab's own build, not to projects that use the installed library.
target_compile_options(peerlab_options INTERFACE $<BUILD_INTERFACE:
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  # GCC 12 reports false -Wrestrict positives inside std::string (GCC PR 105329).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${PEERLAB_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xcompiler=-Wall,-Wno-unused-parameter,-Wno-restrict
                             -diag-suppress=177>>)
target_compile_definitions(peerlab_options INTERFACE
  PEERLAB_VERSION="${PROJECT_VERSION}"
  $<$<BOOL:${PEERLAB_HAVE_MPI}>:PEERLAB_HAVE_MPI=1>
  $<$<BOOL:${PEERLAB_HAVE_NCCL_DEVICE_API}>:PEERLAB_HAVE_NCCL_DEVICE_API=1>)
target_include_directories(peerlab_options INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                     $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/peerlab>)
target_compile_features(peerlab_options INTERFACE cxx_std_20)
set_target_properties(peerlab_options PROPERTIES EXPORT_NAME options)
add_library(peerlab::options ALIAS peerlab_options)

# peerlab_add_library(<name> SOURCES ... [DEPS ...])
#   Static library peerlab_<name>, alias peerlab::<name>. Includes are rooted at the repository top
#   (#include "reference/core/status.h").
function(peerlab_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(peerlab_${name} STATIC ${ARG_SOURCES})
  add_library(peerlab::${name} ALIAS peerlab_${name})
  target_link_libraries(peerlab_${name} PUBLIC peerlab::options ${ARG_DEPS})
  set_target_properties(peerlab_${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()

# peerlab_add_test(<source> LABEL cpu|gpu [DEPS ...] [TIMEOUT s] [ARGS ...] [FIXTURES_REQUIRED name...])
#   One GoogleTest executable named after the source's stem. Every test case is its own ctest entry
#   (`<stem>.<Suite>.<Case>`, discovered when ctest runs, so listing needs no GPU), labelled `cpu` or `gpu`; a case that
#   calls GTEST_SKIP shows as skipped in ctest, never as passed (SKIP_REGULAR_EXPRESSION on gtest's "[  SKIPPED ]").
#   TIMEOUT applies to each case. The test main keeps NVLink multicast off (reference/testing/testing_main.cc).
function(peerlab_add_test source)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT" "DEPS;ARGS;FIXTURES_REQUIRED" ${ARGN})
  if(NOT PEERLAB_BUILD_TESTS)
    return()
  endif()
  set(extra_properties)
  if(ARG_FIXTURES_REQUIRED)
    list(JOIN ARG_FIXTURES_REQUIRED "," fixtures)
    set(extra_properties FIXTURES_REQUIRED ${fixtures})
  endif()
  if(NOT ARG_LABEL MATCHES "^(cpu|gpu)$")
    message(FATAL_ERROR "peerlab_add_test(${source}): LABEL must be cpu or gpu")
  endif()
  get_filename_component(stem ${source} NAME_WE)
  add_executable(${stem} ${source})
  target_link_libraries(${stem} PRIVATE ${ARG_DEPS} peerlab::testing GTest::gtest GTest::gmock)
  if(NOT ARG_TIMEOUT)
    if(ARG_LABEL STREQUAL "gpu")
      set(ARG_TIMEOUT 300)
    else()
      set(ARG_TIMEOUT 120)
    endif()
  endif()
  gtest_discover_tests(${stem}
    EXTRA_ARGS ${ARG_ARGS}
    TEST_PREFIX "${stem}."
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    NO_PRETTY_TYPES NO_PRETTY_VALUES
    PROPERTIES
      LABELS ${ARG_LABEL}
      TIMEOUT ${ARG_TIMEOUT}
      ENVIRONMENT "PEERLAB_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
      ${extra_properties})
endfunction()

# peerlab_add_bench(<source> [DEPS ...] [QUALIFY])
#   One Google Benchmark executable named after the source's stem, with peerlab's benchmark main. QUALIFY: a suite's
#   binary that `peerlab qualify` / `peerlab bench` run (harness/qualify/suites.cc names it): part of the
#   peerlab_qualify target and installed under libexec/peerlab.
function(peerlab_add_bench source)
  cmake_parse_arguments(ARG "QUALIFY" "" "DEPS" ${ARGN})
  if(NOT PEERLAB_BUILD_BENCH)
    return()
  endif()
  get_filename_component(stem ${source} NAME_WE)
  add_executable(${stem} ${source})
  target_link_libraries(${stem} PRIVATE ${ARG_DEPS} peerlab::bench_main benchmark::benchmark)
  if(ARG_QUALIFY)
    peerlab_qualify_component(${stem})
  endif()
endfunction()

# peerlab_qualify_component(<target>...)
#   Something `peerlab qualify` or `peerlab bench` runs (a benchmark, a helper program, the fault interposer): a
#   dependency of the peerlab_qualify target (made in the top-level CMakeLists.txt) and installed with the tool:
#   executables under libexec/peerlab, shared libraries under lib. peerlab finds both relative to itself.
function(peerlab_qualify_component)
  foreach(target ${ARGN})
    set_property(GLOBAL APPEND PROPERTY PEERLAB_QUALIFY_COMPONENTS ${target})
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      # Installed, it finds the CUDA runtime shipped with it (lib/peerlab) before any other.
      file(RELATIVE_PATH to_lib /${CMAKE_INSTALL_LIBEXECDIR}/peerlab /${CMAKE_INSTALL_LIBDIR}/peerlab)
      set_property(TARGET ${target} APPEND PROPERTY INSTALL_RPATH "$ORIGIN/${to_lib}")
      install(TARGETS ${target} RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/peerlab)
    else()
      install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
    endif()
  endforeach()
endfunction()

# peerlab_add_primitive(<name>
#     SOURCES <library sources>          (library peerlab::<name>)
#     DEPS <libraries the library links>
#     CPU_TESTS <test sources>           (label cpu)
#     GPU_TESTS <test sources>           (label gpu)
#     TEST_DEPS <extra libraries for the tests>)
#   Adds a primitive: its library and its tests beside it, in one call. Its benchmark is one file in bench/.
function(peerlab_add_primitive name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;CPU_TESTS;GPU_TESTS;TEST_DEPS" ${ARGN})
  peerlab_add_library(${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS})
  foreach(t ${ARG_CPU_TESTS})
    peerlab_add_test(${t} LABEL cpu DEPS peerlab::${name} ${ARG_TEST_DEPS})
  endforeach()
  foreach(t ${ARG_GPU_TESTS})
    peerlab_add_test(${t} LABEL gpu DEPS peerlab::${name} ${ARG_TEST_DEPS})
  endforeach()
endfunction()
