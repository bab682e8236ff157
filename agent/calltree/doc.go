// Package calltree is the call tree of Python stacks at the GPU launches
// that a session's phase rules did not attribute (calltree.json in the
// output directory), and what can be read from it: [Suggest] writes a
// starting rules file from the function that repeats once per step and
// its children that issue GPU work.
package calltree
