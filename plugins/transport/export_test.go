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

// WithoutNamespaces makes every launch of the plugin configured by c run
// it in the host's namespaces, as a host that cannot name its own does.
func WithoutNamespaces(c *Config) { c.testNamespaces = "shared" }

// WithRefusedNamespaces makes the tests' plugin (the misbehaving one)
// ask for namespaces the kernel refuses, at every launch.
func WithRefusedNamespaces(c *Config) { c.testNamespaces = "refused" }
