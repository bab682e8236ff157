package proc

import (
	"path"
	"regexp"
)

// Basenames only: the directory differs between distributions, conda, pip
// wheels (nvidia-nccl-cu12 ships lib/libnccl.so.2) and containers.
var (
	cudaDriverRE = regexp.MustCompile(`^libcuda\.so(\.\d+)*$`)
	ncclRE       = regexp.MustCompile(`^libnccl\.so(\.\d+)*$`)
	libPythonRE  = regexp.MustCompile(`^libpython3\.\d+t?\.so`)
)

// IsCUDADriver reports whether path names the CUDA driver API library
// (libcuda.so, libcuda.so.1, libcuda.so.550.54.15, ...), where the launch
// and synchronisation uprobes go. The runtime (libcudart) does not match.
func IsCUDADriver(p string) bool { return cudaDriverRE.MatchString(path.Base(p)) }

// IsNCCL reports whether path names the NCCL library (libnccl.so[.N...]).
func IsNCCL(p string) bool { return ncclRE.MatchString(path.Base(p)) }

// IsLibPython reports whether path names a shared CPython 3 library
// (libpython3.X.so..., including free-threaded libpython3.Xt.so...).
func IsLibPython(p string) bool { return libPythonRE.MatchString(path.Base(p)) }
