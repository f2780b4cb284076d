package workers

// CountByKind returns how many children of each kind are live (not yet
// closed).
func (m *Manager) CountByKind() map[Kind]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := map[Kind]int{}
	for _, p := range m.procs {
		n[p.spec.Kind]++
	}
	return n
}
