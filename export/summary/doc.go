// Package summary renders the agent's windows and final report as the
// terminal table users read while a server runs, and as JSON files.
package summary
