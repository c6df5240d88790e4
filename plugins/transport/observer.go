package transport

import "time"

// RestartCause says why the supervisor restarts a plugin; a closed set, so
// it can be a metric label.
type RestartCause string

const (
	CauseExited       RestartCause = "exited"        // the process is gone (crash, kill)
	CauseUnhealthy    RestartCause = "unhealthy"     // gRPC health check failed or timed out
	CauseLaunchFailed RestartCause = "launch-failed" // the last relaunch did not come up
	CauseWedged       RestartCause = "wedged"        // calls in a row unanswered past their deadline (Config.WedgedAfter)
)

// Observer receives a plugin's lifecycle and call events so the host can
// turn them into metrics. Every label it is given is bounded: name is the
// configured transport name, cause and outcome are closed sets. Methods are
// called synchronously from the plugin's goroutines and must not block.
type Observer interface {
	// Restarting is called when the supervisor has decided to restart the
	// plugin, before it waits delay (the backoff) and relaunches.
	Restarting(name string, cause RestartCause, delay time.Duration)
	// Launched is called after each launch attempt (the first one and
	// every relaunch); err is nil when the plugin is up and configured.
	Launched(name string, err error)
	// Delivered is called when a Deliver call ends, with its outcome and
	// how long the call took.
	Delivered(name string, outcome Outcome, took time.Duration)
}

// BrokerObserver is implemented by an Observer that also counts the
// dial requests a plugin's connect broker refused. reason is a closed set:
// "not-declared" (a target the plugin did not declare at configure),
// "malformed", "oversized", "descriptors-sent" (a request carrying
// descriptors, which the host closes) and "busy" (the in-flight bound).
// Called from the broker's goroutine; must not block.
type BrokerObserver interface {
	BrokerRefused(name, reason string)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Restarting(string, RestartCause, time.Duration) {}
func (NopObserver) Launched(string, error)                         {}
func (NopObserver) Delivered(string, Outcome, time.Duration)       {}
