# Which Slurm stagehand is built against: spank.h, slurm.h and libslurm from ONE installation.
#
#   cmake -DSLURM_ROOT=/opt/slurm-25.11 ...   that Slurm only (PREFIX/include, PREFIX/lib*)
#   cmake ...                                 the system's (Debian: libslurm-dev, Slurm 22.05)
#
# SLURM_ROOT follows CMake's <Package>_ROOT convention (also read from the environment). When it
# is set, nothing is searched outside it, so headers of one Slurm are never mixed with another's
# libslurm; in every case the release in slurm_version.h must be the one compiled into libslurm.
#
# Sets SLURM_INCLUDE_DIR, SLURM_LIBRARY (empty when not found and not needed), SLURM_VERSION
# ("25.11.7"), SLURM_VERSION_MAJOR_MINOR ("25.11"), SLURM_PREFIX, and
# STAGEHAND_SLURM_HOSTLIST_T_IS_POINTER (hostlist_t is a pointer type before Slurm 23.11).

include(CheckCXXSourceCompiles)

if(NOT SLURM_ROOT AND DEFINED ENV{SLURM_ROOT})
  set(SLURM_ROOT "$ENV{SLURM_ROOT}")
endif()
set(SLURM_ROOT "${SLURM_ROOT}" CACHE PATH "Prefix of the Slurm to build against (empty: the system's)")

# A different SLURM_ROOT on a re-configure must not keep the previous Slurm's cached results.
if(NOT "${SLURM_ROOT}" STREQUAL "${_STAGEHAND_SLURM_ROOT_USED}")
  unset(SLURM_INCLUDE_DIR CACHE)
  unset(SLURM_LIBRARY CACHE)
  unset(STAGEHAND_SLURM_HOSTLIST_T_IS_POINTER CACHE)
  set(_STAGEHAND_SLURM_ROOT_USED "${SLURM_ROOT}" CACHE INTERNAL "SLURM_ROOT of the last configure")
endif()

if(SLURM_ROOT)
  if(NOT IS_DIRECTORY "${SLURM_ROOT}")
    message(FATAL_ERROR "SLURM_ROOT=${SLURM_ROOT} is not a directory")
  endif()
  set(_slurm_search PATHS "${SLURM_ROOT}" NO_DEFAULT_PATH)
  set(_slurm_where " under SLURM_ROOT=${SLURM_ROOT}")
else()
  set(_slurm_search)
  set(_slurm_where " in the system's paths")
endif()
find_path(SLURM_INCLUDE_DIR slurm/spank.h PATH_SUFFIXES include ${_slurm_search})
if(NOT SLURM_INCLUDE_DIR)
  message(FATAL_ERROR "slurm/spank.h not found${_slurm_where} "
                      "(install libslurm-dev, or pass -DSLURM_ROOT=PREFIX of the Slurm you run)")
endif()
find_library(SLURM_LIBRARY slurm PATH_SUFFIXES lib64 lib "lib/${CMAKE_LIBRARY_ARCHITECTURE}" ${_slurm_search})
get_filename_component(SLURM_PREFIX "${SLURM_INCLUDE_DIR}" DIRECTORY)

# The release the headers describe (what the plugin's plugin_version will say).
file(STRINGS "${SLURM_INCLUDE_DIR}/slurm/slurm_version.h" _slurm_number_line
     REGEX "^#[ \t]*define[ \t]+SLURM_VERSION_NUMBER[ \t]+0x[0-9a-fA-F]+")
if(NOT _slurm_number_line MATCHES "(0x[0-9a-fA-F]+)")
  message(FATAL_ERROR "${SLURM_INCLUDE_DIR}/slurm/slurm_version.h has no SLURM_VERSION_NUMBER")
endif()
set(_slurm_number "${CMAKE_MATCH_1}")
math(EXPR _slurm_major "(${_slurm_number} >> 16) & 0xff")
math(EXPR _slurm_minor "(${_slurm_number} >> 8) & 0xff")
math(EXPR _slurm_micro "${_slurm_number} & 0xff")
set(SLURM_VERSION_MAJOR_MINOR "${_slurm_major}.${_slurm_minor}")
if(_slurm_minor LESS 10)
  set(SLURM_VERSION_MAJOR_MINOR "${_slurm_major}.0${_slurm_minor}") # Slurm writes 22.05
endif()
set(SLURM_VERSION "${SLURM_VERSION_MAJOR_MINOR}.${_slurm_micro}")

# The release compiled into libslurm: its version string ("22.05.8") is in the binary. libslurm
# is only linked by the unit tests (the differential hostlist test), but a mismatch is refused
# whenever one is found, since it means two Slurm installations are being mixed.
if(SLURM_LIBRARY)
  get_filename_component(_slurm_lib_real "${SLURM_LIBRARY}" REALPATH)
  string(REPLACE "." "\\." _slurm_version_re "${SLURM_VERSION}")
  file(STRINGS "${_slurm_lib_real}" _slurm_lib_match REGEX "(^|[^0-9.])${_slurm_version_re}($|[^0-9.])" LIMIT_COUNT 1)
  if(NOT _slurm_lib_match)
    file(STRINGS "${_slurm_lib_real}" _slurm_lib_versions REGEX "^[0-9][0-9]\\.[0-9][0-9]\\.[0-9]+$")
    message(FATAL_ERROR
      "Slurm headers and libslurm do not match: ${SLURM_INCLUDE_DIR}/slurm/slurm_version.h is "
      "${SLURM_VERSION}, ${_slurm_lib_real} does not contain that version (it has: ${_slurm_lib_versions}). "
      "Pass -DSLURM_ROOT=PREFIX of one Slurm installation: its include/ and lib/ are used together.")
  endif()
elseif(STAGEHAND_BUILD_TESTS)
  message(FATAL_ERROR "libslurm not found${_slurm_where}: the unit tests "
                      "compare the host list parser with it (or configure with -DSTAGEHAND_BUILD_TESTS=OFF)")
endif()

# Slurm 23.11 turned hostlist_t from a pointer typedef into the struct itself.
set(CMAKE_REQUIRED_INCLUDES "${SLURM_INCLUDE_DIR}")
set(CMAKE_REQUIRED_QUIET ON)
check_cxx_source_compiles([[
  #include <type_traits>
  extern "C" {
  #include <slurm/slurm.h>
  }
  static_assert(std::is_pointer_v<hostlist_t>);
  int main() { return 0; }
]] STAGEHAND_SLURM_HOSTLIST_T_IS_POINTER)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_QUIET)

set(STAGEHAND_SLURM_VERSION "${SLURM_VERSION}" CACHE INTERNAL "The Slurm release of this build (for scripts)")
message(STATUS "stagehand: building against Slurm ${SLURM_VERSION} (headers ${SLURM_INCLUDE_DIR}, "
               "libslurm ${SLURM_LIBRARY})")
