package otlp

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

func TestParseProtocol(t *testing.T) {
	for in, want := range map[string]string{"": ProtocolGRPC, "grpc": ProtocolGRPC, "GRPC": ProtocolGRPC,
		"http": ProtocolHTTP, "http/protobuf": ProtocolHTTP} {
		if got, err := ParseProtocol(in); err != nil || got != want {
			t.Errorf("ParseProtocol(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"udp", "http/json", "grpcs"} {
		_, err := ParseProtocol(in)
		if err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("ParseProtocol(%q): error %v, want one naming the input", in, err)
		}
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	if got, _ := ParseProtocol(""); got != ProtocolHTTP {
		t.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf: got %q", got)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	if got, _ := ParseProtocol(""); got != ProtocolGRPC {
		t.Errorf("the traces-specific variable must win: got %q", got)
	}
	if got, _ := ParseProtocol("http"); got != ProtocolHTTP {
		t.Errorf("the argument must win over the variables: got %q", got)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "carrier-pigeon")
	if _, err := ParseProtocol(""); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
		t.Errorf("a bad variable must be named in the error: %v", err)
	}
}

func TestParseEndpoint(t *testing.T) {
	good := []struct {
		in, proto string
		want      endpoint
	}{
		{"localhost:4317", ProtocolGRPC, endpoint{host: "localhost:4317"}},
		{"[::1]:4317", ProtocolGRPC, endpoint{host: "[::1]:4317"}},
		{"http://127.0.0.1:4318", ProtocolHTTP, endpoint{host: "127.0.0.1:4318", plaintext: true, url: true}},
		{"http://127.0.0.1:4318/", ProtocolHTTP, endpoint{host: "127.0.0.1:4318", plaintext: true, url: true}},
		{"https://otel.example.com/otlp/v1/traces", ProtocolHTTP, endpoint{host: "otel.example.com", path: "/otlp/v1/traces", url: true}},
		{"https://otel.example.com:4317", ProtocolGRPC, endpoint{host: "otel.example.com:4317", url: true}},
	}
	for _, g := range good {
		got, err := parseEndpoint(g.in, g.proto)
		if err != nil || got != g.want {
			t.Errorf("parseEndpoint(%q, %s) = %+v, %v; want %+v", g.in, g.proto, got, err, g.want)
		}
	}
	bad := []struct{ in, proto, msg string }{
		{"", ProtocolGRPC, "want host:port"},
		{"localhost", ProtocolGRPC, "want host:port"},
		{":4317", ProtocolGRPC, "no host"},
		{"localhost:http", ProtocolGRPC, "port"},
		{"localhost:70000", ProtocolGRPC, "port"},
		{"ftp://host:21", ProtocolHTTP, "scheme"},
		{"http://:4318", ProtocolHTTP, "no host"},
		{"http://host:0", ProtocolHTTP, "port"},
		{"http://host:4317/v1/traces", ProtocolGRPC, "no path"},
		{"http://host:4318/?a=b", ProtocolHTTP, "query"},
		{" localhost:4317", ProtocolGRPC, "want host:port"},
	}
	for _, b := range bad {
		_, err := parseEndpoint(b.in, b.proto)
		if err == nil || !strings.Contains(err.Error(), b.msg) || !strings.Contains(err.Error(), "endpoint") {
			t.Errorf("parseEndpoint(%q, %s): error %v, want one saying %q", b.in, b.proto, err, b.msg)
		}
	}
}

func TestParseHeader(t *testing.T) {
	if k, v, err := ParseHeader("Authorization=Bearer a=b"); err != nil || k != "Authorization" || v != "Bearer a=b" {
		t.Errorf("got %q %q %v", k, v, err)
	}
	for _, in := range []string{"novalue", "=v", "a b=c", "k=v\nx"} {
		if _, _, err := ParseHeader(in); err == nil {
			t.Errorf("ParseHeader(%q) accepted", in)
		}
	}
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "broken")
	c := Config{Headers: map[string]string{"a": "b"}}
	if _, err := c.mergedHeaders(); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_HEADERS") {
		t.Errorf("malformed OTEL_EXPORTER_OTLP_HEADERS: %v", err)
	}
}

// collector records what an OTLP endpoint received.
type collector struct {
	mu      sync.Mutex
	spans   int
	paths   []string
	headers []map[string]string
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest, path string, h map[string]string) {
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans += n
	c.paths = append(c.paths, path)
	c.headers = append(c.headers, h)
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	req := &coltracepb.ExportTraceServiceRequest{}
	if err != nil || proto.Unmarshal(b, req) != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	h := map[string]string{}
	for k := range r.Header {
		h[strings.ToLower(k)] = r.Header.Get(k)
	}
	c.add(req, r.URL.Path, h)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	c *collector
}

