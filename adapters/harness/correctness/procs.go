package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// supervisor starts the suite's child processes (re-executions of this
// binary in a role), sends them real signals, and keeps their output in
// one log file per process under dir.
type supervisor struct {
	exe string
	dir string

	mu    sync.Mutex
	procs []*proc
}

// proc is one child process, restartable under the same name.
type proc struct {
	sup  *supervisor
	name string
	role string
	cfg  childConfig
	log  *os.File

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{}
	killed     bool // the exit in progress was caused by the suite
	starts     int
	unexpected int // exits the suite did not cause
}

func newSupervisor(dir string) (*supervisor, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	return &supervisor{exe: exe, dir: dir}, nil
}

// owner returns the lease owner the relay process p runs under: the
// owner attribute of the last "relay: started" line in its log ("" when
// none is there yet).
func (p *proc) owner() (string, error) {
	raw, err := os.ReadFile(filepath.Join(p.sup.dir, p.name+".log"))
	if err != nil {
		return "", fmt.Errorf("read log of %s: %w", p.name, err)
	}
	owner := ""
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, `msg="relay: started"`) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "owner="); ok {
				owner = v
			}
		}
	}
	return owner, nil
}

// start starts a new process in role.
func (s *supervisor) start(name, role string, cfg childConfig) (*proc, error) {
	f, err := os.OpenFile(filepath.Join(s.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cfg.Name = name
	p := &proc{sup: s, name: name, role: role, cfg: cfg, log: f}
	if err := p.start(); err != nil {
		f.Close()
		return nil, err
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is running", p.name)
	}
	js, err := json.Marshal(p.cfg)
	if err != nil {
		return fmt.Errorf("encode config of %s: %w", p.name, err)
	}
	p.starts++
	fmt.Fprintf(p.log, "=== %s start #%d at %s\n", p.name, p.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.sup.exe)
	cmd.Env = append(os.Environ(), envRole+"="+p.role, envChild+"="+string(js))
	cmd.Stdout, cmd.Stderr = p.log, p.log
	// The child dies with the driver, even when the driver is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.killed = cmd, done, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if !p.killed {
			p.unexpected++
		}
		fmt.Fprintf(p.log, "=== %s exited at %s: %v (caused by the suite: %t)\n", p.name, time.Now().Format(time.RFC3339Nano), err, p.killed)
		if p.cmd == cmd {
			p.cmd = nil
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// signal sends sig to the running process; it is a no-op when the process
// is not running.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		p.killed = true
	}
	fmt.Fprintf(p.log, "=== %s: suite sends %v at %s\n", p.name, sig, time.Now().Format(time.RFC3339Nano))
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	return nil
}

// kill SIGKILLs the process and waits until it is gone.
func (p *proc) kill() error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	if done != nil {
		<-done
	}
	return nil
}

// restart starts the process again if it is not running.
func (p *proc) restart() error {
	p.mu.Lock()
	running := p.cmd != nil
	p.mu.Unlock()
	if running {
		return nil
	}
	return p.start()
}

// unexpectedExits returns how many times the process exited without the
// suite killing it.
func (p *proc) unexpectedExits() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unexpected
}

// stopAll SIGCONTs and SIGKILLs every process and closes the logs.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.signal(syscall.SIGCONT)
		_ = p.kill()
		p.log.Close()
	}
}
