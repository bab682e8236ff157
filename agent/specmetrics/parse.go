package specmetrics

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Sources of a [Sample].
const (
	SourceLog        = "log"
	SourcePrometheus = "prometheus"
)

// Sample is one reading of the server's own speculative-decoding metrics.
type Sample struct {
	// Source is [SourceLog] or [SourcePrometheus].
	Source string
	// Rank is the TP rank from the log prefix or the tp_rank label, -1 if
	// unknown.
	Rank int
	// AcceptLen is the mean number of tokens accepted per verify step
	// (bonus token included, so ≥ 1), NaN if the reading has none.
	AcceptLen float64
	// TokPerSec is the generation throughput in tokens/s, NaN if the
	// reading has none.
	TokPerSec float64
	// At is when the reading was taken: the log prefix's time (second
	// resolution) or the scrape time; zero if unknown.
	At time.Time
}

// HasAccept reports whether s carries an accept length.
func (s Sample) HasAccept() bool { return !math.IsNaN(s.AcceptLen) }

// HasTok reports whether s carries a throughput.
func (s Sample) HasTok() bool { return !math.IsNaN(s.TokPerSec) }

var (
	// ansiRE matches CSI sequences (colours, cursor moves) that colouring
	// log handlers wrap around levels and prefixes.
	ansiRE = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

	// SGLang: "[2026-03-01 12:00:00 DP0 TP3 EP3] Decode batch, …"; older
	// versions wrote "Decode batch." instead of "Decode batch,".
	sglPrefixRE = regexp.MustCompile(`\[([^\[\]]*)\]\s*Decode batch\b`)
	sglRankRE   = regexp.MustCompile(`(?:^|\s)TP(\d+)(?:\s|$)`)
	sglTimeRE   = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}`)
	sglAcceptRE = regexp.MustCompile(`\baccept len:\s*(` + numPat + `)`)
	sglTokRE    = regexp.MustCompile(`\bgen throughput \(token/s\):\s*(` + numPat + `)`)

	// vLLM v1: "SpecDecoding metrics: … Mean acceptance length: 2.21, …";
	// some builds log "mean_acceptance_length=2.21".
	vllmAcceptRE = regexp.MustCompile(`(?i)\bmean[ _]acceptance[ _]length\s*[:=]\s*(` + numPat + `)`)
	vllmTokRE    = regexp.MustCompile(`\bAvg generation throughput:\s*(` + numPat + `)\s*tokens/s`)
)

// Substrings every recognised line holds; checked before any regex runs.
const (
	sglMarker        = "Decode batch"
	vllmTokMarker    = "throughput"
	vllmAcceptMarker = "cceptance" // "Mean acceptance", "mean_acceptance"
)

const numPat = `[0-9][0-9.eE+-]*`

// sglTimeLayout is SGLang's logging datefmt; it logs in local time.
const sglTimeLayout = "2006-01-02 15:04:05"

// ParseLogLine extracts a [Sample] from one line of a server's output:
// SGLang's "Decode batch" line (with or without its "[time DPx TPy]"
// prefix) or vLLM's "SpecDecoding metrics" and "Avg generation throughput"
// lines. ANSI colour codes and any logging prefix are tolerated. ok is
// false when the line carries neither an accept length nor a throughput.
func ParseLogLine(line string) (s Sample, ok bool) {
	// Cheap reject first: LineScanner runs this on every line of the
	// server's output.
	sgl := strings.Contains(line, sglMarker)
	if !sgl && !strings.Contains(line, vllmTokMarker) && !strings.Contains(line, vllmAcceptMarker) {
		return Sample{}, false
	}
	if strings.IndexByte(line, 0x1b) >= 0 {
		line = ansiRE.ReplaceAllString(line, "")
	}
	s = Sample{Source: SourceLog, Rank: -1, AcceptLen: math.NaN(), TokPerSec: math.NaN()}
	var acceptRE, tokRE *regexp.Regexp
	if sgl {
		acceptRE, tokRE = sglAcceptRE, sglTokRE
		if m := sglPrefixRE.FindStringSubmatch(line); m != nil {
			if r := sglRankRE.FindStringSubmatch(m[1]); r != nil {
				if n, err := strconv.Atoi(r[1]); err == nil {
					s.Rank = n
				}
			}
			if t := sglTimeRE.FindString(m[1]); t != "" {
				if at, err := time.ParseInLocation(sglTimeLayout, strings.Replace(t, "T", " ", 1), time.Local); err == nil {
					s.At = at
				}
			}
		}
	} else {
		acceptRE, tokRE = vllmAcceptRE, vllmTokRE
	}
	if m := acceptRE.FindStringSubmatch(line); m != nil {
		s.AcceptLen = acceptValue(m[1])
	}
	if m := tokRE.FindStringSubmatch(line); m != nil {
		s.TokPerSec = rateValue(m[1])
	}
	if !s.HasAccept() && !s.HasTok() {
		return Sample{}, false
	}
	return s, true
}

// acceptValue parses an accept length; see acceptOf.
func acceptValue(v string) float64 { return acceptOf(parseNum(v)) }

// rateValue parses a throughput; see rateOf.
func rateValue(v string) float64 { return rateOf(parseNum(v)) }

// acceptOf is f as an accept length: values below 1 become NaN because
// servers report 0 as a placeholder for "no verify step in this interval",
// while a real accept length counts the bonus token and is at least 1.
func acceptOf(f float64) float64 {
	if f < 1 || math.IsInf(f, 0) {
		return math.NaN()
	}
	return f
}

// rateOf is f if it is a non-negative finite number, NaN otherwise.
func rateOf(f float64) float64 {
	if f < 0 || math.IsInf(f, 0) {
		return math.NaN()
	}
	return f
}

// parseNum parses a number as printed in a log line, NaN if it is none.
func parseNum(v string) float64 {
	f, err := strconv.ParseFloat(strings.TrimRight(v, "."), 64)
	if err != nil {
		return math.NaN()
	}
	return f
}
