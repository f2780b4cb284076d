package workers

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

// readStat counts fields from the last ')' of /proc/<pid>/stat, so a comm
// holding spaces and parentheses does not shift them. The helper's comm is
// its file name (a symlink to the test binary).
func TestReadStatOddComm(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, file string }{
		{"paren space paren", "a) b (c"},
		{"fake fields", ") R 1 1 1 ("},
		{"closing parens only", "x))"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			link := filepath.Join(dir, tt.file)
			if err := os.Symlink(helperPath(t), link); err != nil {
				t.Fatal(err)
			}
			pidFile := filepath.Join(dir, "pid")
			cmd := exec.Command(link)
			cmd.Env = append(os.Environ(), helperEnv+"=linger", pidFileEnv+"="+pidFile)
			cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
			wait, err := Start(cmd) // not startChild: waited for only at the end, to see its zombie
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); wait() })
			pid := readPidFile(t, pidFile)

			comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSuffix(string(comm), "\n"); got != tt.file {
				t.Fatalf("comm is %q, want %q: the test does not test what it says", got, tt.file)
			}
			st, ok := readStat(pid)
			if !ok {
				t.Fatalf("readStat(%d) failed", pid)
			}
			want := procStat{pid: pid, ppid: os.Getpid(), pgrp: pid, sid: unixGetsid(t), state: st.state}
			if st != want || !strings.ContainsRune("RS", rune(st.state)) {
				t.Errorf("readStat = %+v, want %+v", st, want)
			}
			if st.zombie() || !alive(pid) {
				t.Errorf("a sleeping helper is reported dead")
			}

			// Killed and not yet waited for: a zombie.
			cmd.Process.Signal(unix.SIGKILL)
			testkit.WaitFor(t, 5*time.Second, "zombie state", func() bool {
				st, ok := readStat(pid)
				return ok && st.zombie()
			})
			if alive(pid) {
				t.Errorf("a zombie counts as alive")
			}
		})
	}
}

func unixGetsid(t *testing.T) int {
	sid, err := unix.Getsid(0)
	if err != nil {
		t.Fatal(err)
	}
	return sid
}

func TestReadStatSelfAndMissing(t *testing.T) {
	t.Parallel()
	st, ok := readStat(os.Getpid())
	if !ok || st.pid != os.Getpid() || st.ppid != os.Getppid() || st.pgrp != unix.Getpgrp() || st.sid != unixGetsid(t) || st.zombie() {
		t.Errorf("readStat(self) = %+v, %v", st, ok)
	}
	if _, ok := readStat(1 << 30); ok {
		t.Errorf("readStat of a pid that cannot exist succeeded")
	}
	// environValue reads the initial environment of a process.
	if got := environValue(os.Getpid(), "PATH"); got != os.Getenv("PATH") {
		t.Errorf("environValue(self, PATH) = %q", got)
	}
	if got := environValue(os.Getpid(), "DASHGATE_NO_SUCH_VARIABLE"); got != "" {
		t.Errorf("environValue of a missing key = %q", got)
	}
}

func TestDescendantsOf(t *testing.T) {
	t.Parallel()
	procs := []procStat{
		{pid: 1, ppid: 0}, {pid: 10, ppid: 1}, {pid: 11, ppid: 10}, {pid: 12, ppid: 11},
		{pid: 13, ppid: 10}, {pid: 20, ppid: 1}, {pid: 21, ppid: 20},
	}
	got := descendantsOf(procs, 10)
	want := map[int]bool{11: true, 12: true, 13: true}
	if len(got) != len(want) {
		t.Fatalf("descendantsOf(10) = %v, want %v", got, want)
	}
	for pid := range want {
		if !got[pid] {
			t.Fatalf("descendantsOf(10) = %v, want %v", got, want)
		}
	}
	if d := descendantsOf(procs, 12); len(d) != 0 {
		t.Errorf("descendantsOf(leaf) = %v", d)
	}
}

