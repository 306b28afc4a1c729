# Finds every external dependency the standard way; CUDA is optional.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)

# Note [portable build]
# REMAT_PORTABLE=ON links yaml-cpp, COIN-OR (Cbc, Cgl, Clp, Osi, CoinUtils), OpenBLAS (which
# carries LAPACK too), libgfortran/libquadmath (needed by OpenBLAS's Fortran parts), libbz2 and
# libz from their static archives, so a binary needs only the C/C++ runtime (glibc, libstdc++,
# libgcc_s) and the CUDA libraries (libcudnn.so.9 and its sub-libraries, libcublas/libcublasLt)
# at run time; the CUDA runtime is always linked statically (cudart_static). Debian ships
# libgfortran.a and libquadmath.a in the compiler's own folder, hence -print-file-name.
# libstdc++ stays shared on purpose: a static one (GCC 12) calls arc4random, which needs glibc
# 2.36 and so would not start on Ubuntu 22.04 (glibc 2.35), whose libstdc++ is new enough.
# tools/scripts/build_portable.sh configures and builds this variant into build-portable/.
if(REMAT_PORTABLE)
  function(remat_find_static var name)
    find_library(${var} NAMES lib${name}.a HINTS ${ARGN})
    if(NOT ${var})
      execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=lib${name}.a
                      OUTPUT_VARIABLE _p OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(IS_ABSOLUTE "${_p}" AND EXISTS "${_p}")
        set(${var} "${_p}" CACHE FILEPATH "static lib${name}" FORCE)
      endif()
    endif()
    if(NOT ${var})
      message(FATAL_ERROR "REMAT_PORTABLE: the static library lib${name}.a was not found "
                          "(install its -dev package, or configure without -DREMAT_PORTABLE=ON)")
    endif()
  endfunction()
endif()

# yaml-cpp 0.7 names its target plain `yaml-cpp`.
add_library(remat_yaml INTERFACE)
if(REMAT_PORTABLE)
  remat_find_static(REMAT_YAML_STATIC yaml-cpp)
  target_link_libraries(remat_yaml INTERFACE ${REMAT_YAML_STATIC})
else()
  find_package(yaml-cpp CONFIG REQUIRED)
  target_link_libraries(remat_yaml INTERFACE yaml-cpp)
endif()

# CPU BLAS for the CPU backend's GEMM (OpenBLAS; its static archive also holds LAPACK).
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
add_library(remat_blas INTERFACE)
if(REMAT_PORTABLE)
  remat_find_static(REMAT_OPENBLAS_STATIC openblas ${OPENBLAS_LIBRARY_DIRS})
  remat_find_static(REMAT_GFORTRAN_STATIC gfortran)
  remat_find_static(REMAT_QUADMATH_STATIC quadmath)
  set(REMAT_BLAS_STATIC ${REMAT_OPENBLAS_STATIC} ${REMAT_GFORTRAN_STATIC} ${REMAT_QUADMATH_STATIC})
  target_include_directories(remat_blas INTERFACE ${OPENBLAS_INCLUDE_DIRS})
  target_link_libraries(remat_blas INTERFACE ${REMAT_BLAS_STATIC} Threads::Threads m)
else()
  target_link_libraries(remat_blas INTERFACE PkgConfig::OPENBLAS)
endif()

# COIN-OR Cbc (and Clp, through it) via pkg-config.
pkg_check_modules(CBC REQUIRED IMPORTED_TARGET cbc)
add_library(remat_cbc INTERFACE)
if(REMAT_PORTABLE)
  # pkg-config --static cbc: CbcSolver Cbc Cgl OsiClp ClpSolver Clp Osi CoinUtils bz2 z lapack
  # blas m; LAPACK/BLAS come from the OpenBLAS archive. One group, so order does not matter.
  set(_coin_static "")
  foreach(_lib CbcSolver Cbc Cgl OsiClp ClpSolver Clp Osi CoinUtils bz2 z)
    remat_find_static(REMAT_${_lib}_STATIC ${_lib})
    list(APPEND _coin_static ${REMAT_${_lib}_STATIC})
  endforeach()
  target_include_directories(remat_cbc INTERFACE ${CBC_INCLUDE_DIRS})
  target_link_libraries(remat_cbc INTERFACE -Wl,--start-group ${_coin_static} ${REMAT_BLAS_STATIC}
                        -Wl,--end-group Threads::Threads rt m)
else()
  target_link_libraries(remat_cbc INTERFACE PkgConfig::CBC)
endif()

# Image decoding for the image-folder and segmentation data sources: libjpeg-turbo's TurboJPEG
# API and libpng (which needs zlib), via pkg-config; static archives in the portable build.
pkg_check_modules(TURBOJPEG REQUIRED IMPORTED_TARGET libturbojpeg)
pkg_check_modules(LIBPNG REQUIRED IMPORTED_TARGET libpng)
add_library(remat_images_io INTERFACE)
if(REMAT_PORTABLE)
  remat_find_static(REMAT_TURBOJPEG_STATIC turbojpeg ${TURBOJPEG_LIBRARY_DIRS})
  remat_find_static(REMAT_PNG_STATIC png16 ${LIBPNG_LIBRARY_DIRS})
  remat_find_static(REMAT_z_STATIC z)
  target_include_directories(remat_images_io INTERFACE ${TURBOJPEG_INCLUDE_DIRS} ${LIBPNG_INCLUDE_DIRS})
  target_link_libraries(remat_images_io INTERFACE ${REMAT_TURBOJPEG_STATIC} ${REMAT_PNG_STATIC}
                        ${REMAT_z_STATIC} m)
