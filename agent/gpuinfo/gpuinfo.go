package gpuinfo

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrUnavailable is wrapped by the errors of a Registry whose NVML could not
// be loaded or initialized (no NVIDIA driver on the host).
var ErrUnavailable = errors.New("NVML unavailable")

// Registry answers which GPUs a process runs on. NVML is initialized on the
// first question and shut down by Close. Safe for concurrent use.
type Registry struct {
	lib nvml.Interface

	mu      sync.Mutex
	initErr error
	inited  bool
	devices []model.Device
	handles []nvml.Device
	byPID   map[int][]int // device indexes per pid, from the last refresh
	last    time.Time
	// MinRefresh bounds how often a process that no GPU lists yet causes a
	// new query of every device (a process appears once it creates its
	// CUDA context).
	MinRefresh time.Duration
}

// New returns a Registry over the host's NVML.
func New() *Registry { return NewWith(nvml.New()) }

// NewWith returns a Registry over lib (a mock in tests).
func NewWith(lib nvml.Interface) *Registry {
	return &Registry{lib: lib, byPID: map[int][]int{}, MinRefresh: 5 * time.Second}
}

func (r *Registry) init() error {
	if r.inited {
		return r.initErr
	}
	r.inited = true
	if ret := r.lib.Init(); ret != nvml.SUCCESS {
		r.initErr = fmt.Errorf("%w: initialize NVML: %v", ErrUnavailable, ret)
		return r.initErr
	}
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		r.initErr = fmt.Errorf("%w: count GPUs: %v", ErrUnavailable, ret)
		return r.initErr
	}
	for i := 0; i < n; i++ {
		h, ret := r.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		d := model.Device{Index: i}
		if s, ret := h.GetName(); ret == nvml.SUCCESS {
			d.Name = s
		}
		if s, ret := h.GetUUID(); ret == nvml.SUCCESS {
			d.UUID = s
		}
		r.devices = append(r.devices, d)
		r.handles = append(r.handles, h)
	}
	return nil
}

// Devices lists the host's GPUs.
func (r *Registry) Devices() ([]model.Device, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.init(); err != nil {
		return nil, err
	}
	return append([]model.Device(nil), r.devices...), nil
}

// ForPID returns the GPUs on which process pid has a compute context. A pid
// not seen yet triggers a refresh at most every MinRefresh.
func (r *Registry) ForPID(pid int) ([]model.Device, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.init(); err != nil {
		return nil, err
	}
	idx, ok := r.byPID[pid]
	if !ok && time.Since(r.last) >= r.MinRefresh {
		r.refresh()
		idx = r.byPID[pid]
	}
	out := make([]model.Device, 0, len(idx))
	for _, i := range idx {
		out = append(out, r.devices[i])
	}
	return out, nil
}

// refresh reads every device's compute processes.
func (r *Registry) refresh() {
	r.last = time.Now()
	by := map[int][]int{}
	for i, h := range r.handles {
		ps, ret := h.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			continue
		}
		for _, p := range ps {
			by[int(p.Pid)] = append(by[int(p.Pid)], i)
		}
	}
	r.byPID = by
}

// Close shuts NVML down if it was initialized.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inited && r.initErr == nil {
		_ = r.lib.Shutdown()
	}
	r.inited, r.initErr = false, nil
	r.devices, r.handles = nil, nil
}
