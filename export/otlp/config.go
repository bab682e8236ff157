package otlp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/specprof/specprof/model"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
)

// Protocols accepted by Config.Protocol (and OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Defaults of Config's zero fields.
const (
	DefaultServiceName = "specprof"
	DefaultQueueCycles = 4096
	DefaultTimeout     = 10 * time.Second
)

// Config selects the endpoint and the shape of the export. Zero fields fall
// back to the standard OTEL_EXPORTER_OTLP_* variables (read by the SDK's
// exporters), then to the defaults; set fields override the variables.
type Config struct {
	// Endpoint is host:port, or a URL http(s)://host[:port][/path]. A URL
	// with scheme http means plaintext. For HTTP a URL without a path gets
	// the standard /v1/traces (as OTEL_EXPORTER_OTLP_ENDPOINT does); a path
	// is used as is. Empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
	// OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4317 (gRPC) or
	// localhost:4318 (HTTP).
	Endpoint string
	// Protocol is "grpc", "http/protobuf" or its short form "http". Empty:
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, else
	// grpc.
	Protocol string
	// Insecure sends plaintext (no TLS). False leaves it to the endpoint's
	// scheme and OTEL_EXPORTER_OTLP_(TRACES_)INSECURE.
	Insecure bool
	// Headers are sent with every export (e.g. authorization), on top of
	// OTEL_EXPORTER_OTLP_(TRACES_)HEADERS; a key given here wins.
	Headers map[string]string
	// ServiceName is the resource's service.name. Empty: OTEL_SERVICE_NAME,
	// else DefaultServiceName.
	ServiceName string
	// Kernels adds one span per GPU record (kernel, copy, set) under each
	// phase's gpu span. The cycles must carry them (agent.Options.Detail).
	Kernels bool
	// QueueCycles bounds the cycles waiting to be converted; beyond it
	// Exporter.Cycle drops and counts. Zero: DefaultQueueCycles.
	QueueCycles int
	// Timeout bounds one export call (retries included). Zero:
	// DefaultTimeout.
	Timeout time.Duration
	// Clock converts the cycles' CLOCK_MONOTONIC times to wall time.
	Clock model.Clock
	// Logger receives the one line about the first failure. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// ParseProtocol normalises a protocol name: "grpc", "http/protobuf" or
// "http" (taken as http/protobuf). Empty reads
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then OTEL_EXPORTER_OTLP_PROTOCOL, and
// defaults to grpc.
func ParseProtocol(p string) (string, error) {
	src := "protocol"
	if p == "" {
		for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
			if p = strings.TrimSpace(os.Getenv(v)); p != "" {
				src = v
				break
			}
		}
	}
	switch strings.ToLower(p) {
	case "", "grpc":
		return ProtocolGRPC, nil
	case "http", "http/protobuf":
		return ProtocolHTTP, nil
	case "http/json":
		return "", fmt.Errorf("%s %q: the OpenTelemetry Go exporter has no JSON encoding; use grpc or http/protobuf", src, p)
	}
	return "", fmt.Errorf("%s %q: want grpc or http (http/protobuf)", src, p)
}

// endpoint is a parsed Config.Endpoint.
type endpoint struct {
	host      string // host:port, or host alone (the scheme's port)
	path      string // URL path for HTTP, "" for the default
	plaintext bool   // the URL said http://
	url       bool   // given as a URL
}

// parseEndpoint checks an endpoint given as host:port or as a URL.
func parseEndpoint(s, protocol string) (endpoint, error) {
	bad := func(format string, a ...any) (endpoint, error) {
		return endpoint{}, fmt.Errorf("endpoint %q: "+format, append([]any{s}, a...)...)
	}
	if strings.TrimSpace(s) != s || s == "" {
		return bad("want host:port or http(s)://host:port")
	}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return bad("%w", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return bad("scheme %q: want http or https", u.Scheme)
		}
		if u.Hostname() == "" {
			return bad("no host")
		}
		if p := u.Port(); p != "" {
			if err := checkPort(p); err != nil {
				return bad("%w", err)
			}
		}
		if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return bad("query, fragment and user info are not allowed")
		}
		ep := endpoint{host: u.Host, plaintext: u.Scheme == "http", url: true}
		if u.Path != "" && u.Path != "/" {
			if protocol == ProtocolGRPC {
				return bad("a gRPC endpoint has no path (did you mean --otlp-protocol http?)")
			}
			ep.path = u.Path
		}
		return ep, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return bad("want host:port or http(s)://host:port: %w", err)
	}
	if host == "" {
		return bad("no host")
	}
	if err := checkPort(port); err != nil {
		return bad("%w", err)
	}
	return endpoint{host: s}, nil
}

func checkPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want 1-65535", p)
	}
	return nil
}

// ParseHeader splits one "key=value" header as given on the command line.
func ParseHeader(kv string) (key, value string, err error) {
	k, v, ok := strings.Cut(kv, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return "", "", fmt.Errorf("header %q: want key=value", kv)
	}
	if strings.ContainsAny(k, " \t\r\n:") {
		return "", "", fmt.Errorf("header %q: the key may not contain spaces or ':'", kv)
	}
	if strings.ContainsAny(v, "\r\n") {
		return "", "", fmt.Errorf("header %q: the value may not contain a line break", kv)
	}
	return k, strings.TrimSpace(v), nil
}

