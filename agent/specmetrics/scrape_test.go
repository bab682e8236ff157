package specmetrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// seqServer serves bodies[i] on the i-th request, the last one from then
// on.
type seqServer struct {
	mu     sync.Mutex
	bodies []string
	n      int
	accept string // Accept header of the latest request
}

func (s *seqServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	body := s.bodies[min(s.n, len(s.bodies)-1)]
	s.n++
	s.accept = r.Header.Get("Accept")
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprint(w, body)
}

// fakeClock advances by step on every call.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(step); return t }
}

func sglangExposition(accept0, tok0, accept1, tok1 float64) string {
	const lbl = `engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct",pp_rank="0"`
	return fmt.Sprintf(`# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{%[1]s,tp_rank="0"} 1.0
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{%[1]s,tp_rank="0"} %[2]g
sglang:spec_accept_length{%[1]s,tp_rank="1"} %[4]g
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{tp_rank="0",%[1]s} %[3]g
sglang:gen_throughput{%[1]s,tp_rank="1"} %[5]g
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{%[1]s,le="0.1"} 3.0
sglang:time_to_first_token_seconds_bucket{%[1]s,le="+Inf"} 4.0
sglang:time_to_first_token_seconds_count{%[1]s} 4.0
sglang:time_to_first_token_seconds_sum{%[1]s} 0.5
`, lbl, accept0, tok0, accept1, tok1)
}

// vllmExposition is what prometheus_client writes for vLLM v1 with two
// engines (data parallelism): each counter value is split between them.
func vllmExposition(accepted, drafts, genTok float64) string {
	var b strings.Builder
	counter := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s_total %s\n# TYPE %s_total counter\n", name, help, name)
		fmt.Fprintf(&b, "%s_total{engine=\"0\",model_name=\"m\"} %g\n", name, v/2)
		fmt.Fprintf(&b, "%s_total{engine=\"1\",model_name=\"m\"} %g\n", name, v-v/2)
		fmt.Fprintf(&b, "# HELP %s_created %s\n# TYPE %s_created gauge\n", name, help, name)
		fmt.Fprintf(&b, "%s_created{engine=\"0\",model_name=\"m\"} 1.7724e+09\n", name)
	}
	counter("vllm:prompt_tokens", "Number of prefill tokens processed.", 12345)
	counter("vllm:generation_tokens", "Number of generation tokens processed.", genTok)
	counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", drafts)
	counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", drafts*3)
	counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", accepted)
	b.WriteString("# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.\n")
	b.WriteString("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n")
	fmt.Fprintf(&b, "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"m\",position=\"0\"} %g\n", accepted)
	b.WriteString("# HELP vllm:num_requests_running Number of requests running.\n# TYPE vllm:num_requests_running gauge\n")
	b.WriteString("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.0\n")
	return b.String()
}

func newTestScraper(url string, tr *Tracker) *Scraper {
	s := NewScraper(url, tr)
	s.now = fakeClock(5 * time.Second)
	return s
}

func checkSamples(t *testing.T, what string, got []Sample, want []Sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d samples %+v, want %d %+v", what, len(got), got, len(want), want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Source != SourcePrometheus || g.Rank != w.Rank || !sameFloat(g.AcceptLen, w.AcceptLen) ||
			!sameFloat(g.TokPerSec, w.TokPerSec) || g.At.IsZero() {
			t.Errorf("%s: sample %d = %+v, want %+v", what, i, g, w)
		}
	}
}

