# cmake -DREADELF=<readelf> -DFILES=<binary;...> -DLIBRARIES=<name;...> -P check_no_linked_libraries.cmake
#
# Fails when one of FILES has a NEEDED entry starting with one of LIBRARIES. The CUDA kernels
# open cuDNN (and through the cuDNN frontend NVRTC) at run time (kernels/cuda/cudnn_library.h):
# a binary that links either does not start (exit 127) where it is missing, instead of running
# attention on the flash kernel.
if(NOT READELF)
    message(FATAL_ERROR "READELF is not set (no readelf found at configure time)")
endif()
foreach(file IN LISTS FILES)
    if(NOT EXISTS "${file}")
        message(FATAL_ERROR "${file} does not exist: build it first")
    endif()
    execute_process(COMMAND "${READELF}" -d "${file}"
                    OUTPUT_VARIABLE dynamic ERROR_VARIABLE error RESULT_VARIABLE result)
    if(NOT result EQUAL 0)
        message(FATAL_ERROR "${READELF} -d ${file} failed (${result}): ${error}")
    endif()
    foreach(library IN LISTS LIBRARIES)
        string(REGEX MATCH "\\(NEEDED\\)[^\n]*\\[${library}[^]\n]*\\]" needed "${dynamic}")
        if(needed)
            message(FATAL_ERROR "${file} links ${library} (${needed}); it must be opened at run "
                                "time instead (kernels/cuda/cudnn_library.h)")
        endif()
    endforeach()
    message(STATUS "${file}: no NEEDED entry for ${LIBRARIES}")
endforeach()
