//go:build ignore

// Input of `go tool cgo -godefs` (see gen.go): the Go mirror of wire.h.

package cupti

/*
#include "wire.h"
*/
import "C"

// Header starts every record: Len bytes in total (header included, a multiple of 8), Type is a
// RecordType, Flags holds Flag bits.
type Header C.struct_spw_header

// Hello is the first record of a connection: who the process is and how its times were taken.
type Hello C.struct_spw_hello

// Kernel is one kernel execution. NameID resolves through Conn.Name.
type Kernel C.struct_spw_kernel

// Memcpy is one memory copy.
type Memcpy C.struct_spw_memcpy

// Memset is one memory set.
type Memset C.struct_spw_memset

// API is one CUDA API call (CUPTI_ACTIVITY_KIND_DRIVER) with its correlation id.
type API C.struct_spw_api

// Sync is one synchronization (stream/event/context synchronize, stream wait event).
type Sync C.struct_spw_sync

// GraphNode maps a CUDA graph node to the API call that created it, or to the node it was
// cloned from.
type GraphNode C.struct_spw_graph_node

// nameHeader precedes the bytes of a NAME record.
type nameHeader C.struct_spw_name

// Overhead is CUPTI's own overhead (buffer flushes, instrumentation, ...).
type Overhead C.struct_spw_overhead

// LibStats holds the injected library's cumulative counters (a STATS record).
type LibStats C.struct_spw_stats

// Window is a window of GPU activity tracing (duty-cycled tracing): GPU records exist only for
// work launched while one was open. Close is 0 while it is open.
type Window C.struct_spw_window

// GraphExec is one execution of a CUDA graph as a whole (graph-level tracing): it replaces the
// kernel, copy and set records of that graph launch.
type GraphExec C.struct_spw_graph_exec

// RecordType is the type of a wire record.
type RecordType uint16

// Record types.
const (
	TypeHello     RecordType = C.SPW_HELLO
	TypeKernel    RecordType = C.SPW_KERNEL
	TypeMemcpy    RecordType = C.SPW_MEMCPY
	TypeMemset    RecordType = C.SPW_MEMSET
	TypeAPI       RecordType = C.SPW_API
	TypeSync      RecordType = C.SPW_SYNC
	TypeGraphNode RecordType = C.SPW_GRAPH_NODE
	TypeName      RecordType = C.SPW_NAME
	TypeOverhead  RecordType = C.SPW_OVERHEAD
	TypeStats     RecordType = C.SPW_STATS
	TypeWindow    RecordType = C.SPW_WINDOW
	TypeGraphExec RecordType = C.SPW_GRAPH_EXEC
	// NumRecordTypes is one past the largest record type.
	NumRecordTypes = C.SPW_NUM_TYPES
)

// Header flags.
const (
	FlagFlushAck = C.SPW_FLAG_FLUSH_ACK
	FlagFinal    = C.SPW_FLAG_FINAL
)

// Clock sources (Hello.ClockSource).
const (
	ClockCallback = C.SPW_CLOCK_CALLBACK
	ClockOffset   = C.SPW_CLOCK_OFFSET
)

// Graph node operations (GraphNode.Op).
const (
	GraphNodeCreated = C.SPW_GRAPH_NODE_CREATED
	GraphNodeCloned  = C.SPW_GRAPH_NODE_CLONED
)

// API domains (API.Domain).
const (
	DomainDriver  = C.SPW_DOMAIN_DRIVER
	DomainRuntime = C.SPW_DOMAIN_RUNTIME
)

// Wire constants.
const (
	WireVersion  = C.SPW_WIRE_VERSION
	MaxRecordLen = C.SPW_MAX_RECORD
	MaxNameLen   = C.SPW_MAX_NAME
	cmdFlush     = C.SPW_CMD_FLUSH
	cmdWindow    = C.SPW_CMD_WINDOW
)

// Payload sizes in bytes (header excluded).
const (
	SizeofHeader    = C.sizeof_struct_spw_header
	SizeofHello     = C.sizeof_struct_spw_hello
	SizeofKernel    = C.sizeof_struct_spw_kernel
	SizeofMemcpy    = C.sizeof_struct_spw_memcpy
	SizeofMemset    = C.sizeof_struct_spw_memset
	SizeofAPI       = C.sizeof_struct_spw_api
	SizeofSync      = C.sizeof_struct_spw_sync
	SizeofGraphNode = C.sizeof_struct_spw_graph_node
	SizeofName      = C.sizeof_struct_spw_name
	SizeofOverhead  = C.sizeof_struct_spw_overhead
	SizeofStats     = C.sizeof_struct_spw_stats
	SizeofWindow    = C.sizeof_struct_spw_window
	SizeofGraphExec = C.sizeof_struct_spw_graph_exec
)
