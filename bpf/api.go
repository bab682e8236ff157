package bpf

import "fmt"

// API identifies a hooked entry point family (cuLaunchKernel and its _ptsz
// variant share one id). Values mirror enum sp_api in c/api.h.
type API uint32

// Hooked API families.
const (
	APILaunchKernel      API = API(specprofSpApiSP_API_LAUNCH_KERNEL)
	APILaunchKernelEx    API = API(specprofSpApiSP_API_LAUNCH_KERNEL_EX)
	APIGraphLaunch       API = API(specprofSpApiSP_API_GRAPH_LAUNCH)
	APIMemcpyDtoDAsync   API = API(specprofSpApiSP_API_MEMCPY_DTOD_ASYNC)
	APIMemsetAsync       API = API(specprofSpApiSP_API_MEMSET_ASYNC)
	APIMemcpyDtoD        API = API(specprofSpApiSP_API_MEMCPY_DTOD)
	APIMemset            API = API(specprofSpApiSP_API_MEMSET)
	APIStreamSync        API = API(specprofSpApiSP_API_STREAM_SYNC)
	APIEventSync         API = API(specprofSpApiSP_API_EVENT_SYNC)
	APICtxSync           API = API(specprofSpApiSP_API_CTX_SYNC)
	APIMemcpyDtoH        API = API(specprofSpApiSP_API_MEMCPY_DTOH)
	APIMemcpyDtoHAsync   API = API(specprofSpApiSP_API_MEMCPY_DTOH_ASYNC)
	APIMemcpyHtoD        API = API(specprofSpApiSP_API_MEMCPY_HTOD)
	APIMemcpyHtoDAsync   API = API(specprofSpApiSP_API_MEMCPY_HTOD_ASYNC)
	APIMemcpy            API = API(specprofSpApiSP_API_MEMCPY)
	APIMemcpyAsync       API = API(specprofSpApiSP_API_MEMCPY_ASYNC)
	APIBeginCapture      API = API(specprofSpApiSP_API_BEGIN_CAPTURE)
	APIEndCapture        API = API(specprofSpApiSP_API_END_CAPTURE)
	APIGraphInstantiate  API = API(specprofSpApiSP_API_GRAPH_INSTANTIATE)
	APIEventRecord       API = API(specprofSpApiSP_API_EVENT_RECORD)
	APIStreamWaitEvent   API = API(specprofSpApiSP_API_STREAM_WAIT_EVENT)
	APINcclAllReduce     API = API(specprofSpApiSP_API_NCCL_ALL_REDUCE)
	APINcclAllGather     API = API(specprofSpApiSP_API_NCCL_ALL_GATHER)
	APINcclReduceScatter API = API(specprofSpApiSP_API_NCCL_REDUCE_SCATTER)
	APINcclBroadcast     API = API(specprofSpApiSP_API_NCCL_BROADCAST)
	APINcclReduce        API = API(specprofSpApiSP_API_NCCL_REDUCE)
	APINcclSend          API = API(specprofSpApiSP_API_NCCL_SEND)
	APINcclRecv          API = API(specprofSpApiSP_API_NCCL_RECV)
	APINcclGroupStart    API = API(specprofSpApiSP_API_NCCL_GROUP_START)
	APINcclGroupEnd      API = API(specprofSpApiSP_API_NCCL_GROUP_END)
)

// Library tells which shared object a hook lives in.
type Library int

// Libraries specprof attaches to.
const (
	LibCUDA Library = iota + 1 // libcuda.so.1, the CUDA driver
	LibNCCL                    // libnccl.so.2
)

func (l Library) String() string {
	switch l {
	case LibCUDA:
		return "libcuda"
	case LibNCCL:
		return "libnccl"
	}
	return fmt.Sprintf("library(%d)", int(l))
}

