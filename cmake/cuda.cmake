# CUDA is optional: with nvcc present, CUDA targets build for sm_80 (A100) and sm_90 (H100/H200);
# without it they are skipped with one message. Binaries never require a GPU to start.
set(EINSUMMABLE_HAVE_CUDA OFF)
if(EINSUMMABLE_CUDA)
    if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
        set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
        set(CMAKE_CUDA_ARCHITECTURES 80 90 CACHE STRING "CUDA architectures")
        # One CUDA runtime per process, the shared one: every target links CUDA::cudart, and
        # CMake would otherwise add the static runtime to whatever links CUDA objects, giving
        # the process two runtimes with separate state.
        set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
        enable_language(CUDA)
        find_package(CUDAToolkit REQUIRED)
        set(EINSUMMABLE_HAVE_CUDA ON)
    endif()
endif()
if(EINSUMMABLE_HAVE_CUDA)
    message(STATUS "einsummable: CUDA targets enabled (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                   "architectures ${CMAKE_CUDA_ARCHITECTURES})")
    # The CUDA backend is a shared-library plugin (runtime/cuda/cuda_plugin.h) built from the
    # same static libraries as the programs, so everything compiles position-independent.
    set(CMAKE_POSITION_INDEPENDENT_CODE ON)
elseif(EINSUMMABLE_CUDA)
    message(STATUS "einsummable: nvcc not found, CUDA targets skipped")
else()
    message(STATUS "einsummable: CUDA targets off (-DEINSUMMABLE_CUDA=OFF)")
endif()

# cuDNN's fused attention (kernels/cuda/attention_cudnn.cc) needs cuDNN's headers and the cuDNN
# frontend's header-only C++ API. scripts/setup installs the frontend into .venv (PyPI
# nvidia-cudnn-frontend, whose wheel ships the headers under site-packages/include); without
# either, the build leaves that path out and attention runs on the own flash kernel. cuDNN itself
# is not linked but opened at run time (kernels/cuda/cudnn_library.h), so the build needs only
# its headers and a machine without it still runs every program.
set(EINSUMMABLE_HAVE_CUDNN OFF)
if(EINSUMMABLE_HAVE_CUDA)
    file(GLOB EINSUMMABLE_CUDNN_FRONTEND_HINTS
         "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/include")
    find_path(EINSUMMABLE_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
              HINTS ${EINSUMMABLE_CUDNN_FRONTEND_HINTS})
    find_path(EINSUMMABLE_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(EINSUMMABLE_CUDNN_FRONTEND_INCLUDE_DIR AND EINSUMMABLE_CUDNN_INCLUDE_DIR)
        set(EINSUMMABLE_HAVE_CUDNN ON)
        message(STATUS "einsummable: cuDNN attention enabled (headers ${EINSUMMABLE_CUDNN_INCLUDE_DIR}, "
                       "frontend ${EINSUMMABLE_CUDNN_FRONTEND_INCLUDE_DIR}; cuDNN opened at run time)")
    else()
        message(STATUS "einsummable: cuDNN's headers or the cuDNN frontend (scripts/setup) not "
                       "found, attention runs without cuDNN")
    endif()
endif()
