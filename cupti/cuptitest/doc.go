// Package cuptitest encodes records of the CUPTI library's wire format
// (cupti/wire.h) for tests that play the injected library on a socket: a
// forged peer, a library that dies before its final counters.
package cuptitest
