package transport

import "syscall"

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

// WithNamespaceHook makes every launch of the plugin configured by c ask
// for its namespaces as hook leaves them: tests break them to prove the
// fallback to the host's.
func WithNamespaceHook(c *Config, hook func(*syscall.SysProcAttr)) { c.namespaceHook = hook }
