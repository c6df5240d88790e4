package fence

// Observer is told the outcome of every token decision a Guard or a Store
// makes, for metrics: admissions, and rejections by their reason. It runs
// on the deciding goroutine (inside the Guard's lock), so it must be quick
// and must not call back into the Guard. It sees only the Outcome, a
// bounded set fit for a metric label — never the resource or the token.
//
// An Observer cannot tell a paused holder from a regressed counter: both
// present a token below the watermark (Stale). A rising Stale rate is the
// alert for both; the issuing side reports a regression it can see itself
// (host/lease/fenced's FENCE_REGRESSION outcomes).
type Observer func(Outcome)

// Option configures a Guard or a Store.
type Option func(*config)

type config struct {
	observe Observer
}

// WithObserver sets the Observer of every decision (nil: none).
func WithObserver(o Observer) Option { return func(c *config) { c.observe = o } }

func configOf(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// observed reports o to obs, if there is one, and returns o.
func (c config) observed(o Outcome) Outcome {
	if c.observe != nil {
		c.observe(o)
	}
	return o
}