// TestAddDescendantsOfSeveralRoots: one index and one set collect the
// descendants of several roots (Unowned's owned set), whichever order the
// roots come in, a root below another included.
func TestAddDescendantsOfSeveralRoots(t *testing.T) {
	t.Parallel()
	procs := []procStat{
		{pid: 1, ppid: 0}, {pid: 10, ppid: 1}, {pid: 11, ppid: 10}, {pid: 12, ppid: 11},
		{pid: 13, ppid: 12}, {pid: 20, ppid: 1}, {pid: 21, ppid: 20}, {pid: 30, ppid: 1},
	}
	children := newChildIndex(procs)
	for _, roots := range [][]int{{10, 11, 20}, {11, 10, 20}, {20, 12, 10}} {
		got := map[int]bool{}
		for _, r := range roots {
			got[r] = true // as Unowned marks each child before its walk
			children.addDescendants(got, r)
		}
		want := append([]int{11, 12, 13, 21}, roots...)
		slices.Sort(want)
		want = slices.Compact(want)
		if len(got) != len(want) {
			t.Fatalf("roots %v: %v, want %v", roots, got, want)
		}
		for _, pid := range want {
			if !got[pid] {
				t.Fatalf("roots %v: %v, want %v", roots, got, want)
			}
		}
	}
}

// BenchmarkUnownedWalk is Unowned's walk of a listing of 300 children, a
// grandchild each: its owned set from one index (descendants of every
// child, as each snapshot of the admin page computes it).
func BenchmarkUnownedWalk(b *testing.B) {
	procs := []procStat{{pid: 1, ppid: 0}}
	var owners []int
	for i := range 300 {
		w := 1000 + 2*i
		owners = append(owners, w)
		procs = append(procs, procStat{pid: w, ppid: 1}, procStat{pid: w + 1, ppid: w})
	}
	b.ReportAllocs()
	for b.Loop() {
		children := newChildIndex(procs)
		owned := make(map[int]bool, len(procs))
		for _, pid := range owners {
			owned[pid] = true
			children.addDescendants(owned, pid)
		}
		if len(owned) != 600 {
			b.Fatalf("owned %d, want 600", len(owned))
		}
	}
}

// readLine returns one line of at most max bytes without its newline; a
// longer line is reported as errLineTooLong as soon as it passes max, and
// the stream is given up (its doc).
func TestReadLine(t *testing.T) {
	t.Parallel()
	const max = 20
	long := strings.Repeat("x", 40) // longer than max and than the 16-byte buffer
	tests := []struct {
		name  string
		input string
		want  []string // lines; "!long" for errLineTooLong; ends where io.EOF comes
	}{
		{name: "lines", input: "a\nbc\n\n", want: []string{"a", "bc", ""}},
		{name: "crlf", input: "a\r\nb\r\n", want: []string{"a", "b"}},
		{name: "last line without newline", input: "a\nlast", want: []string{"a", "last"}},
		{name: "exactly max", input: strings.Repeat("y", max) + "\nz\n", want: []string{strings.Repeat("y", max), "z"}},
		{name: "max+1 is too long", input: strings.Repeat("y", max+1) + "\nz\n", want: []string{"!long"}},
		{name: "long line ends the stream", input: long + "\nnext\n", want: []string{"!long"}},
		{name: "endless line", input: long + long + long, want: []string{"!long"}},
		{name: "max+1 at EOF is too long", input: "a\n" + strings.Repeat("y", max+1), want: []string{"a", "!long"}},
		{name: "empty", input: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := bufio.NewReaderSize(strings.NewReader(tt.input), 16)
			var got []string
			for range 10 {
				line, err := readLine(r, max)
				if errors.Is(err, io.EOF) {
					break
				}
				if errors.Is(err, errLineTooLong) {
					got = append(got, "!long")
					break
				}
				if err != nil {
					t.Fatalf("readLine: %v", err)
				}
				got = append(got, string(line))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Errorf("lines %q, want %q", got, tt.want)
			}
		})
	}
}

// BenchmarkListProcs measures the /proc scan that Proc.tree repeats while a
// tree is closing (figure in procfs.go).
func BenchmarkListProcs(b *testing.B) {
	for b.Loop() {
		listProcs()
	}
}