// envHeaders reads OTEL_EXPORTER_OTLP_HEADERS then ..._TRACES_HEADERS
// (comma-separated key=value, values URL-encoded), as the SDK would: passing
// headers to the SDK replaces the variables', so Config.Headers are merged
// over these instead.
func envHeaders() (map[string]string, error) {
	h := map[string]string{}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		v := os.Getenv(name)
		if strings.TrimSpace(v) == "" {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("%s: entry %q: want key=value", name, kv)
			}
			dk, err1 := url.PathUnescape(k)
			dv, err2 := url.PathUnescape(strings.TrimSpace(val))
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("%s: entry %q: %w", name, kv, err)
			}
			h[dk] = dv
		}
	}
	return h, nil
}

// grpcOptions and httpOptions turn the configuration into the SDK
// exporter's options, with a description of the target for messages.
func (c *Config) grpcOptions() ([]otlptracegrpc.Option, string, error) {
	var opts []otlptracegrpc.Option
	target := "the OTEL_EXPORTER_OTLP_* endpoint"
	if c.Endpoint != "" {
		ep, err := parseEndpoint(c.Endpoint, ProtocolGRPC)
		if err != nil {
			return nil, "", err
		}
		opts = append(opts, otlptracegrpc.WithEndpoint(ep.host))
		if ep.plaintext {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		target = c.Endpoint
	} else if v := envEndpoint(); v != "" {
		target = v
	} else {
		target = "localhost:4317"
	}
	if c.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	h, err := c.mergedHeaders()
	if err != nil {
		return nil, "", err
	}
	if h != nil {
		opts = append(opts, otlptracegrpc.WithHeaders(h))
	}
	opts = append(opts,
		otlptracegrpc.WithTimeout(c.timeout()),
		otlptracegrpc.WithRetry(c.retry()))
	return opts, "grpc " + target, nil
}

func (c *Config) httpOptions() ([]otlptracehttp.Option, string, error) {
	var opts []otlptracehttp.Option
	target := "the OTEL_EXPORTER_OTLP_* endpoint"
	if c.Endpoint != "" {
		ep, err := parseEndpoint(c.Endpoint, ProtocolHTTP)
		if err != nil {
			return nil, "", err
		}
		opts = append(opts, otlptracehttp.WithEndpoint(ep.host))
		if ep.path != "" {
			opts = append(opts, otlptracehttp.WithURLPath(ep.path))
		} else {
			opts = append(opts, otlptracehttp.WithURLPath("/v1/traces"))
		}
		if ep.plaintext {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		target = c.Endpoint
	} else if v := envEndpoint(); v != "" {
		target = v
	} else {
		target = "localhost:4318"
	}
	if c.Insecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	h, err := c.mergedHeaders()
	if err != nil {
		return nil, "", err
	}
	if h != nil {
		opts = append(opts, otlptracehttp.WithHeaders(h))
	}
	r := c.retry()
	opts = append(opts,
		otlptracehttp.WithTimeout(c.timeout()),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig(r)))
	return opts, "http " + target, nil
}

func envEndpoint() string {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if s := strings.TrimSpace(os.Getenv(v)); s != "" {
			return s
		}
	}
	return ""
}

// mergedHeaders is nil when no header was given on the command line (the SDK
// then reads the variables itself).
func (c *Config) mergedHeaders() (map[string]string, error) {
	if len(c.Headers) == 0 {
		return nil, nil
	}
	h, err := envHeaders()
	if err != nil {
		return nil, err
	}
	for k, v := range c.Headers {
		h[k] = v
	}
	return h, nil
}

func (c *Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// retry: transient failures (endpoint restarting, overloaded) are retried
// with backoff within one export call's timeout; the batch is then counted
// as failed and the next one tried.
func (c *Config) retry() otlptracegrpc.RetryConfig {
	return otlptracegrpc.RetryConfig{
		Enabled:         true,
		InitialInterval: 500 * time.Millisecond,
		MaxInterval:     2 * time.Second,
		MaxElapsedTime:  c.timeout(),
	}
}

// dialAddr is the host:port the exporter connects to, for the diagnosis
// when no export completed ("" when unknown).
func (c *Config) dialAddr() string {
	s := c.Endpoint
	if s == "" {
		s = envEndpoint()
	}
	if s == "" {
		if c.Protocol == ProtocolHTTP {
			return "localhost:4318"
		}
		return "localhost:4317"
	}
	ep, err := parseEndpoint(s, ProtocolHTTP)
	if err != nil {
		return ""
	}
	if _, _, err := net.SplitHostPort(ep.host); err == nil {
		return ep.host
	}
	if ep.plaintext {
		return net.JoinHostPort(ep.host, "80")
	}
	return net.JoinHostPort(ep.host, "443")
}