// Hook describes one hooked API family: the BPF programs and every exported
// symbol they attach to. Real drivers export several variants of each entry
// point (torch.cuda.synchronize goes through a variant), so all are hooked.
type Hook struct {
	API     API
	Name    string   // canonical name, e.g. "cuLaunchKernel"
	Lib     Library  // library that exports the symbols
	Prog    string   // entry program (section name in the object)
	RetProg string   // return program, "" when no duration is needed
	Symbols []string // exported symbol names
}

// Hooks lists every hooked API family.
var Hooks = []Hook{
	{APILaunchKernel, "cuLaunchKernel", LibCUDA, "sp_launch_kernel", "", []string{"cuLaunchKernel", "cuLaunchKernel_ptsz"}},
	{APILaunchKernelEx, "cuLaunchKernelEx", LibCUDA, "sp_launch_kernel_ex", "", []string{"cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"}},
	{APIGraphLaunch, "cuGraphLaunch", LibCUDA, "sp_graph_launch", "", []string{"cuGraphLaunch", "cuGraphLaunch_ptsz"}},
	{APIStreamSync, "cuStreamSynchronize", LibCUDA, "sp_stream_sync", "sp_stream_sync_ret", []string{"cuStreamSynchronize", "cuStreamSynchronize_ptsz"}},
	{APIEventSync, "cuEventSynchronize", LibCUDA, "sp_event_sync", "sp_event_sync_ret", []string{"cuEventSynchronize"}},
	{APICtxSync, "cuCtxSynchronize", LibCUDA, "sp_ctx_sync", "sp_ctx_sync_ret", []string{"cuCtxSynchronize", "cuCtxSynchronize_v2"}},
	{APIMemcpyDtoH, "cuMemcpyDtoH", LibCUDA, "sp_memcpy_dtoh", "sp_memcpy_dtoh_ret", []string{"cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"}},
	// Copies with host memory on one side block the CPU when it is pageable
	// (torch's .tolist() / .item() / .cpu() wait inside the copy, not in the
	// stream synchronisation after it): timed as sync wait, and joined as
	// launches. Survey of the real driver: docs/benchmarks/h200.md §23.
	{APIMemcpyDtoHAsync, "cuMemcpyDtoHAsync", LibCUDA, "sp_memcpy_dtoh_async", "sp_memcpy_dtoh_async_ret", []string{"cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"}},
	{APIMemcpyHtoD, "cuMemcpyHtoD", LibCUDA, "sp_memcpy_htod", "sp_memcpy_htod_ret", []string{"cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"}},
	{APIMemcpyHtoDAsync, "cuMemcpyHtoDAsync", LibCUDA, "sp_memcpy_htod_async", "sp_memcpy_htod_async_ret", []string{"cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"}},
	{APIMemcpy, "cuMemcpy", LibCUDA, "sp_memcpy", "sp_memcpy_ret", []string{"cuMemcpy", "cuMemcpy_ptds"}},
	{APIMemcpyAsync, "cuMemcpyAsync", LibCUDA, "sp_memcpy_async", "sp_memcpy_async_ret", []string{"cuMemcpyAsync", "cuMemcpyAsync_ptsz"}},
	// Device-side copies and sets never wait for the GPU: launches only.
	{APIMemcpyDtoDAsync, "cuMemcpyDtoDAsync", LibCUDA, "sp_memcpy_dtod_async", "", []string{"cuMemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz"}},
	{APIMemsetAsync, "cuMemsetAsync", LibCUDA, "sp_memset_async", "", []string{"cuMemsetD8Async", "cuMemsetD8Async_ptsz", "cuMemsetD16Async", "cuMemsetD16Async_ptsz", "cuMemsetD32Async", "cuMemsetD32Async_ptsz"}},
	{APIMemcpyDtoD, "cuMemcpyDtoD", LibCUDA, "sp_memcpy_dtod", "", []string{"cuMemcpyDtoD", "cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds"}},
	{APIMemset, "cuMemset", LibCUDA, "sp_memset", "", []string{"cuMemsetD8", "cuMemsetD8_v2", "cuMemsetD8_v2_ptds", "cuMemsetD16", "cuMemsetD16_v2", "cuMemsetD16_v2_ptds", "cuMemsetD32", "cuMemsetD32_v2", "cuMemsetD32_v2_ptds"}},
	{APIBeginCapture, "cuStreamBeginCapture", LibCUDA, "sp_begin_capture", "", []string{"cuStreamBeginCapture", "cuStreamBeginCapture_v2", "cuStreamBeginCapture_ptsz", "cuStreamBeginCapture_v2_ptsz"}},
	{APIEndCapture, "cuStreamEndCapture", LibCUDA, "sp_end_capture", "", []string{"cuStreamEndCapture", "cuStreamEndCapture_ptsz"}},
	{APIGraphInstantiate, "cuGraphInstantiate", LibCUDA, "sp_graph_instantiate", "", []string{"cuGraphInstantiate", "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags"}},
	{APIEventRecord, "cuEventRecord", LibCUDA, "sp_event_record", "", []string{"cuEventRecord", "cuEventRecord_ptsz", "cuEventRecordWithFlags", "cuEventRecordWithFlags_ptsz"}},
	{APIStreamWaitEvent, "cuStreamWaitEvent", LibCUDA, "sp_stream_wait_event", "", []string{"cuStreamWaitEvent", "cuStreamWaitEvent_ptsz"}},
	{APINcclAllReduce, "ncclAllReduce", LibNCCL, "sp_nccl_all_reduce", "", []string{"ncclAllReduce"}},
	{APINcclAllGather, "ncclAllGather", LibNCCL, "sp_nccl_all_gather", "", []string{"ncclAllGather"}},
	{APINcclReduceScatter, "ncclReduceScatter", LibNCCL, "sp_nccl_reduce_scatter", "", []string{"ncclReduceScatter"}},
	{APINcclBroadcast, "ncclBroadcast", LibNCCL, "sp_nccl_broadcast", "", []string{"ncclBroadcast"}},
	{APINcclReduce, "ncclReduce", LibNCCL, "sp_nccl_reduce", "", []string{"ncclReduce"}},
	{APINcclSend, "ncclSend", LibNCCL, "sp_nccl_send", "", []string{"ncclSend"}},
	{APINcclRecv, "ncclRecv", LibNCCL, "sp_nccl_recv", "", []string{"ncclRecv"}},
	{APINcclGroupStart, "ncclGroupStart", LibNCCL, "sp_nccl_group_start", "", []string{"ncclGroupStart"}},
	{APINcclGroupEnd, "ncclGroupEnd", LibNCCL, "sp_nccl_group_end", "", []string{"ncclGroupEnd"}},
}