// listProcs and environValue read /proc with raw syscalls (issue 18): the
// scan finds this process and a child with the fields readStat gives, and
// a variable is found behind an environment larger than the first buffer.
func TestListProcsAndLargeEnviron(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	big := strings.Repeat("x", 100<<10)
	cmd := exec.Command(helperPath(t))
	cmd.Env = append(os.Environ(), "DASHGATE_TEST_BIG="+big, helperEnv+"=linger", pidFileEnv+"="+pidFile, "DASHGATE_TEST_LAST=found")
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	startChild(t, cmd)
	pid := readPidFile(t, pidFile)

	var self, child procStat
	for _, st := range listProcs() {
		switch st.pid {
		case os.Getpid():
			self = st
		case pid:
			child = st
		}
	}
	if want, _ := readStat(os.Getpid()); self.pid == 0 || self.ppid != want.ppid || self.pgrp != want.pgrp || self.sid != want.sid {
		t.Errorf("listProcs: self is %+v, readStat says %+v", self, want)
	}
	if child.pid != pid || child.ppid != os.Getpid() || child.pgrp != pid || child.zombie() {
		t.Errorf("listProcs: child is %+v, want pid %d, ppid %d, pgrp %d, alive", child, pid, os.Getpid(), pid)
	}
	if got := environValue(pid, "DASHGATE_TEST_LAST"); got != "found" {
		t.Errorf("environValue after a 100 KiB variable = %q, want found", got)
	}
	if got := environValue(pid, "DASHGATE_TEST_BIG"); got != big {
		t.Errorf("environValue of the 100 KiB variable: %d bytes, want %d", len(got), len(big))
	}
	if got := environValue(pid, "DASHGATE_TEST"); got != "" {
		t.Errorf("environValue of a prefix of a name = %q, want \"\"", got)
	}
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, line string
		want       procStat
		ok         bool
	}{
		{"plain", "42 (sh) S 1 42 42 34816 42 4194560 ...", procStat{pid: 42, ppid: 1, pgrp: 42, sid: 42, state: 'S'}, true},
		{"comm with parens and spaces", "7 (a) b (c) Z 3 4 5 0", procStat{pid: 7, ppid: 3, pgrp: 4, sid: 5, state: 'Z'}, true},
		{"exactly four fields", "9 (x) R 1 2 3", procStat{pid: 9, ppid: 1, pgrp: 2, sid: 3, state: 'R'}, true},
		{"truncated", "9 (x) R 1 2", procStat{}, false},
		{"no comm", "9 x R 1 2 3", procStat{}, false},
		{"bad pid", "x9 (x) R 1 2 3", procStat{}, false},
		{"bad ppid", "9 (x) R one 2 3", procStat{}, false},
		{"empty", "", procStat{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseStat([]byte(tt.line))
			if ok != tt.ok || got != tt.want {
				t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// listSubtrees finds a tree's processes through the children files alone,
// the same that a scan of all of /proc finds below its root; a missing
// root is left out.
func TestListSubtrees(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("/bin/sh", "-c", "sleep 300 & (sleep 300 & wait) & wait")
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	startChild(t, cmd)
	t.Cleanup(func() { unix.Kill(-cmd.Process.Pid, unix.SIGKILL) })
	root := cmd.Process.Pid
	var want []int
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := testkit.Poll(ctx, func() bool {
		want = append(slices.Collect(maps.Keys(descendantsOf(listProcs(), root))), root)
		return len(want) == 4 // sh, sleep, the subshell, its sleep
	}); err != nil {
		t.Fatalf("the shell's tree: %v, want 4 processes: %v", want, err)
	}
	var got []int
	for _, st := range listSubtrees([]int{root, 1 << 30}) {
		got = append(got, st.pid)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("listSubtrees: %v, want %v (from all of /proc)", got, want)
	}
	if kids := childPIDs(nil, strconv.Itoa(root)); len(kids) != 2 {
		t.Errorf("childPIDs of the shell: %v, want its sleep and its subshell", kids)
	}
}

// ownTreeSetup counts the scans of the whole process table (scanProcs)
// until the test ends, and starts a chat child with a background sleep
// under a fallback Manager (no cgroups). The test process must be a
// subreaper, as dashgate is (TestMain enables it). Not for parallel
// tests: scanProcs is the process's.
func ownTreeSetup(t *testing.T) (*atomic.Int32, *Manager, *Proc) {
	t.Helper()
	if !isSubreaper() {
		t.Fatal("the test process is not a subreaper (TestMain enables it)")
	}
	var scans atomic.Int32
	scanProcs = func() []procStat { scans.Add(1); return listProcs() }
	t.Cleanup(func() { scanProcs = listProcs })
	m, _ := newTestManager(t, Config{})
	p, err := m.Start(Spec{Kind: KindChat, SessionID: "s-own", Path: "/bin/sh", Args: []string{"-c", "sleep 300 & exec sleep 300"}, Env: []string{"PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	return &scans, m, p
}

// A close under a subreaper (as dashgate runs: EnableSubreaper in TestMain
// too) reads the subtrees below dashgate, never the whole process table:
// with 300 workers beside it a scan per close was 600 stat files.
func TestCloseReadsOnlyOwnTree(t *testing.T) {
	scans, _, p := ownTreeSetup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := testkit.Poll(ctx, func() bool { return len(p.tree()) == 2 }); err != nil {
		t.Fatalf("the child and its background sleep: %v (tree %v)", err, p.tree())
	}
	if res := p.Close(ReasonSessionClosed); res.Descendants != 1 {
		t.Errorf("close: %+v, want the background sleep ended with it", res)
	}
	if n := scans.Load(); n != 0 {
		t.Errorf("the close scanned all of /proc %d times", n)
	}
}

// The admin's listings under a subreaper, a child's tree (Table, without
// cgroups) and the unowned descendants (Unowned), read the subtrees below
// dashgate too, never the whole process table, and still find both.
func TestAdminListingsReadOnlyOwnTree(t *testing.T) {
	scans, m, p := ownTreeSetup(t)
	t.Cleanup(func() { p.Close(ReasonShutdown) })
	out, err := Output(exec.Command("/bin/sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"))
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("orphan pid %q: %v", out, err)
	}
	killOnCleanup(t, orphan)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := testkit.Poll(ctx, func() bool {
		rows := m.Table(ctx)
		return len(rows) == 1 && len(rows[0].Descendants) == 1
	}); err != nil {
		t.Fatalf("Table: the child with its background sleep: %v (%+v)", err, m.Table(ctx))
	}
	found := false
	for _, u := range m.Unowned() {
		found = found || u.PID == orphan
	}
	if !found {
		t.Errorf("Unowned: %+v, want the orphan %d", m.Unowned(), orphan)
	}
	if n := scans.Load(); n != 0 {
		t.Errorf("the listings scanned all of /proc %d times", n)
	}
}

// BenchmarkListSubtrees is the listing a close does under a subreaper
// (Proc.claimed), beside BenchmarkListProcs, the scan it replaced.
func BenchmarkListSubtrees(b *testing.B) {
	for b.Loop() {
		listSubtrees(childPIDs(nil, "self"))
	}
}

// readString reads a file whole, past its first 512 bytes, and
// writeFile's bytes arrive whole; a file that cannot be opened reads as ""
// and fails the write with its path.
func TestReadStringWriteFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("0123456789", 200)
	if err := writeFile(path, text); err != nil {
		t.Fatal(err)
	}
	if got := readString(path); got != text {
		t.Fatalf("wrote %d bytes, read back %d", len(text), len(got))
	}
	missing := filepath.Join(t.TempDir(), "no", "such")
	if got := readString(missing); got != "" {
		t.Fatalf("readString of a missing file = %q", got)
	}
	if err := writeFile(missing, "1"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("writeFile of a missing file: %v", err)
	}
}

// appendPIDs reads a children file's text: pids separated by spaces, a
// space after the last, or nothing.
func TestAppendPIDs(t *testing.T) {
	t.Parallel()
	for text, want := range map[string][]int{
		"":             nil,
		"12 ":          {12},
		"12 345 6789 ": {12, 345, 6789},
		"7 8":          {7, 8},
		" 4194304 0 ":  {4194304, 0},
	} {
		if got := appendPIDs([]int{1}, []byte(text)); !slices.Equal(got, append([]int{1}, want...)) {
			t.Errorf("appendPIDs(%q) = %v, want 1 then %v", text, got, want)
		}
	}
}
