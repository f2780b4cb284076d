package users

import (
	"slices"
	"sync"
	"sync/atomic"
)

// File is the live Set of one users file. Safe for concurrent use;
// nothing to close.
type File struct {
	path   string
	reload sync.Mutex // one Reload at a time, so changed is computed against what it replaces
	cur    atomic.Pointer[Set]
}

// Open loads the users file at path (see Load for what it refuses).
func Open(path string) (*File, error) {
	s, err := Load(path)
	if err != nil {
		return nil, err
	}
	f := &File{path: path}
	f.cur.Store(s)
	return f, nil
}

// Path is the file's path as given to Open.
func (f *File) Path() string { return f.path }

// Current is the Set in force (never nil).
func (f *File) Current() *Set { return f.cur.Load() }

// Reload loads the file again. On error the current Set stays and the
// error (naming the path, and the line when one is malformed) is
// returned. On success the new Set replaces the old one atomically and
// changed lists, sorted, the users removed or whose line changed (a new
// token): their logins are no longer good and their sockets are the
// caller's to close. Users added are not in changed.
func (f *File) Reload() (changed []string, err error) {
	f.reload.Lock()
	defer f.reload.Unlock()
	s, err := Load(f.path)
	if err != nil {
		return nil, err
	}
	old := f.cur.Swap(s)
	for _, name := range old.names {
		was, _ := old.Stamp(name)
		if now, ok := s.Stamp(name); !ok || now != was {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	return changed, nil
}

// Verify is Current().Verify.
func (f *File) Verify(token string) (user string, ok bool) { return f.Current().Verify(token) }

// Stamp is Current().Stamp.
func (f *File) Stamp(user string) (stamp string, ok bool) { return f.Current().Stamp(user) }
