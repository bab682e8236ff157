package gpuinfo

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func fakeLib(procs map[int][]uint32, initRet nvml.Return) (*mock.Interface, *int) {
	calls := 0
	devs := []*mock.Device{}
	for i, name := range []string{"NVIDIA H200", "NVIDIA H200"} {
		i, name := i, name
		devs = append(devs, &mock.Device{
			GetNameFunc: func() (string, nvml.Return) { return name, nvml.SUCCESS },
			GetUUIDFunc: func() (string, nvml.Return) { return "GPU-" + string(rune('a'+i)), nvml.SUCCESS },
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				calls++
				var out []nvml.ProcessInfo
				for _, pid := range procs[i] {
					out = append(out, nvml.ProcessInfo{Pid: pid})
				}
				return out, nvml.SUCCESS
			},
		})
	}
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return initRet },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			return devs[i], nvml.SUCCESS
		},
	}, &calls
}

func TestForPID(t *testing.T) {
	procs := map[int][]uint32{0: {100}, 1: {200, 100}}
	lib, calls := fakeLib(procs, nvml.SUCCESS)
	r := NewWith(lib)
	d, err := r.ForPID(100)
	if err != nil || len(d) != 2 || d[0].UUID != "GPU-a" || d[1].UUID != "GPU-b" || d[0].Name != "NVIDIA H200" {
		t.Fatalf("pid 100: %+v %v", d, err)
	}
	if d, _ := r.ForPID(200); len(d) != 1 || d[0].Index != 1 {
		t.Fatalf("pid 200: %+v", d)
	}
	// An unknown pid refreshes at most every MinRefresh.
	before := *calls
	if d, _ := r.ForPID(300); len(d) != 0 || *calls != before {
		t.Fatalf("pid 300: %+v, %d queries (want none within MinRefresh)", d, *calls-before)
	}
	r.MinRefresh = 0
	procs[0] = append(procs[0], 300)
	if d, _ := r.ForPID(300); len(d) != 1 || d[0].Index != 0 {
		t.Fatalf("pid 300 after refresh: %+v", d)
	}
	r.Close()
}

func TestUnavailable(t *testing.T) {
	lib, _ := fakeLib(nil, nvml.ERROR_LIBRARY_NOT_FOUND)
	r := NewWith(lib)
	if _, err := r.ForPID(1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
	if _, err := r.Devices(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
	r.Close()
}

// TestHost: on this host NVML either answers or says it is unavailable;
// it never panics (CI has no driver).
func TestHost(t *testing.T) {
	r := New()
	defer r.Close()
	d, err := r.Devices()
	if err != nil && !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unexpected error %v", err)
	}
	t.Logf("devices %+v err %v", d, err)
}
