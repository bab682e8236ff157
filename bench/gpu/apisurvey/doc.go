// Command apisurvey finds which CUDA driver entry points a program goes
// through, and how long its threads stay inside each: an entry and a return
// uprobe on every exported libcuda function whose name matches -match,
// counted per section of the program's run.
//
// The program marks its sections on stdout with a line "@@section NAME"
// and then waits for one line on stdin; "@@end" ends the last section the
// same way. apisurvey attaches its probes at the first marker (the program
// has loaded libcuda by then), reads the counters at each marker and
// answers. Other output lines pass through to stderr.
//
//	apisurvey [-match REGEX] [-json FILE] -- python3 bench/gpu/apisurvey/ops.py
package main
