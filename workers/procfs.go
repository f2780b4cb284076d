package workers

import (
	"bytes"
	"os"
	"strconv"
)

// procStat is the part of /proc/<pid>/stat dashgate needs (proc(5)).
type procStat struct {
	pid, ppid, pgrp, sid int
	state                byte // R, S, D, Z, T, ...
}

func (s procStat) zombie() bool { return s.state == 'Z' || s.state == 'X' }

// readStat parses /proc/<pid>/stat. The comm field is in parentheses and may
// hold spaces or parentheses itself, so fields are counted from the last ')'.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+2:])
	// f[0]=state f[1]=ppid f[2]=pgrp f[3]=session
	if len(f) < 4 || len(f[0]) != 1 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(string(f[1]))
	pgrp, _ := strconv.Atoi(string(f[2]))
	sid, _ := strconv.Atoi(string(f[3]))
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, sid: sid, state: f[0][0]}, true
}

// listProcs returns a snapshot of every process visible in /proc.
func listProcs() []procStat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procStat, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// environValue returns the value of key in the initial environment of pid
// (/proc/<pid>/environ), or "" when it is absent or unreadable.
func environValue(pid int, key string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	prefix := []byte(key + "=")
	for _, kv := range bytes.Split(b, []byte{0}) {
		if bytes.HasPrefix(kv, prefix) {
			return string(kv[len(prefix):])
		}
	}
	return ""
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, ok := readStat(pid)
	return ok && !st.zombie()
}

// descendantsOf returns the pids in procs whose parent chain reaches root.
func descendantsOf(procs []procStat, root int) map[int]bool {
	children := make(map[int][]int, len(procs))
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	out := map[int]bool{}
	stack := []int{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[n] {
			if !out[c] {
				out[c] = true
				stack = append(stack, c)
			}
		}
	}
	return out
}
