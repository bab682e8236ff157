package agent

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specprof/specprof/cupti"
	"github.com/specprof/specprof/cupti/cuptitest"
)

func wireHello() []byte {
	h := cupti.Hello{WireVersion: cupti.WireVersion, Pid: uint32(os.Getpid()), CuptiVersion: 130001, ClockSource: cupti.ClockCallback}
	copy(h.Magic[:], "SPCUPTI1")
	return cuptitest.Record(cupti.TypeHello, 0, &h)
}

// TestGPUStatsLibCounters: the library's counters in the report are those of its final STATS;
// a connection that ends without them (the process killed mid-run, or bytes that frame no record
// cut it) leaves them unknown, says so in a problem line, and its malformed records are counted
// for the process and in the receiver's account.
func TestGPUStatsLibCounters(t *testing.T) {
	cases := []struct {
		name      string
		tail      []byte
		final     bool
		malformed uint64
	}{
		{"final", cuptitest.Record(cupti.TypeStats, cupti.FlagFinal, &cupti.LibStats{RecordsDelivered: 3, DroppedCUPTI: 7}), true, 0},
		{"killed", cuptitest.Record(cupti.TypeStats, 0, &cupti.LibStats{RecordsDelivered: 2}), false, 0},
		{"garbage", append(cuptitest.Record(cupti.TypeStats, 0, &cupti.LibStats{}), []byte("\x03\x00\x00\x00garbage!")...), false, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, _ := draftAgent(t)
			r, err := cupti.Listen(cupti.Config{Path: filepath.Join(t.TempDir(), "s.sock")})
			if err != nil {
				t.Fatal(err)
			}
			go r.Serve(a.GPU())
			conn, err := net.Dial("unix", r.Path())
			if err != nil {
				t.Fatal(err)
			}
			b := wireHello()
			for i := 0; i < 3; i++ {
				b = append(b, cuptitest.Record(cupti.TypeKernel, 0, &cupti.Kernel{Start: uint64(100 + i), End: uint64(200 + i)})...)
			}
			conn.Write(append(b, c.tail...))
			conn.Close()
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if st := r.Stats(); st.Accepted == 1 && len(st.Open) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("connection not done: %+v", r.Stats())
				}
			}
			rs := NewReceiverStats(r.Stats())
			r.Close()
			g, problem := a.gpu.snapshot(os.Getpid())
			if g == nil || g.Kernels != 3 {
				t.Fatalf("GPU stats %+v", g)
			}

			if c.final {
				if !g.FinalStats || g.Delivered == nil || *g.Delivered != 3 || g.DroppedCUPTI == nil || *g.DroppedCUPTI != 7 || problem != "" {
					t.Errorf("final counters: %+v, problem %q", g, problem)
				}
			} else if g.FinalStats || g.Delivered != nil || g.DroppedCUPTI != nil || !strings.HasPrefix(problem, "lib drops unknown") {
				t.Errorf("no final counters: %+v, problem %q", g, problem)
			}
			if g.DecodeErrors != c.malformed || rs.Malformed != c.malformed || rs.BadLength != c.malformed || rs.Accepted != 1 {
				t.Errorf("malformed records: process %d, receiver %+v; want %d", g.DecodeErrors, rs, c.malformed)
			}
		})
	}
}
