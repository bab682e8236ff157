// Package python finds the CPython interpreter inside a target process and
// reads its state from outside: where _PyRuntime is, which struct offsets
// the BPF frame walker must use, and what a code object address names.
//
// Supported: CPython 3.10–3.14, default (GIL) builds, x86-64 Linux. The
// offsets for 3.10–3.12 come from a table compiled against the real headers
// (reference/targets.md §4.2); from 3.13 on they are read from the target's
// own _PyRuntime.debug_offsets, and the table only cross-checks them.
//
// Every read is a racy read of a running process: nothing here stops the
// target. Readers validate what they read (object types, string headers,
// bounded loops) and report a torn or reused object as an error rather than
// a wrong name.
package python
