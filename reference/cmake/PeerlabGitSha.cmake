# Writes OUTPUT (a C++ source defining peerlab::buildGitSha()) with the commit of SOURCE_DIR, run at build time by
# the peerlab_git_sha target so the sha never goes stale after a configure. The commit comes from, in order: the
# PEERLAB_GIT_SHA environment variable, a `.git-sha` file in SOURCE_DIR (a tree copied without its history), or git
# when SOURCE_DIR is itself the top of a git work tree (never a repository that merely encloses it); else "unknown".
# OUTPUT is rewritten only when the sha changed, so an unchanged commit rebuilds nothing.
set(sha "")
if(DEFINED ENV{PEERLAB_GIT_SHA} AND NOT "$ENV{PEERLAB_GIT_SHA}" STREQUAL "")
  set(sha "$ENV{PEERLAB_GIT_SHA}")
elseif(EXISTS "${SOURCE_DIR}/.git-sha")
  file(STRINGS "${SOURCE_DIR}/.git-sha" sha LIMIT_COUNT 1)
else()
  find_program(GIT_EXECUTABLE git)
  if(GIT_EXECUTABLE)
    execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --show-toplevel WORKING_DIRECTORY "${SOURCE_DIR}"
                    OUTPUT_VARIABLE top OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0)
      file(REAL_PATH "${top}" top)
      file(REAL_PATH "${SOURCE_DIR}" src)
      if(top STREQUAL src)
        execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
                        OUTPUT_VARIABLE sha OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      endif()
    endif()
  endif()
endif()
string(STRIP "${sha}" sha)
if(NOT sha MATCHES "^[0-9a-fA-F]+$")
  set(sha unknown)
endif()
set(content "// Generated at build time by reference/cmake/PeerlabGitSha.cmake.\nnamespace peerlab::report {\nconst char* buildGitSha() { return \"${sha}\"; }\n}  // namespace peerlab::report\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUTPUT}" "${content}")
endif()