func (g *grpcCollector) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := map[string]string{}
	for k, v := range md {
		h[k] = strings.Join(v, ",")
	}
	g.c.add(req, "", h)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// perCycle is the number of spans of one testCycle.
var perCycle = uint64((&Exporter{}).spanCount(testCycle(1, 1, 1, 1_000)))

func exportOne(t *testing.T, cfg Config) Stats {
	t.Helper()
	cfg.Clock = clock
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Cycle(testCycle(1, 1, 1, 1_000))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return e.Stats()
}

// The real OTLP/HTTP exporter: the endpoint, path and headers given here
// override the OTEL_EXPORTER_OTLP_* variables, which still supply the rest.
func TestHTTPExportOverridesEnvironment(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // nothing listens there
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-from-env=1,x-both=env")
	st := exportOne(t, Config{Endpoint: srv.URL, Headers: map[string]string{"x-both": "flag", "x-flag": "2"}})
	if st.SpansExported != perCycle || st.Lost() != 0 || uint64(col.spans) != perCycle {
		t.Fatalf("stats %+v, collector got %d spans", st, col.spans)
	}
	h := col.headers[0]
	if col.paths[0] != "/v1/traces" || h["x-from-env"] != "1" || h["x-both"] != "flag" || h["x-flag"] != "2" {
		t.Errorf("path %q, headers %v", col.paths[0], h)
	}
	if !strings.HasPrefix(st.Target, "http ") {
		t.Errorf("target %q: the protocol from OTEL_EXPORTER_OTLP_PROTOCOL was not used", st.Target)
	}

	// A path in the URL is used as is; the variables' endpoint alone works.
	col2 := &collector{}
	srv2 := httptest.NewServer(col2)
	defer srv2.Close()
	exportOne(t, Config{Endpoint: srv2.URL + "/otlp/traces"})
	if uint64(col2.spans) != perCycle || col2.paths[0] != "/otlp/traces" {
		t.Errorf("custom path: %d spans at %v", col2.spans, col2.paths)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv2.URL)
	exportOne(t, Config{})
	if uint64(col2.spans) != 2*perCycle || col2.paths[1] != "/v1/traces" {
		t.Errorf("endpoint from the environment: %d spans at %v", col2.spans, col2.paths)
	}
}

// The real OTLP/gRPC exporter, plaintext, with a header.
func TestGRPCExport(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, &grpcCollector{c: col})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf") // the argument wins
	st := exportOne(t, Config{Endpoint: ln.Addr().String(), Protocol: "grpc", Insecure: true,
		Headers: map[string]string{"authorization": "Bearer t0ken"}})
	if st.SpansExported != perCycle || uint64(col.spans) != perCycle || col.headers[0]["authorization"] != "Bearer t0ken" {
		t.Fatalf("stats %+v, collector %d spans, headers %v", st, col.spans, col.headers)
	}
	// http:// means plaintext for gRPC too.
	exportOne(t, Config{Endpoint: "http://" + ln.Addr().String(), Protocol: "grpc"})
	if uint64(col.spans) != 2*perCycle {
		t.Errorf("gRPC via an http:// URL: collector has %d spans", col.spans)
	}
}

// Nothing listening: New succeeds, the spans are counted as failed, and
// Shutdown returns within its deadline.
func TestDeadEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, p := range []string{"grpc", "http"} {
		e, err := New(context.Background(), Config{Endpoint: addr, Protocol: p, Insecure: true, Clock: clock,
			Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			e.Cycle(testCycle(1, 1, i+1, uint64(i)*10_000))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t0 := time.Now()
		err = e.Shutdown(ctx)
		cancel()
		st := e.Stats()
		if err != nil || st.SpansFailed != 5*perCycle || st.SpansExported != 0 || st.FirstError == "" || time.Since(t0) > 3*time.Second {
			t.Errorf("%s: Shutdown %v after %v, stats %+v", p, err, time.Since(t0), st)
		}
		t.Logf("%s: %s", p, st)
	}
}

// When the exporter is still retrying at the deadline, the account says
// whether the endpoint accepts connections at all.
func TestDeadEndpointDiagnosis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e, err := New(context.Background(), Config{Endpoint: addr, Insecure: true, Clock: clock}) // retries for 10 s
	if err != nil {
		t.Fatal(err)
	}
	e.Cycle(testCycle(1, 1, 1, 1_000))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := e.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown met its deadline with a dead endpoint")
	}
	st := e.Stats()
	if st.Pending() != perCycle || !strings.Contains(st.FirstError, "endpoint unreachable") || !strings.Contains(st.FirstError, "refused") {
		t.Errorf("stats %+v", st)
	}
	if line := st.String(); !strings.Contains(line, fmt.Sprintf("%d unsent at exit", perCycle)) || !strings.Contains(line, "connection refused") {
		t.Errorf("account %q", line)
	}
}
