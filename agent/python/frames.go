package python

import (
	"encoding/binary"
	"fmt"
)

// FrameRef is one Python frame as the BPF walker records it.
type FrameRef struct {
	Code uint64 // code object address (tag bits already cleared on 3.14)
	// Instr is the frame's position: on 3.10 the int32 f_lasti (instruction
	// index, -1 before the first instruction) zero-extended as BPF reads
	// it; on 3.11+ the prev_instr / instr_ptr pointer into co_code_adaptive.
	Instr uint64
}

// ThreadState is a Python thread state of the target.
type ThreadState struct {
	TID  int    // Linux thread id; -1 when it could not be read
	Addr uint64 // PyThreadState*
}

// Bounds on list walks, so a cycle created by a torn read terminates.
const (
	maxThreads = 4096
	maxFrames  = 1024
)

// ThreadStates lists the thread states of the main interpreter with their
// Linux thread ids, most recently created first.
func (s *Symbolizer) ThreadStates() ([]ThreadState, error) {
	var out []ThreadState
	err := s.eachThread(func(ts ThreadState) bool {
		out = append(out, ts)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("list Python threads of pid %d: %w", s.rt.PID, err)
	}
	return out, nil
}

// ThreadFrames walks the Python stack of thread tid from the outside and
// returns it innermost first, with entry/shim frames skipped as the BPF
// walker does. The thread keeps running: the result can be torn, which
// callers comparing stacks should allow for by retrying.
func (s *Symbolizer) ThreadFrames(tid int) ([]FrameRef, error) {
	var ts uint64
	err := s.eachThread(func(t ThreadState) bool {
		if t.TID == tid {
			ts = t.Addr
			return false
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("find thread %d of pid %d: %w", tid, s.rt.PID, err)
	}
	if ts == 0 {
		return nil, fmt.Errorf("find thread %d of pid %d: %w", tid, s.rt.PID, ErrNoThreadState)
	}
	frames, err := s.walk(ts)
	if err != nil {
		return nil, fmt.Errorf("walk frames of thread %d of pid %d: %w", tid, s.rt.PID, err)
	}
	return frames, nil
}

func (s *Symbolizer) walk(ts uint64) ([]FrameRef, error) {
	o := s.off
	f, err := s.u64(ts + o.TstateFrame)
	if err != nil {
		return nil, err
	}
	if o.Flags&FlagCFrame != 0 && f != 0 {
		if f, err = s.u64(f + o.CFrameCurrentFrame); err != nil {
			return nil, err
		}
	}
	var out []FrameRef
	for n := 0; f != 0; n++ {
		if n == maxFrames {
			return out, fmt.Errorf("more than %d frames (cycle?)", maxFrames)
		}
		if o.Flags&FlagSkipOwnerGE3 != 0 {
			owner := make([]byte, 1)
			if err := s.read(f+o.FrameOwner, owner); err != nil {
				return out, err
			}
			if owner[0] >= 3 {
				if f, err = s.u64(f + o.FramePrevious); err != nil {
					return out, err
				}
				continue
			}
		}
		code, err := s.u64(f + o.FrameCode)
		if err != nil {
			return out, err
		}
		if o.Flags&FlagTaggedExecutable != 0 {
			code &^= 3
		}
		var instr uint64
		if o.Flags&FlagFrameObject != 0 {
			b := make([]byte, 4)
			if err := s.read(f+o.FrameInstr, b); err != nil {
				return out, err
			}
			instr = uint64(binary.LittleEndian.Uint32(b))
		} else if instr, err = s.u64(f + o.FrameInstr); err != nil {
			return out, err
		}
		if code != 0 {
			out = append(out, FrameRef{Code: code, Instr: instr})
		}
		if f, err = s.u64(f + o.FramePrevious); err != nil {
			return out, err
		}
	}
	return out, nil
}

// eachThread calls fn for each thread state of the main interpreter until
// fn returns false.
func (s *Symbolizer) eachThread(fn func(ThreadState) bool) error {
	o := s.off
	interp, err := s.u64(s.rt.RuntimeAddr + o.InterpretersHead)
	if err != nil {
		return err
	}
	if interp == 0 {
		return fmt.Errorf("interpreter not initialised (interpreters.head is NULL)")
	}
	ts, err := s.u64(interp + o.InterpThreadsHead)
	if err != nil {
		return err
	}
	for n := 0; ts != 0; n++ {
		if n == maxThreads {
			return fmt.Errorf("more than %d thread states (cycle?)", maxThreads)
		}
		tid, err := s.threadTID(ts)
		if err != nil {
			// One unreadable thread (3.10: its struct pthread went away)
			// must not hide the others.
			tid = -1
		}
		if !fn(ThreadState{TID: tid, Addr: ts}) {
			return nil
		}
		if ts, err = s.u64(ts + o.TstateNext); err != nil {
			return err
		}
	}
	return nil
}

// threadTID returns the Linux tid of a thread state: native_thread_id on
// 3.11+, or the tid inside glibc's struct pthread on 3.10.
func (s *Symbolizer) threadTID(ts uint64) (int, error) {
	o := s.off
	if o.TstateNativeThreadID != 0 {
		v, err := s.u64(ts + o.TstateNativeThreadID)
		return int(v), err
	}
	if o.Flags&FlagPthreadTID == 0 {
		return 0, fmt.Errorf("no way to map thread states to tids")
	}
	pt, err := s.u64(ts + o.TstateThreadID)
	if err != nil || pt == 0 {
		return 0, err
	}
	b := make([]byte, 4)
	if err := s.read(pt+o.PthreadTID, b); err != nil {
		return 0, err
	}
	return int(int32(binary.LittleEndian.Uint32(b))), nil
}

func (s *Symbolizer) u64(addr uint64) (uint64, error) {
	b := make([]byte, 8)
	if err := s.read(addr, b); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}
