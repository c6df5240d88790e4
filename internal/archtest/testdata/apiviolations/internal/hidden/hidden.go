// Package hidden is internal: not API, so it is not scanned.
package hidden

// Do would be a violation outside internal/.
func Do(args ...any) {}
