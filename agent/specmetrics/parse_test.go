package specmetrics

import (
	"math"
	"testing"
	"time"
)

// nan marks an absent metric in the tables.
var nan = math.NaN()

// sameFloat treats two NaNs as equal.
func sameFloat(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) < 1e-9
}

func TestParseLogLine(t *testing.T) {
	const sglBody = "Decode batch, #running-req: 1, #token: 1234, token usage: 0.01, accept len: 2.41, accept rate: 0.60, cuda graph: True, gen throughput (token/s): 71.23, #queue-req: 0, "
	tests := []struct {
		name   string
		line   string
		ok     bool
		rank   int
		accept float64
		tok    float64
		at     time.Time
	}{
		{
			name: "sglang TP prefix", ok: true, rank: 3, accept: 2.41, tok: 71.23,
			line: "[2026-03-01 12:34:56 TP3] " + sglBody,
			at:   time.Date(2026, 3, 1, 12, 34, 56, 0, time.Local),
		},
		{
			name: "sglang workload line", ok: true, rank: 0, accept: 3.00, tok: 1234.57,
			line: "[2026-11-25 08:00:01 TP0] Decode batch, #running-req: 4, #token: 2048, token usage: 0.02, accept len: 3.00, accept rate: 0.75, cuda graph: True, gen throughput (token/s): 1234.57, #queue-req: 0, ",
			at:   time.Date(2026, 11, 25, 8, 0, 1, 0, time.Local),
		},
		{
			name: "sglang DP TP EP prefix", ok: true, rank: 2, accept: 2.41, tok: 71.23,
			line: "[2026-03-01 12:34:56 DP0 TP2 EP2] " + sglBody,
			at:   time.Date(2026, 3, 1, 12, 34, 56, 0, time.Local),
		},
		{
			name: "sglang DP PP TP prefix", ok: true, rank: 5, accept: 2.41, tok: 71.23,
			line: "[2026-03-01 12:34:56 DP1 PP1 TP5] " + sglBody,
			at:   time.Date(2026, 3, 1, 12, 34, 56, 0, time.Local),
		},
		{
			name: "sglang no prefix", ok: true, rank: -1, accept: 2.41, tok: 71.23,
			line: sglBody,
		},
		{
			name: "sglang time only prefix", ok: true, rank: -1, accept: 2.41, tok: 71.23,
			line: "[2026-03-01 12:34:56] " + sglBody,
			at:   time.Date(2026, 3, 1, 12, 34, 56, 0, time.Local),
		},
		{
			name: "sglang colours and container prefix", ok: true, rank: 1, accept: 2.41, tok: 71.23,
			line: "sglang-0  | \x1b[32m[2026-03-01 12:34:56 TP1]\x1b[0m " + sglBody + "\x1b[0m",
			at:   time.Date(2026, 3, 1, 12, 34, 56, 0, time.Local),
		},
		{
			name: "sglang non-spec server has no accept len", ok: true, rank: 0, accept: nan, tok: 55.5,
			line: "[2026-03-01 12:34:56 TP0] Decode batch, #running-req: 1, #token: 99, token usage: 0.00, cuda graph: True, gen throughput (token/s): 55.50, #queue-req: 0, ",
			at:   time.Date(2026, 3, 1, 12, 34, 56, 0, time.Local),
		},
		{
			name: "sglang old dot form", ok: true, rank: 0, accept: nan, tok: 40,
			line: "[2024-06-01 01:02:03 TP0] Decode batch. #running-req: 1, #token: 99, token usage: 0.00, gen throughput (token/s): 40.00, #queue-req: 0",
			at:   time.Date(2024, 6, 1, 1, 2, 3, 0, time.Local),
		},
		{
			name: "sglang accept len 0 placeholder", ok: true, rank: 0, accept: nan, tok: 12.5,
			line: "[2026-03-01 12:34:56 TP0] Decode batch, #running-req: 1, #token: 99, token usage: 0.00, accept len: 0.00, accept rate: 0.00, cuda graph: True, gen throughput (token/s): 12.50, #queue-req: 0, ",
			at:   time.Date(2026, 3, 1, 12, 34, 56, 0, time.Local),
		},
		{
			name: "sglang accept only", ok: true, rank: 0, accept: 1.75, tok: nan,
			line: "[2026-03-01 12:34:56 TP0] Decode batch, #running-req: 1, accept len: 1.75, accept rate: 0.44",
			at:   time.Date(2026, 3, 1, 12, 34, 56, 0, time.Local),
		},
		{
			name: "sglang prefill batch", ok: false,
			line: "[2026-03-01 12:34:56 TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, ",
		},
		{
			name: "sglang decode batch without metrics", ok: false,
			line: "[2026-03-01 12:34:56 TP0] Decode batch, #running-req: 1, #token: 99, token usage: 0.00",
		},
		{
			name: "sglang garbage values", ok: false,
			line: "[2026-03-01 12:34:56 TP0] Decode batch, accept len: abc, gen throughput (token/s): -3.0, ",
		},
		{
			name: "vllm v1 spec decoding", ok: true, rank: -1, accept: 2.21, tok: nan,
			line: "INFO 03-01 12:34:56 [metrics.py:123] SpecDecoding metrics: Draft acceptance rate: 60.5%, Mean acceptance length: 2.21, Accepted: 123 tokens, Drafted: 200 tokens, Per-position acceptance rate: 0.800, 0.600, 0.410",
		},
		{
			name: "vllm newer spec decoding order", ok: true, rank: -1, accept: 3.05, tok: nan,
			line: "(APIServer pid=4242) INFO 03-01 12:34:56 [metrics.py:140] SpecDecoding metrics: Mean acceptance length: 3.05, Accepted throughput: 40.10 tokens/s, Drafted throughput: 60.00 tokens/s, Accepted: 401 tokens, Drafted: 600 tokens, Per-position acceptance rate: 0.900, 0.700, 0.450, Avg Draft acceptance rate: 66.8%",
		},
		{
			name: "vllm key=value form", ok: true, rank: -1, accept: 2.5, tok: nan,
			line: "INFO 03-01 12:34:56 spec_decode: num_drafts=100 num_accepted=150 mean_acceptance_length=2.50",
		},
		{
			name: "vllm throughput", ok: true, rank: -1, accept: nan, tok: 71.2,
			line: "INFO 03-01 12:34:56 [loggers.py:116] Engine 000: Avg prompt throughput: 12.0 tokens/s, Avg generation throughput: 71.2 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.4%, Prefix cache hit rate: 0.0%",
		},
		{
			name: "vllm throughput coloured", ok: true, rank: -1, accept: nan, tok: 71.2,
			line: "\x1b[1;36m(APIServer pid=1)\x1b[0;0m \x1b[32mINFO\x1b[0m 03-01 12:34:56 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 71.2 tokens/s, Running: 1 reqs",
		},
		{
			name: "vllm prompt throughput only", ok: false,
			line: "INFO 03-01 12:34:56 Avg prompt throughput: 12.0 tokens/s, Running: 1 reqs",
		},
		{
			name: "vllm v0 speculative metrics (no mean length)", ok: false,
			line: "INFO 03-01 12:34:56 metrics.py:455] Speculative metrics: Draft acceptance rate: 0.605, System efficiency: 0.500, Number of speculative tokens: 3, Number of accepted tokens: 123, Number of draft tokens: 200, Number of emitted tokens: 150.",
		},
		{name: "empty", ok: false, line: ""},
		{name: "unrelated", ok: false, line: "INFO:     127.0.0.1:53012 - \"POST /generate HTTP/1.1\" 200 OK"},
		{name: "binary garbage", ok: false, line: "\x00\xff\x1b[\x1b]accept len:: throughput acceptance ]["},
		{name: "truncated", ok: false, line: "[2026-03-01 12:34:56 TP0] Decode batch, #running-req: 1, accept len: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := ParseLogLine(tc.line)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v (sample %+v)", ok, tc.ok, s)
			}
			if !ok {
				return
			}
			if s.Source != SourceLog {
				t.Errorf("Source = %q, want %q", s.Source, SourceLog)
			}
			if s.Rank != tc.rank {
				t.Errorf("Rank = %d, want %d", s.Rank, tc.rank)
			}
			if !sameFloat(s.AcceptLen, tc.accept) {
				t.Errorf("AcceptLen = %v, want %v", s.AcceptLen, tc.accept)
			}
			if !sameFloat(s.TokPerSec, tc.tok) {
				t.Errorf("TokPerSec = %v, want %v", s.TokPerSec, tc.tok)
			}
			if !s.At.Equal(tc.at) {
				t.Errorf("At = %v, want %v", s.At, tc.at)
			}
		})
	}
}

func FuzzParseLogLine(f *testing.F) {
	f.Add("[2026-03-01 12:34:56 TP3] Decode batch, accept len: 2.41, gen throughput (token/s): 71.23, ")
	f.Add("SpecDecoding metrics: Mean acceptance length: 2.21, Avg generation throughput: 71.2 tokens/s")
	f.Fuzz(func(t *testing.T, line string) {
		s, ok := ParseLogLine(line)
		if !ok {
			return
		}
		if !s.HasAccept() && !s.HasTok() {
			t.Fatalf("ok sample without metrics: %+v", s)
		}
		if s.HasAccept() && s.AcceptLen < 1 {
			t.Fatalf("accept len %v < 1", s.AcceptLen)
		}
		if s.HasTok() && s.TokPerSec < 0 {
			t.Fatalf("negative throughput %v", s.TokPerSec)
		}
	})
}
