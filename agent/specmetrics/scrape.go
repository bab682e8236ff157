package specmetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DefaultInterval is the Scraper's default period.
const DefaultInterval = 5 * time.Second

// maxBody bounds one exposition; a real one is tens of KiB.
const maxBody = 32 << 20

// Metric names the Scraper reads.
const (
	sglAcceptMetric  = "sglang:spec_accept_length" // gauge, per tp_rank
	sglTokMetric     = "sglang:gen_throughput"     // gauge, per tp_rank
	vllmAcceptedName = "vllm:spec_decode_num_accepted_tokens_total"
	vllmDraftsName   = "vllm:spec_decode_num_drafts_total"
	vllmGenTokName   = "vllm:generation_tokens_total"
)

// Scraper reads a server's Prometheus endpoint periodically and adds
// [SourcePrometheus] samples to a Tracker.
//
// SGLang exports the accept length and throughput as gauges
// (sglang:spec_accept_length, sglang:gen_throughput); each series, by its
// tp_rank label, gives a sample. vLLM exports counters, so the Scraper
// derives its samples from two consecutive scrapes: accept length
// 1 + Δaccepted/Δdrafts, throughput Δgeneration_tokens/Δt.
//
// Failures are not logged: the caller reads [Scraper.Err] and
// [Scraper.Failures] and reports once.
type Scraper struct {
	// URL is the metrics endpoint, e.g. http://127.0.0.1:30000/metrics.
	URL string
	// Interval is the scrape period; DefaultInterval if ≤ 0.
	Interval time.Duration
	// Client does the requests; NewScraper sets one with a timeout.
	Client *http.Client
	// Tracker receives the samples; nil to only return them from Scrape.
	Tracker *Tracker

	scrapeMu sync.Mutex            // serialises scrapes: they share prev and sgl
	prev     *vllmCounters         // previous scrape's vLLM counters
	sgl      map[string][2]float64 // previous SGLang gauge values per series
	now      func() time.Time      // replaced in tests

	mu       sync.Mutex // guards err and failures; not held across requests
	err      error
	failures int
}

// vllmCounters is one scrape's vLLM counters, summed over series (one per
// engine with data parallelism).
type vllmCounters struct {
	at                       time.Time
	accepted, drafts, genTok float64
	hasSpec, hasGen          bool
}

// NewScraper returns a Scraper of url feeding t, with DefaultInterval and
// a client whose timeout is that interval, so a hung server cannot stack
// up requests.
func NewScraper(url string, t *Tracker) *Scraper {
	return &Scraper{
		URL:      url,
		Interval: DefaultInterval,
		Client:   &http.Client{Timeout: DefaultInterval},
		Tracker:  t,
	}
}

// Err returns the error of the latest scrape, nil if it succeeded.
func (s *Scraper) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Failures returns how many scrapes have failed in all.
func (s *Scraper) Failures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