var hookByAPI = func() map[API]*Hook {
	m := make(map[API]*Hook, len(Hooks))
	for i := range Hooks {
		m[Hooks[i].API] = &Hooks[i]
	}
	return m
}()

// String returns the canonical API name.
func (a API) String() string {
	if h, ok := hookByAPI[a]; ok {
		return h.Name
	}
	return fmt.Sprintf("api(%d)", uint32(a))
}

// IsLaunch reports whether the API submits GPU work (kernel or graph).
func (a API) IsLaunch() bool {
	return a == APILaunchKernel || a == APILaunchKernelEx || a == APIGraphLaunch
}

// IsCopy reports whether the API is a memory copy or set: work on the GPU
// that CUPTI reports as memcpy / memset records, joined like a launch's.
func (a API) IsCopy() bool {
	switch a {
	case APIMemcpyDtoH, APIMemcpyDtoHAsync, APIMemcpyHtoD, APIMemcpyHtoDAsync, APIMemcpy, APIMemcpyAsync,
		APIMemcpyDtoDAsync, APIMemsetAsync, APIMemcpyDtoD, APIMemset:
		return true
	}
	return false
}

// IsMemset reports whether the API is a memory set (its Arg0 counts
// elements, not bytes).
func (a API) IsMemset() bool { return a == APIMemsetAsync || a == APIMemset }

// IsCollective reports whether the API is an NCCL collective or point-to-point call.
func (a API) IsCollective() bool {
	return a >= APINcclAllReduce && a <= APINcclRecv
}
