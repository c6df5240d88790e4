package transport

// PluginPID returns the process id of p's current plugin process, 0 while
// it restarts: tests kill it to prove the crash handling.
func PluginPID(p *Plugin) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.pid
}
