# Run at every build (tools/common/CMakeLists.txt's remat_git_revision target): writes
# `#define REMAT_GIT_REVISION "..."` (git describe --always --dirty of SRC, or "unknown") to OUT,
# and rewrites OUT only when the revision changed, so a build after a commit or an edit says
# which tree it was built from while an unchanged tree recompiles nothing.
#   cmake -DSRC=<source dir> -DOUT=<header> [-DGIT=<git executable>] -P git_revision.cmake
set(rev "unknown")
if(GIT)
  execute_process(COMMAND ${GIT} describe --always --dirty --abbrev=12
                  WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE out
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND out)
    set(rev ${out})
  endif()
endif()
set(text "// Generated at build time by cmake/git_revision.cmake (tools/common/version.cpp only).\n#pragma once\n#define REMAT_GIT_REVISION \"${rev}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
