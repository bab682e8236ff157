package otlp

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/specprof/specprof/model"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// AttrTPRank is the tensor-parallel rank of the traced process (resource and
// cycle span), from its process title (e.g. sglang::scheduler_TP3).
const AttrTPRank = attribute.Key("specprof.tp_rank")

// GPU resource attributes: the GPUs the traced process has a CUDA context
// on, from NVML (absent when NVML is unavailable).
const (
	AttrGPUName  = attribute.Key("specprof.gpu.name")
	AttrGPUUUID  = attribute.Key("specprof.gpu.uuid")
	AttrGPUIndex = attribute.Key("specprof.gpu.index")
)

// resources builds one resource per traced process: the traces describe the
// target (its pid, command line, rank), with specprof's host and service.
type resources struct {
	base *resource.Resource
	proc string // /proc, replaced in tests
}

func newResources(serviceName string) (*resources, error) {
	ctx := context.Background()
	env, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("read OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	name := serviceName
	if name == "" {
		name = strings.TrimSpace(os.Getenv("OTEL_SERVICE_NAME"))
	}
	if name == "" {
		if v, ok := env.Set().Value(semconv.ServiceNameKey); ok && v.AsString() != "" {
			name = v.AsString()
		}
	}
	if name == "" {
		name = DefaultServiceName
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	if h, err := os.Hostname(); err == nil {
		attrs = append(attrs, semconv.HostName(h))
	}
	own, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithSchemaURL(semconv.SchemaURL), resource.WithAttributes(attrs...))
	if err != nil {
		return nil, fmt.Errorf("build OTLP resource: %w", err)
	}
	base, err := resource.Merge(env, own)
	if err != nil {
		return nil, fmt.Errorf("build OTLP resource: %w", err)
	}
	return &resources{base: base, proc: "/proc"}, nil
}

// forProcess is the resource of the process that ran cycle c.
func (r *resources) forProcess(c *model.CycleTrace) *resource.Resource {
	attrs := []attribute.KeyValue{semconv.ProcessPID(c.PID)}
	if cmd := r.cmdline(c.PID); cmd != "" {
		attrs = append(attrs, semconv.ProcessCommandLine(cmd))
	} else if c.Process != "" {
		attrs = append(attrs, semconv.ProcessCommandLine(c.Process))
	}
	if c.Process != "" {
		attrs = append(attrs, attribute.String("specprof.process.title", c.Process))
	}
	if c.Rank >= 0 {
		attrs = append(attrs, AttrTPRank.Int(c.Rank))
	}
	if len(c.Devices) > 0 {
		names := make([]string, len(c.Devices))
		uuids := make([]string, len(c.Devices))
		idx := make([]int, len(c.Devices))
		for i, d := range c.Devices {
			names[i], uuids[i], idx[i] = d.Name, d.UUID, d.Index
		}
		attrs = append(attrs, AttrGPUName.StringSlice(names), AttrGPUUUID.StringSlice(uuids), AttrGPUIndex.IntSlice(idx))
	}
	res, err := resource.Merge(r.base, resource.NewWithAttributes(semconv.SchemaURL, attrs...))
	if err != nil {
		// Only a schema URL conflict fails, and both sides use ours.
		return r.base
	}
	return res
}

// cmdline reads the process's command line ("" once it has exited).
func (r *resources) cmdline(pid int) string {
	b, err := os.ReadFile(r.proc + "/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " "))
}