func TestScraperSGLang(t *testing.T) {
	srv := &seqServer{bodies: []string{
		sglangExposition(2.41, 71.23, 2.41, 71.23),
		sglangExposition(2.41, 71.23, 2.41, 71.23), // unchanged: repeats, skipped
		sglangExposition(2.41, 71.23, 3.10, 80.5),  // rank 1 logged again
		sglangExposition(0, 12.5, 0, 12.5),         // 0 = no verify step in the interval
	}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var tr Tracker
	s := newTestScraper(ts.URL+"/metrics", &tr)
	ctx := context.Background()

	got, err := s.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkSamples(t, "scrape 1", got, []Sample{{Rank: 0, AcceptLen: 2.41, TokPerSec: 71.23}, {Rank: 1, AcceptLen: 2.41, TokPerSec: 71.23}})
	if !strings.HasPrefix(srv.accept, "text/plain") {
		t.Errorf("Accept header %q", srv.accept)
	}
	got, err = s.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkSamples(t, "scrape 2", got, nil)
	got, err = s.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkSamples(t, "scrape 3", got, []Sample{{Rank: 1, AcceptLen: 3.10, TokPerSec: 80.5}})
	got, err = s.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkSamples(t, "scrape 4", got, []Sample{{Rank: 0, AcceptLen: nan, TokPerSec: 12.5}, {Rank: 1, AcceptLen: nan, TokPerSec: 12.5}})

	tot := tr.Total()
	if tot.Samples != 5 || !sameFloat(tot.AcceptLen, (2.41+2.41+3.10)/3) || !sameFloat(tot.TokPerSec, (71.23+71.23+80.5+12.5+12.5)/5) {
		t.Errorf("total %+v", tot)
	}
	if len(tot.Ranks) != 2 {
		t.Errorf("ranks %+v", tot.Ranks)
	}
	if s.Err() != nil || s.Failures() != 0 {
		t.Errorf("Err %v, Failures %d", s.Err(), s.Failures())
	}
}

func TestScraperSGLangNoRankLabel(t *testing.T) {
	ts := httptest.NewServer(&seqServer{bodies: []string{
		"# TYPE sglang:gen_throughput gauge\nsglang:gen_throughput{model_name=\"m\"} 33\n",
	}})
	defer ts.Close()
	got, err := newTestScraper(ts.URL, nil).Scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkSamples(t, "scrape", got, []Sample{{Rank: -1, AcceptLen: nan, TokPerSec: 33}})
}

func TestScraperVLLMDeltas(t *testing.T) {
	srv := &seqServer{bodies: []string{
		vllmExposition(150, 100, 1000), // baseline
		vllmExposition(270, 200, 1500), // +120 accepted / +100 drafts, +500 tok in 5 s
		vllmExposition(270, 200, 1500), // idle: nothing
		vllmExposition(270, 200, 1750), // tokens without drafts (e.g. prefill-only step): tok only
		vllmExposition(10, 5, 20),      // restart: counters went down, new baseline
		vllmExposition(40, 15, 420),    // +30/+10, +400 tok
	}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var tr Tracker
	s := newTestScraper(ts.URL, &tr)
	ctx := context.Background()
	want := [][]Sample{
		nil,
		{{Rank: -1, AcceptLen: 1 + 120.0/100, TokPerSec: 500.0 / 5}},
		nil,
		{{Rank: -1, AcceptLen: nan, TokPerSec: 250.0 / 5}},
		nil,
		{{Rank: -1, AcceptLen: 1 + 30.0/10, TokPerSec: 400.0 / 5}},
	}
	for i, w := range want {
		got, err := s.Scrape(ctx)
		if err != nil {
			t.Fatalf("scrape %d: %v", i+1, err)
		}
		checkSamples(t, fmt.Sprintf("scrape %d", i+1), got, w)
	}
	tot := tr.Total()
	if tot.Samples != 3 || !sameFloat(tot.AcceptLen, (2.2+4)/2) || !sameFloat(tot.TokPerSec, (100.0+50+80)/3) {
		t.Errorf("total %+v", tot)
	}
	if tot.Ranks != nil {
		t.Errorf("vLLM samples have no rank; got %+v", tot.Ranks)
	}
}

func TestScraperVLLMRealTimeDelta(t *testing.T) {
	srv := &seqServer{bodies: []string{vllmExposition(0, 0, 0), vllmExposition(20, 10, 100)}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	s := NewScraper(ts.URL, nil)
	if _, err := s.Scrape(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	got, err := s.Scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// 100 tokens in ≥ 20 ms: at most 5000 tok/s, and positive.
	if len(got) != 1 || !sameFloat(got[0].AcceptLen, 3) || !(got[0].TokPerSec > 0 && got[0].TokPerSec <= 5000) {
		t.Fatalf("got %+v", got)
	}
}

func TestScraperOpenMetricsStyleCounter(t *testing.T) {
	// TYPE names the family without "_total"; the series still counts.
	body := func(v int) string {
		return fmt.Sprintf("# HELP vllm:generation_tokens Generated.\n# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{engine=\"0\"} %d\n", v)
	}
	ts := httptest.NewServer(&seqServer{bodies: []string{body(100), body(600)}})
	defer ts.Close()
	s := newTestScraper(ts.URL, nil)
	if _, err := s.Scrape(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := s.Scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkSamples(t, "scrape 2", got, []Sample{{Rank: -1, AcceptLen: nan, TokPerSec: 100}})
}

func TestScraperHTTPError(t *testing.T) {
	fail := true
	var mu sync.Mutex
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, sglangExposition(2, 50, 2, 50))
	}))
	defer ts.Close()
	var tr Tracker
	s := newTestScraper(ts.URL, &tr)
	for range 3 {
		if _, err := s.Scrape(context.Background()); err == nil {
			t.Fatal("Scrape of a 500 succeeded")
		}
	}
	var se *StatusError
	if err := s.Err(); !errors.As(err, &se) || se.Code != http.StatusInternalServerError {
		t.Fatalf("Err() = %v, want a StatusError 500", err)
	}
	if !strings.Contains(s.Err().Error(), "scrape metrics") || !strings.Contains(s.Err().Error(), "500") {
		t.Errorf("error text %q", s.Err())
	}
	if s.Failures() != 3 || tr.Total().Samples != 0 {
		t.Errorf("Failures %d, samples %d", s.Failures(), tr.Total().Samples)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if _, err := s.Scrape(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Err() != nil || s.Failures() != 3 || tr.Total().Samples != 2 {
		t.Errorf("after recovery: Err %v, Failures %d, samples %d", s.Err(), s.Failures(), tr.Total().Samples)
	}
}

func TestScraperBadFormat(t *testing.T) {
	ts := httptest.NewServer(&seqServer{bodies: []string{"sglang:gen_throughput{tp_rank=\"0\" 12\n<html>not metrics</html>\n"}})
	defer ts.Close()
	s := newTestScraper(ts.URL, nil)
	_, err := s.Scrape(context.Background())
	if err == nil || !strings.Contains(err.Error(), "parse metrics") {
		t.Fatalf("err = %v, want a parse error", err)
	}
	if s.Failures() != 1 {
		t.Errorf("Failures %d", s.Failures())
	}
}

func TestScraperServerDown(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL + "/metrics"
	ts.Close() // nothing listens there any more
	var tr Tracker
	s := NewScraper(url, &tr)
	s.Interval = 5 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// Run keeps trying (the server may come up later) until ctx ends.
	if err := s.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want DeadlineExceeded", err)
	}
	if s.Failures() < 2 || s.Err() == nil {
		t.Fatalf("Failures %d, Err %v", s.Failures(), s.Err())
	}
	if !strings.Contains(s.Err().Error(), "scrape metrics") {
		t.Errorf("error text %q", s.Err())
	}
}

func TestScraperRunFeedsTrackerAndStops(t *testing.T) {
	ts := httptest.NewServer(&seqServer{bodies: []string{
		vllmExposition(0, 0, 0), vllmExposition(10, 10, 100), vllmExposition(30, 20, 200),
	}})
	defer ts.Close()
	var tr Tracker
	s := NewScraper(ts.URL, &tr)
	s.Interval = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for tr.Total().Samples < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no samples; Err %v", s.Err())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop on cancel")
	}
	if tot := tr.Total(); !sameFloat(tot.AcceptLen, (2+3)/2.0) {
		t.Errorf("total %+v", tot)
	}
}

func TestScraperRunBadURL(t *testing.T) {
	s := NewScraper("http://[::1", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.Run(ctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "build request") {
		t.Fatalf("Run = %v, want an immediate request error", err)
	}
}
