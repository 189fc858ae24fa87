# Sanitizer and fuzzing builds, as options (the model: ccache's cmake/StandardSettings.cmake).
#   -DSTAGEHAND_SANITIZE=address,undefined  any compiler: every target gets -fsanitize=...; the
#                                          first report stops the program (no recovery)
#   -DSTAGEHAND_FUZZ=ON                     clang only: the core is built with coverage for
#                                          libFuzzer and tests/fuzz adds the fuzz targets
set(STAGEHAND_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined (empty: none)")
option(STAGEHAND_FUZZ "Build the libFuzzer targets in tests/fuzz (needs clang)" OFF)

if(STAGEHAND_SANITIZE)
  add_compile_options(-fsanitize=${STAGEHAND_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${STAGEHAND_SANITIZE})
endif()

if(STAGEHAND_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "STAGEHAND_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
