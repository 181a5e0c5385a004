# Installs the build tree BUILD_DIR into WORK_DIR/prefix, then configures, builds and runs the consumer project in
# SOURCE_DIR against it with find_package(peerlab). Fails on the first step that fails.
file(REMOVE_RECURSE "${WORK_DIR}")
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok")
endfunction()
step("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
if(NOT EXISTS "${WORK_DIR}/prefix/lib/cmake/peerlab/peerlabConfig.cmake")
  message(FATAL_ERROR "install wrote no peerlabConfig.cmake")
endif()
step("configure the consumer" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build"
     "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DCMAKE_BUILD_TYPE=Release)
step("build the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("run the consumer" "${WORK_DIR}/build/consumer")
