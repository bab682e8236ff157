package calltree

import (
	"encoding/json"
	"fmt"
	"io"
)

// FileName is the call tree's file in a session's output directory.
const FileName = "calltree.json"

// FormatVersion is the version of the file's format.
const FormatVersion = 1

// File is a session's call trees, one per process.
type File struct {
	Version   int        `json:"version"`
	Preset    string     `json:"preset"` // the rules the session ran with
	Processes []*Process `json:"processes"`
}

// Process is the call tree of one process's unattributed launches, its
// threads merged.
type Process struct {
	PID     int    `json:"pid"`
	Cmdline string `json:"cmdline,omitempty"`
	// Python is the interpreter's version ("3.11.7"); on 3.10 frames have
	// no co_qualname and Func equals Name.
	Python string `json:"python,omitempty"`
	// Windows counts the recording windows: stretches of time in which
	// the agent took the Python stack of every call (it does so while most
	// launches are unattributed), besides the stacks that carry code
	// objects it has not seen before.
	Windows int `json:"recording_windows"`
	// Stacks counts the launches whose stacks are in the tree.
	Stacks int64 `json:"stacks"`
	// NodesDropped counts stacks cut short because the tree reached its
	// bound on nodes: their launches count at the last node kept.
	NodesDropped int64 `json:"stacks_cut_at_node_bound,omitempty"`
	// Root is the tree's root (no function); its children are the
	// outermost frames.
	Root *Node `json:"root"`
}

// Node is one function on the stacks, below its caller's node.
type Node struct {
	Func      string `json:"func,omitempty"` // co_qualname (3.11+), co_name on 3.10
	Name      string `json:"name,omitempty"` // co_name
	File      string `json:"file,omitempty"` // co_filename
	FirstLine int    `json:"first_line,omitempty"`
	// Launches counts the launches made in this function or below it.
	Launches int64 `json:"launches"`
	// Self counts the launches made by this function itself (it was the
	// innermost Python frame).
	Self int64 `json:"self_launches,omitempty"`
	// GPUNs is the GPU kernel time joined to those launches.
	GPUNs int64 `json:"gpu_kernel_ns,omitempty"`
	// Switches counts the launches below this function, on one thread,
	// that came through a different child (or the function itself) than
	// the launch before: high for a function whose children take turns,
	// once per step.
	Switches int64 `json:"switches,omitempty"`
	// FirstSeen orders the nodes by their first launch (1 is first).
	FirstSeen int64   `json:"first_seen"`
	Children  []*Node `json:"children,omitempty"`
}

// Write writes f as JSON.
func Write(w io.Writer, f *File) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(f)
}

// Read reads a call tree file.
func Read(r io.Reader) (*File, error) {
	var f File
	dec := json.NewDecoder(r)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decode call tree: %w", err)
	}
	if f.Version != FormatVersion {
		return nil, fmt.Errorf("call tree format version %d, this specprof reads %d: record it again with this specprof", f.Version, FormatVersion)
	}
	return &f, nil
}
