# The CUDA language for the CUDA backend (COLIBRI_CUDA=ON).
#
# Architectures: SASS for sm_80 (A100), sm_86 (RTX 30xx / A10), sm_89 (L4 / RTX 40xx) and
# sm_90 (H100 / H200), PTX only for sm_90 (newer GPUs JIT it), which keeps the compile to one
# PTX pass. -DCMAKE_CUDA_ARCHITECTURES=90 builds one architecture (scripts/gpu_check.sh).
# nvcc is taken from CMAKE_CUDA_COMPILER, else PATH, else /usr/local/cuda/bin/nvcc.
include_guard(GLOBAL)

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80-real;86-real;89-real;90" CACHE STRING "CUDA architectures")
endif()
if(NOT CMAKE_CUDA_COMPILER)
  find_program(COLIBRI_NVCC nvcc HINTS /usr/local/cuda/bin)
  if(NOT COLIBRI_NVCC)
    message(FATAL_ERROR "COLIBRI_CUDA=ON but nvcc was not found: install the CUDA toolkit or pass "
                        "-DCMAKE_CUDA_COMPILER=/path/to/nvcc")
  endif()
  set(CMAKE_CUDA_COMPILER ${COLIBRI_NVCC})
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
message(STATUS "colibri: CUDA backend with nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")

# Warnings of the host code nvcc compiles (device code warnings are nvcc's own).
set(COLIBRI_CUDA_FLAGS
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
if(COLIBRI_WERROR)
  list(APPEND COLIBRI_CUDA_FLAGS $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror --Werror=all-warnings>)
endif()