// Run scrapes at once and then every Interval until ctx is done, and
// returns ctx's error. A failed scrape does not stop it (the server may
// not be up yet); see Err. Only a URL that cannot make a request at all
// ends Run early.
func (s *Scraper) Run(ctx context.Context) error {
	iv := s.Interval
	if iv <= 0 {
		iv = DefaultInterval
	}
	tick := time.NewTicker(iv)
	defer tick.Stop()
	for {
		if _, err := s.Scrape(ctx); err != nil {
			var re *requestError
			if errors.As(err, &re) {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// requestError marks a URL that cannot be turned into a request, a
// failure no retry can fix.
type requestError struct{ err error }

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// Scrape reads the endpoint once, adds the samples it yields to Tracker
// and returns them. A vLLM server yields nothing on the first scrape (no
// Δ yet), nor while it generates nothing.
func (s *Scraper) Scrape(ctx context.Context) ([]Sample, error) {
	s.scrapeMu.Lock()
	defer s.scrapeMu.Unlock()
	samples, err := s.scrape(ctx)
	s.mu.Lock()
	s.err = err
	if err != nil {
		s.failures++
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if s.Tracker != nil {
		for _, smp := range samples {
			s.Tracker.Add(smp)
		}
	}
	return samples, nil
}

func (s *Scraper) scrape(ctx context.Context) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return nil, &requestError{fmt.Errorf("scrape metrics: build request for %q: %w", s.URL, err)}
	}
	// Ask for the classic text format: OpenMetrics and protobuf are not
	// what the text parser reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Drain a little so the connection can be reused.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		return nil, fmt.Errorf("scrape metrics from %s: %w", s.URL, &StatusError{Code: resp.StatusCode})
	}
	at := time.Now()
	if s.now != nil {
		at = s.now()
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("parse metrics from %s: %w", s.URL, err)
	}
	out := s.sglangSamples(fams, at)
	if smp, ok := s.vllmSample(fams, at); ok {
		out = append(out, smp)
	}
	return out, nil
}

// StatusError is a scrape answered with an HTTP status other than 200.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
}

// Error names the status, e.g. "HTTP status 500 Internal Server Error".
func (e *StatusError) Error() string {
	return fmt.Sprintf("HTTP status %d %s", e.Code, http.StatusText(e.Code))
}

// sglangSamples gives one sample per series of the SGLang gauges. SGLang
// sets them only when it logs a decode batch, so a series whose values
// have not changed since the previous scrape is a repeat of a reading
// already taken and is skipped: an idle server would otherwise weigh the
// window mean with stale values.
func (s *Scraper) sglangSamples(fams map[string]*dto.MetricFamily, at time.Time) []Sample {
	type entry struct {
		smp  Sample
		vals [2]float64
	}
	series := map[string]*entry{}
	var keys []string
	collect := func(name string, idx int) {
		for _, m := range fams[name].GetMetric() {
			v, ok := metricValue(m)
			if !ok {
				continue
			}
			key := labelKey(m)
			e := series[key]
			if e == nil {
				e = &entry{smp: Sample{Source: SourcePrometheus, Rank: rankLabel(m),
					AcceptLen: math.NaN(), TokPerSec: math.NaN(), At: at},
					vals: [2]float64{math.NaN(), math.NaN()}}
				series[key] = e
				keys = append(keys, key)
			}
			e.vals[idx] = v
			if idx == 0 {
				e.smp.AcceptLen = acceptOf(v)
			} else {
				e.smp.TokPerSec = rateOf(v)
			}
		}
	}
	collect(sglAcceptMetric, 0)
	collect(sglTokMetric, 1)
	sort.Strings(keys)
	seen := make(map[string][2]float64, len(series))
	var out []Sample
	for _, k := range keys {
		e := series[k]
		seen[k] = e.vals
		if prev, ok := s.sgl[k]; ok && sameVals(prev, e.vals) {
			continue
		}
		if e.smp.HasAccept() || e.smp.HasTok() {
			out = append(out, e.smp)
		}
	}
	s.sgl = seen
	return out
}

func sameVals(a, b [2]float64) bool {
	for i := range a {
		if a[i] != b[i] && !(math.IsNaN(a[i]) && math.IsNaN(b[i])) {
			return false
		}
	}
	return true
}

// vllmSample derives one sample from the change of vLLM's counters since
// the previous scrape. A counter that went down means the server
// restarted: that scrape becomes the new baseline.
func (s *Scraper) vllmSample(fams map[string]*dto.MetricFamily, at time.Time) (Sample, bool) {
	cur := &vllmCounters{at: at}
	var hasAcc, hasDr bool
	cur.accepted, hasAcc = sumFamily(fams[vllmAcceptedName])
	cur.drafts, hasDr = sumFamily(fams[vllmDraftsName])
	cur.genTok, cur.hasGen = sumFamily(fams[vllmGenTokName])
	cur.hasSpec = hasAcc && hasDr
	if !cur.hasSpec && !cur.hasGen {
		s.prev = nil
		return Sample{}, false
	}
	prev := s.prev
	s.prev = cur
	if prev == nil {
		return Sample{}, false
	}
	smp := Sample{Source: SourcePrometheus, Rank: -1, AcceptLen: math.NaN(), TokPerSec: math.NaN(), At: at}
	if cur.hasSpec && prev.hasSpec {
		dAcc, dDr := cur.accepted-prev.accepted, cur.drafts-prev.drafts
		if dAcc < 0 || dDr < 0 {
			return Sample{}, false
		}
		if dDr > 0 {
			smp.AcceptLen = 1 + dAcc/dDr
		}
	}
	if cur.hasGen && prev.hasGen {
		dTok, dt := cur.genTok-prev.genTok, cur.at.Sub(prev.at).Seconds()
		if dTok < 0 {
			return Sample{}, false
		}
		if dTok > 0 && dt > 0 {
			smp.TokPerSec = dTok / dt
		}
	}
	return smp, smp.HasAccept() || smp.HasTok()
}

// sumFamily adds up every series of a family; ok is false if it has none.
func sumFamily(f *dto.MetricFamily) (sum float64, ok bool) {
	for _, m := range f.GetMetric() {
		if v, vok := metricValue(m); vok {
			sum += v
			ok = true
		}
	}
	return sum, ok
}

// metricValue reads a counter, gauge or untyped value: the text parser
// makes a "_total" series untyped when its TYPE line names the family
// without the suffix (OpenMetrics style).
func metricValue(m *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case m.Counter != nil:
		v = m.GetCounter().GetValue()
	case m.Gauge != nil:
		v = m.GetGauge().GetValue()
	case m.Untyped != nil:
		v = m.GetUntyped().GetValue()
	default:
		return 0, false
	}
	return v, !math.IsNaN(v)
}

// labelKey identifies a series by its sorted labels, so that the two
// SGLang gauges of one scheduler pair up.
func labelKey(m *dto.Metric) string {
	parts := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"\x00"+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, "\x01")
}

// rankLabel is the tp_rank label, -1 when absent or not a number.
func rankLabel(m *dto.Metric) int {
	for _, l := range m.GetLabel() {
		if l.GetName() == "tp_rank" {
			if n, err := strconv.Atoi(l.GetValue()); err == nil && n >= 0 {
				return n
			}
		}
	}
	return -1
}