else()
  target_link_libraries(remat_images_io INTERFACE PkgConfig::TURBOJPEG PkgConfig::LIBPNG)
endif()

# CUDA: optional. Without nvcc the project builds CPU-only and says so once.
set(REMAT_HAVE_CUDA OFF)
if(REMAT_WITH_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${REMAT_CUDA_ARCHITECTURES})
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
    if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
      set(REMAT_HAVE_CUDA ON)
      # Everything CUDA code needs, as one target: the static runtime (no driver stub),
      # cuBLAS, cuDNN (shared: they come from the CUDA install or Python wheels), NVTX headers.
      add_library(remat_cuda_deps INTERFACE)
      target_compile_definitions(remat_cuda_deps INTERFACE REMAT_HAVE_CUDA)
      target_include_directories(remat_cuda_deps INTERFACE ${CUDNN_INCLUDE_DIR})
      target_link_libraries(remat_cuda_deps INTERFACE CUDA::cudart_static CUDA::cublas
                            CUDA::cublasLt ${CUDNN_LIBRARY} CUDA::nvtx3)
    else()
      message(STATUS "remat: nvcc found but cuDNN not found; building CPU-only")
    endif()
  endif()
endif()
if(REMAT_HAVE_CUDA)
  message(STATUS "remat: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "remat: CUDA backend OFF (no nvcc/cuDNN found); building CPU-only")
  add_library(remat_cuda_deps INTERFACE)
endif()
set(REMAT_HAVE_CUDA ${REMAT_HAVE_CUDA} CACHE INTERNAL "CUDA backend built")

# MPI: optional. Data-parallel training across processes and hosts (`mpirun -np N train ...`);
# without it train runs as one process. Only MPI's C API is used.
set(REMAT_HAVE_MPI OFF)
add_library(remat_mpi_deps INTERFACE)
# The portable build leaves it out: OpenMPI is not installed on the GPU machines it is carried
# to (and they have one GPU each).
if(REMAT_WITH_MPI AND NOT REMAT_PORTABLE)
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(REMAT_HAVE_MPI ON)
    target_link_libraries(remat_mpi_deps INTERFACE MPI::MPI_C)
    target_compile_definitions(remat_mpi_deps INTERFACE OMPI_SKIP_MPICXX MPICH_SKIP_MPICXX)
    message(STATUS "remat: MPI ON (MPI ${MPI_C_VERSION}, ${MPI_C_LIB_NAMES})")
  endif()
endif()
if(NOT REMAT_HAVE_MPI)
  message(STATUS "remat: MPI OFF (not found, REMAT_WITH_MPI=OFF or REMAT_PORTABLE); train runs as one process")
endif()
set(REMAT_HAVE_MPI ${REMAT_HAVE_MPI} CACHE INTERNAL "MPI communicator built")
if(REMAT_HAVE_MPI)
  find_program(REMAT_MPIEXEC NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE})
endif()

# Note [ONNX in the portable build]
# ONNX import (models/onnx/): Debian's libonnx-dev 1.12 and libprotobuf-dev, found the standard
# way. Optional: a build without them has no `model: {onnx: ...}` and says so when asked.
# Debian ships ONNX as shared libraries only (libonnx.so.1, libonnx_proto.so.1, and
# libprotobuf.so.32 under them), so the portable build leaves the importer out rather than
# carry three libraries the GPU machines lack: it runs the zoo's YAML configs, and an imported
# model plans and trains on any machine with a normal build (the graph after import is the same).
option(REMAT_WITH_ONNX "Build the ONNX importer when ONNX and protobuf are found" ON)
set(REMAT_HAVE_ONNX OFF)
add_library(remat_onnx_deps INTERFACE)
if(REMAT_WITH_ONNX AND NOT REMAT_PORTABLE)
  find_package(Protobuf QUIET)
  find_package(ONNX CONFIG QUIET)
  if(Protobuf_FOUND AND ONNX_FOUND)
    set(REMAT_HAVE_ONNX ON)
    target_link_libraries(remat_onnx_deps INTERFACE onnx onnx_proto protobuf::libprotobuf)
    target_compile_definitions(remat_onnx_deps INTERFACE ONNX_ML=1 ONNX_NAMESPACE=onnx)
    message(STATUS "remat: ONNX import ON (ONNX ${ONNX_VERSION}, protobuf ${Protobuf_VERSION})")
  endif()
endif()
if(NOT REMAT_HAVE_ONNX)
  message(STATUS "remat: ONNX import OFF (libonnx-dev not found, REMAT_WITH_ONNX=OFF or REMAT_PORTABLE)")
endif()
set(REMAT_HAVE_ONNX ${REMAT_HAVE_ONNX} CACHE INTERNAL "ONNX importer built")

# NCCL: optional, with CUDA. The header and library ship with the CUDA toolkit here and with
# PyTorch's wheels (site-packages/nvidia/nccl) on GPU machines; NCCL_HOME may point to one.
set(REMAT_HAVE_NCCL OFF)
add_library(remat_nccl_deps INTERFACE)
if(REMAT_HAVE_CUDA AND REMAT_WITH_NCCL)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(REMAT_HAVE_NCCL ON)
    target_include_directories(remat_nccl_deps INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(remat_nccl_deps INTERFACE ${NCCL_LIBRARY})
    message(STATUS "remat: NCCL ON (${NCCL_LIBRARY})")
  endif()
endif()
if(NOT REMAT_HAVE_NCCL)
  message(STATUS "remat: NCCL OFF (needs CUDA and nccl.h/libnccl); data parallel on CUDA unavailable")
endif()
set(REMAT_HAVE_NCCL ${REMAT_HAVE_NCCL} CACHE INTERNAL "NCCL communicator built")
